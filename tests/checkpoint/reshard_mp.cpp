// Sharded tensors saved at one world size and restored at another (run under mpirun):
//   reshard_mp save DIR STEP [alt]     every rank registers its chunks and saves STEP (content
//                                      depends on the step)
//   reshard_mp restore DIR [alt]       restores; prints "RESTORED <step>" and checks every byte of
//                                      its chunks against what that step saved ("CONTENT ok")
//   reshard_mp resave DIR NEWSTEP [alt]  restores, then saves what it restored as NEWSTEP
//   reshard_mp overlap DIR             rank 1's chunk of 'a' overlaps rank 0's: save must fail
//                                      with UsageError naming the tensor and both ranks
// Layouts (docs/checkpoint.md "Sharded tensors"): 'a' f32 [100003], uneven 1-D (rank r's share
// grows with r; `alt` reverses it); 'b' bf16 [37, 53], a grid of ranks (`alt`: rows only); 'c' f64
// [5, 7, 11] along its middle dimension, unevenly, so that some ranks hold empty chunks; 'd' i64 [3], held by
// the last rank alone; 'r' replicated f32 [16] and a replicated blob.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"

using namespace trainrt;
using Dims = std::vector<std::int64_t>;

namespace {

struct Chunk {
  std::string name;
  DType dtype;
  Dims global, offsets, shape;
  std::vector<std::uint8_t> bytes;
};

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return x;
}

// The saved value of element `i` of tensor `name` at `step`: raw bytes, any bit pattern.
void fill(Chunk& c, std::uint64_t step) {
  const std::size_t es = size_of(c.dtype);
  std::size_t n = 1;
  for (auto s : c.shape) n *= static_cast<std::size_t>(s);
  c.bytes.assign(n * es, 0);
  std::vector<std::int64_t> at(c.shape.size(), 0);
  for (std::size_t k = 0; k < n; ++k) {
    std::uint64_t g = 0;
    for (std::size_t d = 0; d < c.global.size(); ++d) g = g * static_cast<std::uint64_t>(c.global[d]) + static_cast<std::uint64_t>(c.offsets[d] + at[d]);
    const std::uint64_t v = mix(g * 1315423911u + step * 2654435761u + static_cast<std::uint64_t>(c.name[0]));
    std::memcpy(c.bytes.data() + k * es, &v, es);
    for (std::size_t d = c.shape.size(); d-- > 0;)
      if (++at[d] < c.shape[d]) break;
      else at[d] = 0;
  }
}

// [lo, hi) of part r of n over `len`, with weights w(r).
std::pair<std::int64_t, std::int64_t> weighted(std::int64_t len, unsigned r, unsigned n, bool reverse) {
  auto w = [&](unsigned i) { return static_cast<std::int64_t>(reverse ? n - i : i + 1); };
  std::int64_t total = 0, before = 0;
  for (unsigned i = 0; i < n; ++i) total += w(i);
  for (unsigned i = 0; i < r; ++i) before += w(i);
  return {len * before / total, len * (before + w(r)) / total};
}

std::vector<Chunk> layout(unsigned rank, unsigned world, bool alt) {
  std::vector<Chunk> out;
  auto [a0, a1] = weighted(100003, rank, world, alt);
  out.push_back({"a", DType::F32, {100003}, {a0}, {a1 - a0}, {}});
  unsigned p = 1;  // rows of the grid: the largest divisor of world up to its square root
  for (unsigned d = 1; d * d <= world; ++d)
    if (world % d == 0) p = d;
  if (alt) p = world;
  const unsigned q = world / p, pr = rank / q, pc = rank % q;
  auto [r0, r1] = weighted(37, pr, p, false);
  auto [c0, c1] = weighted(53, pc, q, true);
  out.push_back({"b", DType::BF16, {37, 53}, {r0, c0}, {r1 - r0, c1 - c0}, {}});
  auto [m0, m1] = weighted(7, rank, world, alt);  // empty for some ranks at 4 and more
  out.push_back({"c", DType::F64, {5, 7, 11}, {0, m0, 0}, {5, m1 - m0, 11}, {}});
  if (rank == world - 1) out.push_back({"d", DType::I64, {3}, {0}, {3}, {}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fmt::print(stderr, "usage: reshard_mp save DIR STEP [alt] | restore DIR [alt] | resave DIR NEWSTEP [alt] | overlap DIR\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  try {
    auto session = bootstrap::Session::open();
    const unsigned rank = session->rank(), world = session->size();
    const int alt_arg = mode == "save" || mode == "resave" ? 4 : 3;
    const bool alt = argc > alt_arg && std::string(argv[alt_arg]) == "alt";
    checkpoint::Options o;
    o.directory = dir;
    o.log = [rank](const std::string& m) { fmt::print(stderr, "[{}] {}\n", rank, m); };
    o.transfer_bytes = 64 << 10;  // small pieces: many rounds even for these small tensors
    checkpoint::Manager mgr(*session, o);
    auto chunks = layout(rank, world, alt);
    if (mode == "overlap" && rank == 1) chunks[0].offsets[0] -= 1, chunks[0].shape[0] += 1;
    std::vector<float> replicated(16);
    std::vector<std::uint8_t> blob{'m', 'e', 't', 'a'};
    const std::uint64_t step = mode == "save" ? std::stoull(argv[3]) : 0;
    for (auto& c : chunks) {
      fill(c, step);
      if (mode == "restore" || mode == "resave") std::fill(c.bytes.begin(), c.bytes.end(), 0xA5);
      mgr.register_buffer(c.name, c.bytes.data(), c.bytes.size(), c.dtype, c.shape, checkpoint::Shard{c.global, c.offsets});
    }
    for (std::size_t i = 0; i < replicated.size(); ++i) replicated[i] = mode == "save" ? static_cast<float>(step * 100 + i) : -1.f;
    mgr.register_buffer("r", replicated.data(), replicated.size() * 4, DType::F32, {16}, checkpoint::Sharding::Replicated);
    mgr.register_blob("meta", &blob, checkpoint::Sharding::Replicated);
    if (mode == "save" || mode == "overlap") {
      try {
        mgr.save(mode == "save" ? step : 1).get();
      } catch (const UsageError& e) {
        fmt::print("USAGE-ERROR {}\n", e.what());
        return mode == "overlap" ? 0 : 1;
      }
      fmt::print("SAVED {}\n", step);
      return mode == "overlap" ? 1 : 0;
    }
    const std::int64_t got = mgr.restore();
    fmt::print("RESTORED {}\n", got);
    std::string phases;
    for (const auto& p : mgr.last_restore().phases) phases += (phases.empty() ? "" : ",") + p.name;
    fmt::print("PHASES {}\n", phases);
    if (got < 0) return 0;
    if (mode == "resave") {
      mgr.save(std::stoull(argv[3])).get();
      fmt::print("SAVED {}\n", argv[3]);
    }
    std::size_t bad = 0;
    for (auto& c : chunks) {
      Chunk want = c;
      fill(want, static_cast<std::uint64_t>(got));
      if (want.bytes != c.bytes) {
        ++bad;
        fmt::print(stderr, "[{}] tensor '{}': restored chunk differs\n", rank, c.name);
      }
    }
    for (std::size_t i = 0; i < replicated.size(); ++i) bad += replicated[i] != static_cast<float>(got * 100 + i);
    bad += blob != std::vector<std::uint8_t>{'m', 'e', 't', 'a'};
    fmt::print("CONTENT {}\n", bad ? "BAD" : "ok");
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print("ERROR {}\n", e.what());
    return 1;
  }
}
