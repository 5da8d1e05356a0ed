// Multi-process collective tests, run by a real PMIx server (mpirun or srun --mpi=pmix).
//   collectives_mp verify     every collective x dtype x op x size against a scalar reference
//   collectives_mp mismatch   rank 1 passes a different count: every rank gets a UsageError naming it
//   collectives_mp alltoallv-mismatch   rank 1 expects a byte more from rank 0 than rank 0 sends:
//                             every rank gets a UsageError naming the pair (TRAINRT_HOST_BACKEND picks)
//   collectives_mp die        rank 1 dies before a collective: every other rank's blocking call
//                             throws PeerError (no wait() involved), fast; TRAINRT_HOST_BACKEND
//                             picks the backend (shm by default)
//   collectives_mp init       verify through trainrt::init() (shared memory in a node, Gloo across nodes)
//   collectives_mp sparse     verify on a Gloo group that connects only the pairs at distance 2^k
//                             (GlooPeers::PowersOfTwo): it opens exactly that many sockets, every
//                             collective but alltoallv is right, alltoallv is refused by name
// Prints one summary line per rank; exit 0 only when every check held.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/half.hpp"
#include "../common/typed_buffer.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

using namespace trainrt;
namespace k = trainrt::kernels;

namespace {

unsigned failures = 0, checks = 0;
unsigned my_rank = 0;
// Gloo reduces pairwise and rounds f16/bf16 after every step (so does the hierarchical backend,
// across nodes); the shared-memory backend rounds once.
bool half_rounds_once = true;

// `magnitude`: the sum of the inputs' magnitudes. Rounding after every step errs by up to half an
// ulp of each partial sum, and partial sums can be far larger than a result whose inputs cancel
// (4 nodes: errors of a few ulps of ~30 in a result of ~0.5), so the bound is the textbook one for
// recursive summation, (n - 1) u sum|x|, with one more rounding for Avg's division.
bool close_enough(double got, double want, DType t, unsigned n, double magnitude) {
  if (got == want) return true;
  if (half_rounds_once || (t != DType::F16 && t != DType::BF16)) return false;
  double u = t == DType::F16 ? 1.0 / 2048 : 1.0 / 256;  // half an ulp, relative
  return std::fabs(got - want) <= u * n * std::max(std::fabs(want), magnitude);
}

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok && failures++ < 20) fmt::print(stderr, "rank {}: FAIL {}\n", my_rank, what);
}

// The value rank r contributes at index i, as a double; stored in each dtype exactly.
double value(unsigned r, std::size_t i, DType t) {
  std::uint64_t h = (r + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 31;
  double v = static_cast<double>(static_cast<std::int64_t>(h % 2001) - 1000);
  if (t == DType::I32 || t == DType::I64) return v;
  if (t == DType::BF16) return std::fmod(v, 128.0) / 4.0;  // 8 significant bits: exact in bf16
  return v / 64.0;  // exact in f16, f32 and f64
}

using trainrt::testing::load;
using trainrt::testing::store;

double magnitude(std::size_t i, DType t, ReduceOp op, unsigned n) {
  double m = 0;
  for (unsigned r = 0; r < n; ++r) m += std::fabs(value(r, i, t));
  return op == ReduceOp::Avg ? m / n : m;
}

// Straightforward sequential reference: one element at a time, ranks in order.
double reference(std::size_t i, DType t, ReduceOp op, unsigned n) {
  double acc = value(0, i, t);
  for (unsigned r = 1; r < n; ++r) {
    double v = value(r, i, t);
    acc = op == ReduceOp::Min ? std::min(acc, v) : op == ReduceOp::Max ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::Avg) acc = (t == DType::I32 || t == DType::I64) ? std::trunc(acc / n) : acc / n;
  // What the dtype can hold: round through it.
  std::vector<std::uint8_t> tmp(8);
  store(tmp.data(), 0, t, acc);
  return load(tmp.data(), 0, t);
}

void verify_alltoallv(Communicator& comm);

void verify(Communicator& comm, bool with_alltoallv = true) {
  const unsigned n = comm.size(), me = comm.rank();
  const std::vector<std::size_t> sizes = {0, 1, 3, 4097, 70001};
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    const std::size_t es = size_of(t);
    for (std::size_t count : sizes) {
      // +3 elements: the collective sees a pointer that is not vector-aligned.
      std::vector<std::uint8_t> in((count + 3) * es), out((count + 3) * es);
      void* pin = in.data() + 3 * es;
      void* pout = out.data() + 3 * es;
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
        for (bool in_place : {false, true}) {
          for (std::size_t i = 0; i < count; ++i) store(pin, i, t, value(me, i, t));
          void* dst = in_place ? pin : pout;
          comm.allreduce(pin, dst, count, t, op);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i)
            bad += !close_enough(load(dst, i, t), reference(i, t, op, n), t, n, magnitude(i, t, op, n));
          check(bad == 0, fmt::format("allreduce {} {} count {}{}: {} wrong", to_string(t), to_string(op), count,
                                      in_place ? " in-place" : "", bad));
        }
      }
      // allgather
      std::vector<std::uint8_t> all(count * n * es + es);
      for (std::size_t i = 0; i < count; ++i) store(pin, i, t, value(me, i, t));
      comm.allgather(pin, all.data(), count, t);
      std::size_t bad = 0;
      for (unsigned r = 0; r < n; ++r)
        for (std::size_t i = 0; i < count; ++i) bad += load(all.data(), r * count + i, t) != value(r, i, t);
      check(bad == 0, fmt::format("allgather {} count {}: {} wrong", to_string(t), count, bad));
      // broadcast from every root
      for (unsigned root = 0; root < n; ++root) {
        for (std::size_t i = 0; i < count; ++i) store(pin, i, t, value(me, i, t));
        comm.broadcast(pin, count, t, root);
        bad = 0;
        for (std::size_t i = 0; i < count; ++i) bad += load(pin, i, t) != value(root, i, t);
        check(bad == 0, fmt::format("broadcast {} count {} root {}: {} wrong", to_string(t), count, root, bad));
      }
      // reduce_scatter: block r of the reduction of everyone's n*count inputs
      std::vector<std::uint8_t> big(count * n * es + es), mine(count * es + es);
      for (std::size_t i = 0; i < count * n; ++i) store(big.data(), i, t, value(me, i, t));
      comm.reduce_scatter(big.data(), mine.data(), count, t, ReduceOp::Sum);
      bad = 0;
      for (std::size_t i = 0; i < count; ++i)
        bad += !close_enough(load(mine.data(), i, t), reference(me * count + i, t, ReduceOp::Sum, n), t, n,
                             magnitude(me * count + i, t, ReduceOp::Sum, n));
      check(bad == 0, fmt::format("reduce_scatter {} count {}: {} wrong", to_string(t), count, bad));
    }
  }

  // Determinism: random floats whose sums round, twice; bitwise equal across runs and ranks.
  const std::size_t count = 300007;
  std::mt19937 rng(1234 + me);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> x(count), a(count), b(count);
  for (auto& v : x) v = dist(rng) * std::pow(10.f, static_cast<float>(rng() % 7) - 3.f);
  comm.allreduce(x.data(), a.data(), count, DType::F32, ReduceOp::Sum);
  comm.allreduce(x.data(), b.data(), count, DType::F32, ReduceOp::Sum);
  check(std::memcmp(a.data(), b.data(), count * 4) == 0, "allreduce is not bitwise repeatable");
  std::vector<float> first(count);
  std::memcpy(first.data(), a.data(), count * 4);
  comm.broadcast(first.data(), count, DType::F32, 0);
  check(std::memcmp(first.data(), a.data(), count * 4) == 0, "ranks disagree bitwise on the allreduce result");

  // Async: several in flight, waited out of order, results still right.
  std::vector<std::vector<std::int64_t>> bufs(4, std::vector<std::int64_t>(1000));
  std::vector<Work> works;
  for (unsigned j = 0; j < bufs.size(); ++j) {
    for (std::size_t i = 0; i < 1000; ++i) bufs[j][i] = static_cast<std::int64_t>(me * 1000 + i + j);
    works.push_back(comm.allreduce_async(bufs[j].data(), bufs[j].data(), 1000, DType::I64, ReduceOp::Sum));
  }
  check(works.back().wait_for(std::chrono::seconds(30)), "async allreduce did not finish in 30 s");
  for (auto& w : works) w.wait();
  check(works[0].test(), "test() false after wait()");
  std::int64_t want = 0;
  for (unsigned r = 0; r < n; ++r) want += r * 1000 + 7 + 2;
  check(bufs[2][7] == want, fmt::format("async result {} != {}", bufs[2][7], want));
  comm.barrier();

  // Gradient bucketing: 500 tensors of odd sizes in 64 KiB buckets, averaged.
  std::vector<std::vector<float>> grads(500);
  std::vector<kernels::TensorRef> refs;
  for (std::size_t t = 0; t < grads.size(); ++t) {
    grads[t].resize(1 + (t * 37) % 2000);
    for (std::size_t i = 0; i < grads[t].size(); ++i) grads[t][i] = static_cast<float>(value(me, t * 4096 + i, DType::F32));
    refs.push_back({grads[t].data(), grads[t].size()});
  }
  GradientBucketer bucketer(comm, refs, DType::F32, 64 << 10);
  bucketer.allreduce(ReduceOp::Avg);
  std::size_t bad = 0;
  for (std::size_t t = 0; t < grads.size(); ++t)
    for (std::size_t i = 0; i < grads[t].size(); ++i)
      bad += grads[t][i] != static_cast<float>(reference(t * 4096 + i, DType::F32, ReduceOp::Avg, n));
  check(bad == 0 && bucketer.bucket_count() > 1,
        fmt::format("bucketed allreduce: {} wrong in {} buckets", bad, bucketer.bucket_count()));
  if (with_alltoallv) verify_alltoallv(comm);
}

std::size_t open_sockets() {
  std::size_t n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += std::filesystem::read_symlink(fd.path(), ec).string().starts_with("socket:");
  }
  return n;
}

// A Gloo group of the pairs at distance 2^k: one socket per such peer (Gloo's TCP pair keeps one
// connected socket), the collectives the node leaders run are right, alltoallv is refused.
int sparse(bootstrap::Session& session, const CommOptions& opts) {
  const std::size_t before = open_sockets();
  auto comm = make_gloo_communicator(session, opts, {}, {}, GlooRendezvous::Exchange, GlooPeers::PowersOfTwo);
  const std::size_t opened = open_sockets() - before;
  const std::size_t peers = gloo_peers(session.rank(), session.size(), GlooPeers::PowersOfTwo).size();
  check(opened == peers, fmt::format("the sparse group opened {} sockets for {} peers", opened, peers));
  half_rounds_once = false;
  verify(*comm, false);
  if (peers + 1 < session.size()) {
    std::vector<std::size_t> sizes(session.size(), 0);
    bool refused = false;
    try {
      comm->alltoallv(nullptr, sizes, nullptr, sizes);
    } catch (const UsageError& e) {
      refused = std::string_view(e.what()).find("alltoallv needs every pair") != std::string_view::npos;
    }
    check(refused, "alltoallv on a group with missing pairs was not refused by name");
  }
  fmt::print("rank {} of {}: {} peers, {} sockets; {} passed, {} failed\n", session.rank(), session.size(), peers, opened,
             checks - failures, failures);
  return failures ? 1 : 0;
}

// Rank 1 dies; every survivor's next blocking collective must throw PeerError by itself (no
// wait() to call), the communicator must stay failed (PeerError again, async too), within `limit`.
int die(Communicator& comm, double limit, bool must_name) {
  std::vector<float> buf(1000, 1.f);
  comm.barrier();
  if (my_rank == 1) ::_exit(9);
  auto t0 = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 100; ++i) comm.allreduce(buf.data(), buf.data(), 1000, DType::F32, ReduceOp::Sum);
  } catch (const PeerError& e) {
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool again = false, async_again = false;
    try {
      comm.allreduce(buf.data(), buf.data(), 1000, DType::F32, ReduceOp::Sum);
    } catch (const PeerError& next) {
      again = next.kind() == e.kind() && next.ranks() == e.ranks();  // the first failure, as data too
    }
    try {
      comm.allreduce_async(buf.data(), buf.data(), 1000, DType::F32, ReduceOp::Sum).wait();
    } catch (const PeerError&) {
      async_again = true;
    }
    // Where the backend can tell, it says so in the message and in the fields alike.
    const bool named = !must_name || (std::string(e.what()).find("rank 1") != std::string::npos &&
                                      e.kind() == FailureKind::DeadPeer && e.ranks() == std::vector<unsigned>{1});
    const bool ok = s < limit && again && async_again && named;
    fmt::print("rank {}: {} after {:.2f} s (limit {:.0f} s){}{}{}: {}\n", my_rank, ok ? "DEATH-DETECTED" : "WRONG-ERROR", s,
               limit, again ? "" : ", the next call did not throw the same PeerError",
               async_again ? "" : ", async work did not throw PeerError", named ? "" : ", rank 1 not named", e.what());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print("rank {}: WRONG-ERROR (not a PeerError): {}\n", my_rank, e.what());
    return 1;
  }
  fmt::print("rank {}: death NOT detected\n", my_rank);
  return 1;
}

// Irregular personalised exchanges: every pair its own size (zero included), from a few bytes to
// several slot rounds and past the single-copy threshold; every byte checked.
std::uint8_t a2a_byte(unsigned s, unsigned d, std::size_t i) { return static_cast<std::uint8_t>(s * 31 + d * 17 + i * 7 + (i >> 8)); }
std::size_t a2a_size(unsigned s, unsigned d, std::size_t unit) { return ((s * 7 + d * 13) % 5) * unit + (s == d ? 3 : 0); }

void verify_alltoallv(Communicator& comm) {
  const unsigned n = comm.size(), me = comm.rank();
  for (std::size_t unit : {std::size_t{1}, std::size_t{1000}, std::size_t{100000}}) {
    std::vector<std::size_t> sb(n), rb(n);
    for (unsigned r = 0; r < n; ++r) sb[r] = a2a_size(me, r, unit), rb[r] = a2a_size(r, me, unit);
    std::vector<std::uint8_t> send, recv;
    for (unsigned d = 0; d < n; ++d)
      for (std::size_t i = 0; i < sb[d]; ++i) send.push_back(a2a_byte(me, d, i));
    std::size_t total = 0;
    for (auto x : rb) total += x;
    recv.assign(total, 0xee);
    comm.alltoallv(send.data(), sb, recv.data(), rb);
    std::size_t at = 0, bad = 0;
    for (unsigned s = 0; s < n; ++s)
      for (std::size_t i = 0; i < rb[s]; ++i) bad += recv[at++] != a2a_byte(s, me, i);
    check(bad == 0, fmt::format("alltoallv unit {}: {} wrong bytes", unit, bad));
  }
}

// Every rank must get a UsageError whose message holds `needle` and whose failure is a mismatch
// (between `ranks`, when given).
int expect_mismatch(const std::function<void()>& call, std::string_view needle, const std::vector<unsigned>& ranks = {}) {
  try {
    call();
  } catch (const UsageError& e) {
    const bool named = std::string_view(e.what()).find(needle) != std::string_view::npos && e.failure() &&
                       e.failure()->kind == FailureKind::Mismatch && (ranks.empty() || e.failure()->ranks == ranks);
    fmt::print("rank {}: {}: {}\n", my_rank, named ? "MISMATCH-DETECTED" : "WRONG-ERROR", e.what());
    return named ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print("rank {}: WRONG-ERROR (not a UsageError): {}\n", my_rank, e.what());
    return 1;
  }
  fmt::print("rank {}: mismatch NOT detected\n", my_rank);
  return 1;
}

// Rank 1 expects a byte more from rank 0 than rank 0 sends.
int alltoallv_mismatch(Communicator& comm) {
  const unsigned n = comm.size(), me = comm.rank();
  std::vector<std::size_t> sb(n, 4), rb(n, 4);
  if (me == 1) rb[0] = 5;
  std::vector<std::uint8_t> send(4 * n), recv(4 * n + 1);
  return expect_mismatch([&] { comm.alltoallv(send.data(), sb, recv.data(), rb); },
                         "rank 0 sends 4 bytes to rank 1, which expects 5", {0, 1});
}

// Rank 1 passes a different count.
int mismatch(Communicator& comm) {
  std::vector<float> buf(1000, 1.f);
  return expect_mismatch(
      [&] { comm.allreduce(buf.data(), buf.data(), my_rank == 1 ? 999 : 1000, DType::F32, ReduceOp::Sum); }, "mismatched");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "verify";
  try {
    CommOptions opts;
    opts.slot_bytes = 64 << 10;  // small slots: every size above crosses several chunks
    // Shared memory names a dead rank in ~20 ms; Gloo may only learn it from its timeout.
    if (mode == "die" || mode == "mismatch") opts.timeout = std::chrono::seconds(10);
    InitOptions io;
    io.comm = opts;
    io.nccl = DeviceComm::Off;
    if (mode == "alltoallv-mismatch") {
      auto rt = trainrt::init(io);
      my_rank = rt->rank;
      return alltoallv_mismatch(*rt->host);
    }
    if (mode == "init" || mode == "die") {
      // Through trainrt::init(): TRAINRT_HOST_BACKEND picks the backend (shared memory by default).
      auto rt = trainrt::init(io);
      my_rank = rt->rank;
      if (mode == "die") {
        const bool shm = rt->host->backend() == "shm";
        return die(*rt->host, shm ? 5.0 : 20.0, shm);
      }
      half_rounds_once = rt->host->backend() == "shm";
      verify(*rt->host);
      fmt::print("rank {} of {} ({}): {} passed, {} failed\n", rt->rank, rt->size, rt->describe(), checks - failures,
                 failures);
      return failures ? 1 : 0;
    }
    auto session = bootstrap::Session::open();
    my_rank = session->rank();
    if (mode == "sparse") return sparse(*session, opts);
    auto comm = make_shm_communicator(*session, opts);
    if (mode == "verify") {
      verify(*comm);
      fmt::print("rank {} of {}: {} passed, {} failed\n", comm->rank(), comm->size(), checks - failures, failures);
      return failures ? 1 : 0;
    }
    if (mode == "mismatch") return mismatch(*comm);
    fmt::print(stderr, "unknown mode '{}'; valid: verify, init, sparse, mismatch, alltoallv-mismatch, die\n", mode);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", my_rank, e.what());
    return 1;
  }
}
