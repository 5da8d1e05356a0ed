// The communicators' failure policy and device choice, in one process (no PMIx, no GPU):
// typed errors, usage errors that leave a communicator usable, blocking calls that throw without
// wait(), aborted communicators, the shared-memory segment never left behind, and the pure device
// selection and NCCL placement rules.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

using namespace trainrt;

namespace {

std::unique_ptr<Communicator> one_rank(bootstrap::Session& s, CommOptions o = {}) {
  return make_shm_communicator(s, o);
}

// Names in /dev/shm of segments this process created ("/trainrt-<pid>-...").
std::vector<std::string> my_segments() {
  std::vector<std::string> out;
  const std::string prefix = "trainrt-" + std::to_string(::getpid()) + "-";
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

}  // namespace

TEST_CASE("error kinds derive from trainrt::Error and keep the context prefix") {
  try {
    throw PeerError("rank 3 died", "shm");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "shm: rank 3 died");
    CHECK(e.bare_what() == "rank 3 died");
    CHECK(dynamic_cast<const PeerError*>(&e) != nullptr);
    CHECK(dynamic_cast<const UsageError*>(&e) == nullptr);
  }
  CHECK_THROWS_AS(throw UsageError("bad root"), Error);
}

TEST_CASE("a bad argument is a UsageError before anything starts, and the communicator stays usable") {
  auto session = bootstrap::Session::single_process();
  auto comm = one_rank(*session);
  float a[4] = {1, 2, 3, 4}, b[4] = {};
  CHECK_THROWS_AS(comm->allreduce(a, b, 4, static_cast<DType>(42), ReduceOp::Sum), UsageError);
  CHECK_THROWS_AS(comm->allreduce(a, b, 4, DType::F32, static_cast<ReduceOp>(9)), UsageError);
  CHECK_THROWS_AS(comm->allreduce(nullptr, b, 4, DType::F32, ReduceOp::Sum), UsageError);
  CHECK_THROWS_AS(comm->allgather(a, nullptr, 4, DType::F32), UsageError);
  CHECK_THROWS_AS(comm->broadcast(a, 4, DType::F32, 1), UsageError);
  CHECK_THROWS_AS(comm->allreduce(a, b, std::numeric_limits<std::size_t>::max() / 2, DType::F32, ReduceOp::Sum),
                  UsageError);
  CHECK_THROWS_AS(comm->allreduce_async(a, b, 4, static_cast<DType>(42), ReduceOp::Sum), UsageError);
  // Zero elements need no buffers.
  CHECK_NOTHROW(comm->allreduce(nullptr, nullptr, 0, DType::F32, ReduceOp::Sum));
  comm->allreduce(a, b, 4, DType::F32, ReduceOp::Sum);
  CHECK(b[3] == 4.f);
  comm->allreduce_async(a, b, 4, DType::F32, ReduceOp::Max).wait();
  comm->barrier();
}

TEST_CASE("an aborted communicator: blocking calls throw PeerError without wait(), async Work on wait()") {
  auto session = bootstrap::Session::single_process();
  auto comm = one_rank(*session);
  std::int64_t x = 5, y = 0;
  comm->allreduce(&x, &y, 1, DType::I64, ReduceOp::Sum);
  CHECK(y == 5);
  comm->abort("the watchdog gave up");
  try {
    comm->allreduce(&x, &y, 1, DType::I64, ReduceOp::Sum);
    FAIL("a blocking allreduce on an aborted communicator returned");
  } catch (const PeerError& e) {
    CHECK(std::string(e.what()).find("the watchdog gave up") != std::string::npos);
    CHECK(e.kind() == FailureKind::Aborted);
    CHECK(e.ranks().empty());  // aborted on this rank, not because a peer failed
  }
  CHECK_THROWS_AS(comm->barrier(), PeerError);
  Work w = comm->broadcast_async(&x, 1, DType::I64, 0);
  CHECK_THROWS_AS(w.wait(), PeerError);
  // Argument checks still come first and say UsageError.
  CHECK_THROWS_AS(comm->broadcast(&x, 1, DType::I64, 7), UsageError);
}

TEST_CASE("a shared-memory segment whose mapping fails is removed from /dev/shm") {
  auto session = bootstrap::Session::single_process();
  CommOptions o;
  o.slot_bytes = std::size_t{1} << 50;  // ftruncate succeeds on tmpfs, the 3 PiB mapping cannot
  const auto before = my_segments();
  CHECK_THROWS_AS(make_shm_communicator(*session, o), Error);
  CHECK(my_segments() == before);
}

// Two ranks of one node as two threads of this process: rank 0's broadcast hands the segment's
// name to rank 1 through a promise.
class ThreadRank final : public bootstrap::Session {
 public:
  ThreadRank(unsigned rank, std::shared_future<bootstrap::Blob> name, std::promise<bootstrap::Blob>* give)
      : rank_(rank), name_(std::move(name)), give_(give) {}
  unsigned rank() const override { return rank_; }
  unsigned size() const override { return 2; }
  unsigned local_rank() const override { return rank_; }
  unsigned local_size() const override { return 2; }
  unsigned node_id() const override { return 0; }
  std::vector<unsigned> local_peers() const override { return {0, 1}; }
  std::vector<std::vector<unsigned>> ranks_by_node() override { return {{0, 1}}; }
  std::string job_id() const override { return "threads"; }
  bool is_single_process() const override { return false; }
  std::vector<bootstrap::Blob> allgather(std::span<const std::uint8_t>) override { throw Error("no fence here", "test"); }
  bootstrap::Blob broadcast(std::span<const std::uint8_t> data, unsigned) override {
    if (rank_ == 0) give_->set_value({data.begin(), data.end()});
    return rank_ == 0 ? bootstrap::Blob(data.begin(), data.end()) : name_.get();
  }
  void barrier() override { throw Error("the node's group must not need a fence of the launcher", "test"); }
  void publish(const std::string&, std::span<const std::uint8_t>) override {}
  bootstrap::Blob lookup(unsigned, const std::string&) override { throw Error("no lookups here", "test"); }

 private:
  unsigned rank_;
  std::shared_future<bootstrap::Blob> name_;
  std::promise<bootstrap::Blob>* give_;
};

// A node of two ranks, both threads of this process, with a timeout far beyond the tests' waits.
struct ThreadNode {
  std::promise<bootstrap::Blob> name;
  std::shared_future<bootstrap::Blob> got = name.get_future().share();
  ThreadRank r0{0, got, &name}, r1{1, got, nullptr};
  CommOptions options = [] {
    CommOptions o;
    o.timeout = std::chrono::seconds(20);
    return o;
  }();
};

TEST_CASE("a node's shared-memory group meets in its segment: a rank that never attaches is a timeout naming the count") {
  // Rank 0 of a two-rank node whose rank 1 never starts: the segment's name goes round (its
  // broadcast answers at once), nobody else ever attaches.
  ThreadNode node;
  node.options.timeout = std::chrono::milliseconds(300);
  const auto before = my_segments();
  try {
    make_shm_communicator(node.r0, node.options);
    FAIL("a group of two was built with one rank");
  } catch (const PeerError& e) {
    CHECK(e.kind() == FailureKind::Timeout);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("only 1 of the node's 2 ranks attached"));
  }
  CHECK(my_segments() == before);  // the name is gone on this way out too
}

long voluntary_switches_of_this_thread() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

TEST_CASE("ranks waiting for a late rank to attach sleep until it arrives, they do not poll") {
  // At start-up the first ranks of a node may wait seconds for the last; a wait that polls takes
  // the cores those still starting need (docs/scale.md). Rank 1 comes 300 ms late.
  ThreadNode node;
  std::unique_ptr<Communicator> c1;
  std::chrono::steady_clock::time_point rank1_ready;
  std::jthread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c1 = make_shm_communicator(node.r1, node.options);
    rank1_ready = std::chrono::steady_clock::now();
  });
  const long switches_before = voluntary_switches_of_this_thread();
  const auto t0 = std::chrono::steady_clock::now();
  auto c0 = make_shm_communicator(node.r0, node.options);
  const auto rank0_ready = std::chrono::steady_clock::now();
  const double waited_s = std::chrono::duration<double>(rank0_ready - t0).count();
  const long switches = voluntary_switches_of_this_thread() - switches_before;
  late.join();
  CHECK(waited_s > 0.2);  // it did wait for rank 1
  // Woken by rank 1's arrival: without the wake it would sleep out its 500 ms slice, ~200 ms
  // after rank 1 was ready.
  CHECK(std::chrono::duration<double, std::milli>(rank0_ready - rank1_ready).count() < 100);
  // Sleeping with a growing pause (the old wait) took ~150 switches over 300 ms.
  CHECK(switches < 20);
  // The two made one working group.
  std::vector<float> a{1, 2}, b{10, 20}, out0(2), out1(2);
  {
    std::jthread t1([&] { c1->allreduce(b.data(), out1.data(), 2, DType::F32, ReduceOp::Sum); });
    c0->allreduce(a.data(), out0.data(), 2, DType::F32, ReduceOp::Sum);
  }
  CHECK(out0 == std::vector<float>{11, 22});
  CHECK(out1 == std::vector<float>{11, 22});
}

double cpu_ms_of_this_thread() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

TEST_CASE("a rank waiting long in a collective sleeps, and its peer's arrival wakes it") {
  // Yielding in a loop forever kept a core busy for the whole wait: with 64 ranks a node on a
  // few cores, the waiting ranks took the CPU the late ones needed (docs/scale.md).
  ThreadNode node;
  std::unique_ptr<Communicator> c0, c1;
  {
    std::jthread t1([&] { c1 = make_shm_communicator(node.r1, node.options); });
    c0 = make_shm_communicator(node.r0, node.options);
  }
  std::vector<float> a{1, 2}, b{10, 20}, out0(2), out1(2);
  // (Rank 0's wake itself is the attach test's: the same futex. This one proves the sleep.)
  std::jthread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    c1->allreduce(b.data(), out1.data(), 2, DType::F32, ReduceOp::Sum);
  });
  const double cpu_before = cpu_ms_of_this_thread();
  const auto t0 = std::chrono::steady_clock::now();
  c0->allreduce(a.data(), out0.data(), 2, DType::F32, ReduceOp::Sum);
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_ms_of_this_thread() - cpu_before;
  late.join();
  CHECK(out0 == std::vector<float>{11, 22});
  CHECK(out1 == std::vector<float>{11, 22});
  CHECK(waited_ms > 400);
  CHECK(waited_ms < 5000);  // woken when rank 1 came, not at the timeout
  CHECK(cpu < 150);         // yielding all the way used ~the whole 500 ms
}

TEST_CASE("device buckets need an NCCL communicator") {
  auto session = bootstrap::Session::single_process();
  auto comm = one_rank(*session);
  std::vector<float> g(8);
  CHECK_THROWS_AS(GradientBucketer(*comm, {{g.data(), g.size()}}, DType::F32, 1024, Memory::Device), UsageError);
  CHECK_THROWS_AS(GradientBucketer(*comm, {{g.data(), g.size()}}, DType::F32, 0), UsageError);
}

TEST_CASE("the CUDA device: TRAINRT_CUDA_DEVICE, else the local rank among several visible, else 0") {
  // The plugin names the task's own GPU's position.
  CHECK(choose_cuda_device("3", 0, "4,5,6,7", 4) == 3);
  CHECK(choose_cuda_device("0", 5, "2", 1) == 0);
  CHECK_THROWS_AS(choose_cuda_device("4", 0, "0,1,2,3", 4), Error);
  CHECK_THROWS_AS(choose_cuda_device("x", 0, nullptr, 4), Error);
  CHECK_THROWS_AS(choose_cuda_device("-1", 0, nullptr, 4), Error);
  CHECK_THROWS_AS(choose_cuda_device("1a", 0, nullptr, 4), Error);
  // Several visible: the local rank, when it names one.
  CHECK(choose_cuda_device(nullptr, 2, "0,1,2,3", 4) == 2);
  CHECK(choose_cuda_device("", 1, "GPU-aaaa,GPU-bbbb", 2) == 1);
  CHECK(choose_cuda_device(nullptr, 3, nullptr, 8) == 3);  // unset: every device is visible
  // One visible (Slurm's --gpus-per-task=1), or more ranks than devices: device 0.
  CHECK(choose_cuda_device(nullptr, 5, "5", 1) == 0);
  CHECK(choose_cuda_device(nullptr, 2, "0,1", 2) == 0);
  CHECK(choose_cuda_device(nullptr, 1, nullptr, 1) == 0);
}

TEST_CASE("NCCL placement: every rank needs a GPU of its own on its node") {
  CHECK_FALSE(nccl_placement_problem({{0, 0, "0000:3b:00.0"}, {1, 0, "0000:5e:00.0"}}).has_value());
  // The same bus id on two nodes is two GPUs.
  CHECK_FALSE(nccl_placement_problem({{0, 0, "0000:3b:00.0"}, {1, 1, "0000:3b:00.0"}}).has_value());
  auto shared = nccl_placement_problem({{0, 0, "0000:3b:00.0"}, {1, 0, "0000:3b:00.0"}, {2, 0, "0000:5e:00.0"}});
  REQUIRE(shared.has_value());
  CHECK(shared->find("ranks 0,1 share GPU 0000:3b:00.0 on node 0") != std::string::npos);
  auto missing = nccl_placement_problem({{0, 0, "0000:3b:00.0"}, {1, 0, ""}});
  REQUIRE(missing.has_value());
  CHECK(missing->find("rank(s) 1 have no usable CUDA device") != std::string::npos);
}

// The pairs Gloo 5b14351's algorithms use, as its sources compute them: the ring allreduce and
// allgather (rank +- 1), the dissemination barrier (rank +- 2^k) and the binomial-tree broadcast
// from every root.
std::set<unsigned> gloo_algorithm_peers(unsigned r, unsigned n) {
  std::set<unsigned> out;
  for (unsigned long long d = 1; d < n; d <<= 1) {
    out.insert(static_cast<unsigned>((r + d) % n));
    out.insert(static_cast<unsigned>((r + n - d) % n));
  }
  unsigned dim = 0;
  while ((1ull << dim) < n) ++dim;
  for (unsigned root = 0; root < n; ++root) {
    const unsigned vrank = (r + n - root) % n;
    for (unsigned i = 0; i < dim; ++i) {
      const unsigned vpeer = vrank ^ (1u << i);
      if (vpeer < n) out.insert((vpeer + root) % n);
    }
  }
  out.erase(r);
  return out;
}

TEST_CASE("the sparse Gloo mesh holds every pair the leaders' collectives use, both ways, O(log n) per rank") {
  for (unsigned n = 1; n <= 300; ++n) {
    unsigned levels = 0;
    while ((1u << levels) < n) ++levels;
    for (unsigned r = 0; r < n; ++r) {
      const auto peers = trainrt::gloo_peers(r, n, trainrt::GlooPeers::PowersOfTwo);
      const std::set<unsigned> have(peers.begin(), peers.end());
      REQUIRE(have.size() == peers.size());
      REQUIRE(std::is_sorted(peers.begin(), peers.end()));
      REQUIRE(peers.size() <= 2 * levels);
      REQUIRE(!have.contains(r));
      for (unsigned p : gloo_algorithm_peers(r, n)) {
        INFO("n " << n << " rank " << r << " peer " << p);
        REQUIRE(have.contains(p));
      }
      for (unsigned p : peers) {
        const auto theirs = trainrt::gloo_peers(p, n, trainrt::GlooPeers::PowersOfTwo);
        REQUIRE(std::binary_search(theirs.begin(), theirs.end(), r));
      }
    }
  }
  CHECK(trainrt::gloo_peers(0, 12500, trainrt::GlooPeers::PowersOfTwo).size() == 28);
  CHECK(trainrt::gloo_peers(3, 7, trainrt::GlooPeers::All) == std::vector<unsigned>{0, 1, 2, 4, 5, 6});
  CHECK_THROWS_AS(trainrt::gloo_peers(7, 7, trainrt::GlooPeers::All), trainrt::UsageError);
}
