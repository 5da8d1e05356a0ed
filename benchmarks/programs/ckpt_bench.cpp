// ckpt-bench: checkpoint costs next to their floors, measured in the same run (A B A B).
//   mpirun -np 2 ckpt-bench DIR [MiB per rank ...]
// stall   : save() blocking time vs memcpy of the same bytes into preallocated memory
// persist : shard bytes / background persist time vs `dd if=/dev/zero bs=16M conv=fsync` of the same
//           size on the same filesystem, every rank at once (and, shown, dd with oflag=direct: the
//           shard's buffers are written with O_DIRECT)
// restore : restore() (read + verify every checksum, into the registered buffers) vs read() of the
//           same shard file into preallocated memory of its size, A B A B, median of 5; from the
//           page cache (warm) and, as root, after dropping it (cold: what a restarted job on a
//           fresh node sees)
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"

using namespace trainrt;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Reads the whole file into `into` (or, with `wrap`, over and over into its first bytes).
double read_file_seconds(const std::string& path, std::vector<char>& into, bool wrap = false) {
  auto t = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  std::size_t got = 0;
  ssize_t r;
  while ((wrap || got < into.size()) &&
         (r = ::read(fd, into.data() + (wrap ? 0 : got), std::min<std::size_t>(16 << 20, into.size() - (wrap ? 0 : got)))) > 0)
    got += static_cast<std::size_t>(r);
  ::close(fd);
  return since(t);
}

// Empties the page cache (root only); false when it cannot.
bool drop_page_cache() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  bool ok = ::write(fd, "1", 1) == 1;
  ::close(fd);
  return ok;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: ckpt-bench DIR [MiB per rank ...]\n");
    return 2;
  }
  std::string base = argv[1];
  std::vector<std::size_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::stoul(argv[i]));
  if (sizes.empty()) sizes = {256, 1024};
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (ec) {
    fmt::print(stderr, "ckpt-bench: cannot create {}: {}\n", base, ec.message());
    return 2;
  }
  auto session = bootstrap::Session::open({std::chrono::seconds(600), true});
  const unsigned rank = session->rank(), n = session->size();
  auto max_all = [&](double v) {
    double worst = v;
    for (const auto& b : session->allgather({reinterpret_cast<const std::uint8_t*>(&v), sizeof v})) {
      double x;
      std::memcpy(&x, b.data(), sizeof x);
      worst = std::max(worst, x);
    }
    return worst;
  };
  if (rank == 0) fmt::print("# ckpt-bench: {} ranks, directory {}\n", n, base);
  for (std::size_t mib : sizes) {
    const std::size_t bytes = mib << 20;
    std::vector<float> state(bytes / 4), copy(bytes / 4);
    for (std::size_t i = 0; i < state.size(); ++i) state[i] = static_cast<float>(i % 1000) * (rank + 1);
    std::string dir = fmt::format("{}/ckpt-{}", base, mib);
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 1;
    checkpoint::Manager mgr(*session, o);
    mgr.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
    double stall = 0, floor = 0, persist = 0, dd = 0, dd_direct = 0, end_to_end = 0;
    const int reps = 3;
    for (int r = 0; r < reps; ++r) {
      session->barrier();
      auto t = Clock::now();
      std::memcpy(copy.data(), state.data(), bytes);
      floor += max_all(since(t));
      session->barrier();
      auto result = mgr.save(static_cast<std::uint64_t>(r + 1));
      auto res = result.get();
      stall += max_all(res.stall_seconds);
      persist += max_all(res.persist_seconds);
      end_to_end += max_all(res.stall_seconds + res.persist_seconds);
      session->barrier();
      std::string cmd = fmt::format("dd if=/dev/zero of={}/dd-{}.bin bs=16M count={} conv=fsync status=none", base, rank,
                                    std::max<std::size_t>(1, mib / 16));
      auto td = Clock::now();
      if (std::system(cmd.c_str()) != 0) fmt::print(stderr, "dd failed\n");
      dd += max_all(since(td));
      ::unlink(fmt::format("{}/dd-{}.bin", base, rank).c_str());
      session->barrier();
      auto tdd = Clock::now();  // the page-cache-free write: what the disk itself gives
      if (std::system((cmd + " oflag=direct").c_str()) != 0) fmt::print(stderr, "dd oflag=direct failed\n");
      dd_direct += max_all(since(tdd));
      ::unlink(fmt::format("{}/dd-{}.bin", base, rank).c_str());
    }
    const std::string shard = fmt::format("{}/step_{:012}/rank_{:05}.shard", dir, reps, rank);
    std::vector<char> destination(static_cast<std::size_t>(std::filesystem::file_size(shard)));
    std::memset(destination.data(), 0, destination.size());  // preallocated: its pages exist, like the buffers'
    // cold: rank 0 empties the page cache before every timed read (all ranks wait for it).
    auto timed = [&](bool cold, auto&& body) {
      session->barrier();
      if (cold && rank == 0) drop_page_cache();
      session->barrier();
      auto t = Clock::now();
      body();
      return max_all(since(t));
    };
    std::uint8_t can_drop = rank == 0 ? drop_page_cache() : 0;
    can_drop = session->broadcast({&can_drop, 1}, 0).at(0);
    std::vector<char> reused(16 << 20);  // the read that keeps nothing: shown, not the floor
    double restore[2] = {0, 0}, plain_read[2] = {0, 0}, discarding_read = 0;
    for (int cold = 0; cold <= (can_drop ? 1 : 0); ++cold) {
      std::vector<double> a, b, c;
      for (int r = 0; r < 5; ++r) {
        a.push_back(timed(cold, [&] { mgr.restore(); }));
        b.push_back(timed(cold, [&] { read_file_seconds(shard, destination); }));
        if (!cold) c.push_back(timed(false, [&] { read_file_seconds(shard, reused, true); }));
      }
      restore[cold] = median(a);
      plain_read[cold] = median(b);
      if (!cold) discarding_read = median(c);
    }
    if (rank == 0) {
      double gb = static_cast<double>(bytes) / 1e9;
      fmt::print("{:>5} MiB/rank  stall {:7.1f} ms  memcpy {:7.1f} ms  ratio {:5.2f}x (goal <= 1.2x)\n", mib,
                 stall / reps * 1e3, floor / reps * 1e3, stall / floor);
      fmt::print("{:>5} MiB/rank  persist {:6.2f} GB/s/rank  dd conv=fsync {:6.2f} GB/s/rank  ratio {:5.2f}x (goal >= 0.9x)\n",
                 mib, gb / (persist / reps), gb / (dd / reps), (dd / reps) / (persist / reps));
      fmt::print("{:>5} MiB/rank  (dd oflag=direct conv=fsync, around the page cache: {:.2f} GB/s/rank, ratio {:.2f}x)\n", mib,
                 gb / (dd_direct / reps), (dd_direct / reps) / (persist / reps));
      for (int cold = 0; cold <= (can_drop ? 1 : 0); ++cold)
        fmt::print("{:>5} MiB/rank  restore {:7.1f} ms  plain read {:7.1f} ms  ratio {:5.2f}x of read speed, {} (goal >= 0.8x)\n",
                   mib, restore[cold] * 1e3, plain_read[cold] * 1e3, plain_read[cold] / restore[cold],
                   cold ? "cold page cache" : "warm page cache");
      fmt::print("{:>5} MiB/rank  (a read into a reused 16 MiB buffer, keeping nothing: {:.1f} ms)\n", mib, discarding_read * 1e3);
      if (!can_drop) fmt::print("{:>5} MiB/rank  restore from a cold page cache: not measured (needs root)\n", mib);
      // For benchmarks/checkpoint_vs_torch.sh.
      fmt::print("#figures mib={} stall_ms={:.2f} end_to_end_ms={:.2f} restore_warm_ms={:.2f}\n", mib, stall / reps * 1e3,
                 end_to_end / reps * 1e3, restore[0] * 1e3);
    }
    session->barrier();
    if (rank == 0) std::system(fmt::format("rm -rf '{}'", dir).c_str());
  }
  return 0;
}
