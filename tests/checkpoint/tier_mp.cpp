// The memory tier across "nodes" (run under mpirun; each rank is told its node's name, so nodes
// and their losses are simulated on one machine: a lost node is its tier directory removed):
//   tier_mp save|snapshot STEP  --dir D --base B --job J --nodes n1,n1,n2,n2 [--state perrank|sharded]
//                               [--buddies 0|1] [--parity G] [--floats N]
//   tier_mp restore             (same options)
// save/snapshot print "SAVED <step> in_memory=<0|1> buddies=<0|1>"; restore prints
// "RESTORED <step> <source> local=<n> moved=<n>" and then "CONTENT ok" when every byte of the
// rank's state is what that step saved (or "CONTENT bad ..."), and every fallback line.
// State: perrank: 'w' (f32, a size of its own per rank) and a blob, both per rank, so each rank
// needs exactly its own shard back; sharded: 'g' (f64 [4099], split unevenly over the world) and
// 'p' (replicated f32 [257]), restorable at any world size.
#include <fmt/format.h>

#include <cstring>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"

using namespace trainrt;

namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return x;
}

struct Args {
  std::string mode, dir, base = "/dev/shm", job = "tiertest", state = "perrank";
  std::uint64_t step = 0;
  std::vector<std::string> nodes;
  bool buddies = true;
  unsigned parity = 0;  // parity group size (0: buddy copies)
  std::size_t floats = 10000;  // perrank: rank 0's 'w' (rank r's has 37 r more)
};

struct State {
  std::vector<float> w;
  std::vector<std::uint8_t> blob;
  std::vector<double> g;
  std::vector<float> p;
  std::int64_t g_offset = 0;
};

constexpr std::int64_t kGlobal = 4099;

// Rank r of n holds [lo, hi) of g: uneven shares (r + 1).
std::pair<std::int64_t, std::int64_t> share(unsigned r, unsigned n) {
  const std::int64_t total = static_cast<std::int64_t>(n) * (n + 1) / 2;
  std::int64_t lo = 0;
  for (unsigned k = 0; k < r; ++k) lo += kGlobal * (k + 1) / total;
  std::int64_t hi = r + 1 == n ? kGlobal : lo + kGlobal * (r + 1) / total;
  return {lo, hi};
}

void fill(State& s, const Args& a, unsigned rank, unsigned world, std::uint64_t step) {
  if (a.state == "perrank") {
    s.w.resize(a.floats + rank * 37);
    for (std::size_t i = 0; i < s.w.size(); ++i) s.w[i] = static_cast<float>(mix(step * 7919 + rank * 1000003 + i) % 100000);
    s.blob.assign(5 + rank, static_cast<std::uint8_t>(step + rank));
  } else {
    auto [lo, hi] = share(rank, world);
    s.g_offset = lo;
    s.g.resize(static_cast<std::size_t>(hi - lo));
    for (std::size_t i = 0; i < s.g.size(); ++i) s.g[i] = static_cast<double>(mix(step * 31 + lo + i) % 1000000) / 7.0;
    s.p.resize(257);
    for (std::size_t i = 0; i < s.p.size(); ++i) s.p[i] = static_cast<float>(step * 1000 + i);
  }
}

Args parse(int argc, char** argv) {
  Args a;
  a.mode = argv[1];
  int i = 2;
  if (a.mode != "restore") a.step = std::stoull(argv[i++]);
  for (; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") a.dir = v;
    else if (k == "--base") a.base = v;
    else if (k == "--job") a.job = v;
    else if (k == "--state") a.state = v;
    else if (k == "--buddies") a.buddies = v == "1";
    else if (k == "--parity") a.parity = static_cast<unsigned>(std::stoul(v));
    else if (k == "--floats") a.floats = std::stoul(v);
    else if (k == "--nodes")
      for (auto part : split(v, ',')) a.nodes.emplace_back(part);
    else throw Error("unknown option " + k, "tier_mp");
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: tier_mp save|snapshot STEP | restore  --dir D --base B --job J --nodes a,b,...\n");
    return 2;
  }
  try {
    const Args a = parse(argc, argv);
    auto session = bootstrap::Session::open({std::chrono::seconds(120), true});
    const unsigned rank = session->rank(), world = session->size();
    if (a.nodes.size() != world) throw Error(fmt::format("--nodes names {} nodes for {} ranks", a.nodes.size(), world), "tier_mp");
    checkpoint::Options o;
    o.directory = a.dir;
    o.keep_last = 3;
    o.transfer_bytes = 1 << 20;  // several rounds even for these small shards
    o.memory_tier.enabled = true;
    o.memory_tier.base = a.base;
    o.memory_tier.job = a.job;
    o.memory_tier.node = a.nodes[rank];
    o.memory_tier.buddies = a.buddies;
    o.memory_tier.parity_group = a.parity;
    o.log = [rank](const std::string& m) {
      if (m.find("skipped") != std::string::npos || m.find("memory tier") != std::string::npos || rank == 0)
        fmt::print("LOG rank {}: {}\n", rank, m);
    };
    checkpoint::Manager m(*session, o);
    State s;
    if (a.state == "perrank") {
      fill(s, a, rank, world, a.step);  // sizes
      m.register_buffer("w", s.w.data(), s.w.size() * 4, DType::F32, {static_cast<std::int64_t>(s.w.size())});
      m.register_blob("rng", &s.blob);
    } else {
      fill(s, a, rank, world, a.step);
      m.register_buffer("g", s.g.data(), s.g.size() * 8, DType::F64, {static_cast<std::int64_t>(s.g.size())},
                        checkpoint::Shard{{kGlobal}, {s.g_offset}});
      m.register_buffer("p", s.p.data(), s.p.size() * 4, DType::F32, {257}, checkpoint::Sharding::Replicated);
    }
    if (a.mode == "save" || a.mode == "snapshot") {
      fill(s, a, rank, world, a.step);
      auto r = (a.mode == "save" ? m.save(a.step) : m.snapshot(a.step)).get();
      fmt::print("SAVED {} in_memory={} buddies={}\n", a.step, r.in_memory ? 1 : 0, r.buddy_protected ? 1 : 0);
      return 0;
    }
    const std::int64_t step = m.restore();
    const auto& rep = m.last_restore();
    fmt::print("RESTORED {} {} local={} moved={}\n", step, rep.source, rep.local_copies, rep.moved_copies);
    for (const auto& f : rep.fallbacks) fmt::print("FALLBACK rank {}: {}\n", rank, f);
    if (step < 0) return 0;
    State want;
    fill(want, a, rank, world, static_cast<std::uint64_t>(step));
    const bool same = a.state == "perrank" ? (want.w == s.w && want.blob == s.blob) : (want.g == s.g && want.p == s.p);
    fmt::print("CONTENT {}\n", same ? "ok" : fmt::format("bad on rank {}", rank));
    return 0;
  } catch (const std::exception& e) {
    fmt::print("ERROR {}\n", e.what());
    return 1;
  }
}
