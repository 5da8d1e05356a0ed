// ckpt-bench: checkpoint costs next to their floors, measured in the same run (A B A B).
//   mpirun -np 2 ckpt-bench DIR [MiB per rank ...]
// stall   : save() blocking time vs memcpy of the same bytes into preallocated memory, each rep
//           shown with the page faults and involuntary context switches the two copies took (the
//           slowest rank's), and with the memory tier (snapshot() into the rank's tmpfs file)
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
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "restore_phases.hpp"
#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/checkpoint/memory_tier.hpp"

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

// This thread's minor+major page faults and involuntary context switches so far.
struct Usage {
  long faults = 0, preempted = 0;
  static Usage now() {
    rusage u{};
    ::getrusage(RUSAGE_THREAD, &u);
    return {u.ru_minflt + u.ru_majflt, u.ru_nivcsw};
  }
};

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
    // CKPT_BENCH_LOG=1: the manager's own reports (which tier a restore used, its phases), timed.
    if (const char* v = std::getenv("CKPT_BENCH_LOG"); v && std::string(v) == "1") {
      const auto t_start = Clock::now();
      o.log = [t_start, rank](const std::string& m) { fmt::print(stderr, "[{:8.3f} s, rank {}] {}\n", since(t_start), rank, m); };
    }
    checkpoint::Manager mgr(*session, o);
    mgr.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
    double stall = 0, floor = 0, persist = 0, dd = 0, dd_direct = 0, end_to_end = 0;
    const int reps = 3;
    std::vector<std::string> rep_lines;
    for (int r = 0; r < reps; ++r) {
      session->barrier();
      const Usage c0 = Usage::now();
      auto t = Clock::now();
      std::memcpy(copy.data(), state.data(), bytes);
      const double copied = since(t);
      const Usage c1 = Usage::now();
      const double floor_r = max_all(copied);
      floor += floor_r;
      session->barrier();
      const Usage s0 = Usage::now();
      auto result = mgr.save(static_cast<std::uint64_t>(r + 1));
      const Usage s1 = Usage::now();
      auto res = result.get();
      const double stall_r = max_all(res.stall_seconds);
      stall += stall_r;
      rep_lines.push_back(fmt::format(
          "{:>5} MiB/rank  rep {}: stall {:6.1f} ms ({:.0f} faults, {:.0f} preempted)  memcpy {:6.1f} ms ({:.0f} faults, {:.0f} preempted)",
          mib, r, stall_r * 1e3, max_all(double(s1.faults - s0.faults)), max_all(double(s1.preempted - s0.preempted)),
          floor_r * 1e3, max_all(double(c1.faults - c0.faults)), max_all(double(c1.preempted - c0.preempted))));
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
    // The capture with the memory tier: snapshot()'s stall is the copy into the rank's tmpfs file.
    double tier_stall = 0, tier_floor = 0;
    std::string tier_off, tier_base, tier_job, memory_restore_source, disk_restore_source;
    double memory_restore = 0, disk_restore = 0, memory_read = 0;
    std::string tier_file;
    std::vector<char> state_bytes(bytes + (64 << 10));  // the tier file: the state and its header
    std::memset(state_bytes.data(), 0, state_bytes.size());
    bool dropped_for_tier = false;
    {
      std::string job = fmt::format("ckpt-bench-{}", ::getpid());
      const auto named = session->broadcast({reinterpret_cast<const std::uint8_t*>(job.data()), job.size()}, 0);
      job.assign(named.begin(), named.end());  // rank 0's: one tier for the ranks of this run
      checkpoint::Options t = o;
      t.directory = dir + "-tier";
      t.memory_tier.enabled = true;
      t.memory_tier.job = job;
      t.memory_tier.base = checkpoint::default_tier_base();  // named here, so the files below are found
      tier_base = t.memory_tier.base;
      tier_job = job;
      {  // tm's scope: the captures
      checkpoint::Manager tm(*session, t);
      tm.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
      // As a trainer starts: restore() (nothing to restore here) opens the tier and maps the
      // staging on the rank's tier file, every page allocated, so no snapshot's stall pays for that.
      tm.restore();
      tm.wait_idle();  // the mapping restore() leaves to the background
      for (int r = 0; r < reps; ++r) {
        session->barrier();
        const Usage c0 = Usage::now();
        auto tc = Clock::now();
        std::memcpy(copy.data(), state.data(), bytes);
        const double copied = since(tc);
        const Usage c1 = Usage::now();
        const double floor_r = max_all(copied);
        tier_floor += floor_r;
        session->barrier();
        const Usage s0 = Usage::now();
        auto result = tm.snapshot(static_cast<std::uint64_t>(r + 1));
        const Usage s1 = Usage::now();
        const auto res = result.get();
        const double stall_r = max_all(res.stall_seconds);
        tier_stall += stall_r;
        rep_lines.push_back(fmt::format(
            "{:>5} MiB/rank  tier rep {}: snapshot stall {:6.1f} ms ({:.0f} faults, {:.0f} preempted)  memcpy {:6.1f} ms ({:.0f} faults, {:.0f} preempted)",
            mib, r, stall_r * 1e3, max_all(double(s1.faults - s0.faults)), max_all(double(s1.preempted - s0.preempted)),
            floor_r * 1e3, max_all(double(c1.faults - c0.faults)), max_all(double(c1.preempted - c0.preempted))));
      }
      tier_off = tm.memory_tier_off();
      // Restore from memory: a save puts one step in the tier and the directory alike.
      tm.save(static_cast<std::uint64_t>(reps + 1)).get();
      tm.wait_idle();
      }  // tm gone: each restore below starts as a restarted process's does, nothing mapped
      // A new manager for each restore, timed until restore() returns; the mapping it leaves to
      // the background (for the next capture) is waited for outside the timing.
      std::vector<double> from_memory;
      for (int r = 0; r < 3; ++r) {
        checkpoint::Manager fm(*session, t);
        fm.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
        session->barrier();
        auto tr = Clock::now();
        fm.restore();
        from_memory.push_back(max_all(since(tr)));
        memory_restore_source = fm.last_restore().source;
        fm.wait_idle();
      }
      memory_restore = median(from_memory);
      // The floor of a copying restore: a plain read of this rank's tier file (its bytes in tmpfs)
      // into a buffer whose pages exist, no checksum, nothing else.
      const std::string shard_name = fmt::format("step_{:012}/rank_{:05}.shard", reps + 1, rank);
      for (const auto& f : std::filesystem::recursive_directory_iterator(fmt::format("{}/trainrt-{}/job-{}", tier_base, ::geteuid(), tier_job), ec))
        if (f.path().string().ends_with(shard_name)) tier_file = f.path().string();
      std::vector<double> reads;
      for (int r = 0; r < 3 && !tier_file.empty(); ++r) {
        session->barrier();
        reads.push_back(max_all(read_file_seconds(tier_file, state_bytes)));
      }
      if (!reads.empty()) memory_read = median(reads);
    }  // every rank's manager gone (their locks released) before rank 0 removes the tier
    session->barrier();
    if (rank == 0)
      for (const auto& line : checkpoint::remove_memory_tier(tier_base, tier_job)) fmt::print("# {}\n", line);
    session->barrier();
    {  // The same step from the directory, the page cache dropped before each (as root).
      checkpoint::Options d = o;
      d.directory = dir + "-tier";
      checkpoint::Manager dm(*session, d);
      dm.register_buffer("state", state.data(), bytes, DType::F32, {static_cast<std::int64_t>(state.size())});
      std::vector<double> from_disk;
      for (int r = 0; r < 3; ++r) {
        session->barrier();
        if (rank == 0) dropped_for_tier = drop_page_cache();
        session->barrier();
        auto tr = Clock::now();
        dm.restore();
        from_disk.push_back(max_all(since(tr)));
      }
      disk_restore = median(from_disk);
      disk_restore_source = dm.last_restore().source;
    }
    session->barrier();
    if (rank == 0) std::filesystem::remove_all(dir + "-tier", ec);
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
    bench::RestorePhaseMedians restore_phases[2];  // rank 0's
    for (int cold = 0; cold <= (can_drop ? 1 : 0); ++cold) {
      std::vector<double> a, b, c;
      for (int r = 0; r < 5; ++r) {
        a.push_back(timed(cold, [&] { mgr.restore(); }));
        restore_phases[cold].add(mgr.last_restore());
        b.push_back(timed(cold, [&] { read_file_seconds(shard, destination); }));
        if (!cold) c.push_back(timed(false, [&] { read_file_seconds(shard, reused, true); }));
      }
      restore[cold] = median(a);
      plain_read[cold] = median(b);
      if (!cold) discarding_read = median(c);
    }
    if (rank == 0) {
      double gb = static_cast<double>(bytes) / 1e9;
      for (const auto& line : rep_lines) fmt::print("{}\n", line);
      fmt::print("{:>5} MiB/rank  stall {:7.1f} ms  memcpy {:7.1f} ms  ratio {:5.2f}x (goal <= 1.2x)\n", mib,
                 stall / reps * 1e3, floor / reps * 1e3, stall / floor);
      if (tier_off.empty())
        fmt::print("{:>5} MiB/rank  memory tier: snapshot stall {:7.1f} ms  memcpy {:7.1f} ms  ratio {:5.2f}x (goal <= 1.1x)\n",
                   mib, tier_stall / reps * 1e3, tier_floor / reps * 1e3, tier_stall / tier_floor);
      else
        fmt::print("{:>5} MiB/rank  memory tier off: {}\n", mib, tier_off);
      fmt::print("{:>5} MiB/rank  restore from the memory tier {:7.1f} ms ({})  from the directory {:7.1f} ms ({}, {})  ratio {:5.2f}x (goal >= 5x)\n",
                 mib, memory_restore * 1e3, memory_restore_source, disk_restore * 1e3, disk_restore_source,
                 dropped_for_tier ? "page cache dropped" : "page cache NOT dropped: not root", disk_restore / memory_restore);
      if (memory_read > 0)
        fmt::print("{:>5} MiB/rank  restore from the memory tier {:7.1f} ms  plain read of its tier file {:7.1f} ms  ratio {:5.2f}x (the copy's floor)\n",
                   mib, memory_restore * 1e3, memory_read * 1e3, memory_restore / memory_read);
      fmt::print("{:>5} MiB/rank  persist {:6.2f} GB/s/rank  dd conv=fsync {:6.2f} GB/s/rank  ratio {:5.2f}x (goal >= 0.9x)\n",
                 mib, gb / (persist / reps), gb / (dd / reps), (dd / reps) / (persist / reps));
      fmt::print("{:>5} MiB/rank  (dd oflag=direct conv=fsync, around the page cache: {:.2f} GB/s/rank, ratio {:.2f}x)\n", mib,
                 gb / (dd_direct / reps), (dd_direct / reps) / (persist / reps));
      for (int cold = 0; cold <= (can_drop ? 1 : 0); ++cold)
        fmt::print("{:>5} MiB/rank  restore {:7.1f} ms  plain read {:7.1f} ms  ratio {:5.2f}x of read speed, {} (goal >= 0.8x)\n",
                   mib, restore[cold] * 1e3, plain_read[cold] * 1e3, plain_read[cold] / restore[cold],
                   cold ? "cold page cache" : "warm page cache");
      for (int cold = 0; cold <= (can_drop ? 1 : 0); ++cold)
        fmt::print("{:>5} MiB/rank  restore by phase, rank 0, {} page cache [median of 5]: {}\n", mib, cold ? "cold" : "warm",
                   restore_phases[cold].text());
      fmt::print("{:>5} MiB/rank  (a read into a reused 16 MiB buffer, keeping nothing: {:.1f} ms)\n", mib, discarding_read * 1e3);
      if (!can_drop) fmt::print("{:>5} MiB/rank  restore from a cold page cache: not measured (needs root)\n", mib);
      // For benchmarks/checkpoint_vs_torch.sh.
      fmt::print("#figures mib={} stall_ms={:.2f} end_to_end_ms={:.2f} restore_warm_ms={:.2f}\n", mib, stall / reps * 1e3,
                 end_to_end / reps * 1e3, restore[0] * 1e3);
    }
    session->barrier();
    if (rank == 0) std::filesystem::remove_all(dir, ec);
  }
  return 0;
}
