// ckpt-device-bench: checkpoints of device memory next to their floors, measured in the same run
// (A B A B, medians). One process, one GPU, the single-process bootstrap world.
//
//   ckpt-device-bench [--dir DIR] [--sizes MiB[,MiB...]] [--tensors N] [--reps N]
//
// Per size: N device tensors (default 16, f32 and bf16 alternating) carved from one cudaMalloc
// block, registered with Location::Device.
//   stall   : Manager::save() until it returns (what the training loop waits for) vs ONE plain
//             cudaMemcpy device->host of the whole block into pinned memory (cudaMallocHost,
//             allocated before timing); per-tensor cudaMemcpy shown too. Goal <= 1.1x.
//   persist : the background write + fsync + commit, shown (not a goal here).
//   restore : Manager::restore() into device memory vs a plain read() of the shard file into pinned
//             memory + one cudaMemcpy host->device of the same bytes. Goal >= 0.8x of its speed.
//             Before every timed read the shard's pages are dropped (fdatasync + posix_fadvise
//             DONTNEED; and /proc/sys/vm/drop_caches where writable) and mincore says how much was
//             still cached: the line names the method and the residency it saw.
// Every restore is checked: the device bytes are poisoned before it and compared, byte for byte,
// with the saved ones after it. A mismatch exits 1. PyTorch DCP's peer is benchmarks/ckpt_torch.py
// --device cuda; benchmarks/checkpoint_vs_torch.sh --device runs both and prints the ratios.
//
// Exit status: 0 measured (sizes without room say "not measured" and are left out; none measured is
// a failure, 1), 1 a wrong byte, any CUDA or checkpoint error, 2 usage, 77 no CUDA device
// ("# no CUDA device: ... not measured").
#include <cuda_runtime.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_presence.hpp"
#include "median.hpp"
#include "restore_phases.hpp"
#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/fd.hpp"

using namespace trainrt;
using bench::median;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{}: {} ({})", what, cudaGetErrorName(rc), cudaGetErrorString(rc)), "cuda");
}
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class DeviceBlock {
 public:
  explicit DeviceBlock(std::size_t bytes) { ck(cudaMalloc(&p_, bytes), "cudaMalloc"); }
  ~DeviceBlock() { cudaFree(p_); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(p_); }

 private:
  void* p_ = nullptr;
};

class Pinned {
 public:
  explicit Pinned(std::size_t bytes) { ck(cudaMallocHost(&p_, bytes), "cudaMallocHost"); }
  ~Pinned() { cudaFreeHost(p_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(p_); }

 private:
  void* p_ = nullptr;
};

// An owned descriptor of `path`, or Error naming it.
Fd open_file(const std::string& path, int flags) {
  Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) throw Error(std::strerror(errno), path);
  return fd;
}
// Runs body(begin, end) over [0, n) split across the cores (the 8 GiB pattern and comparisons
// would otherwise take seconds of the run).
template <class F>
void parallel(std::size_t n, F body) {
  const std::size_t k = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 16);
  std::vector<std::thread> ts;
  for (std::size_t i = 0; i < k; ++i) ts.emplace_back([&, i] { body(n * i / k, n * (i + 1) / k); });
  for (auto& t : ts) t.join();
}

// Not zeros, not a repeating short period: splitmix64 of the word index.
void fill_pattern(std::byte* p, std::size_t bytes, std::uint64_t seed) {
  parallel(bytes / 8, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      std::uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      std::memcpy(p + i * 8, &z, 8);
    }
  });
}

// Offset of the first differing byte, or `bytes` when equal.
std::size_t first_difference(const std::byte* a, const std::byte* b, std::size_t bytes) {
  std::vector<std::size_t> found(16, bytes);
  std::atomic<unsigned> slot{0};
  parallel(bytes, [&](std::size_t s, std::size_t e) {
    const unsigned me = slot++;
    if (std::memcmp(a + s, b + s, e - s) == 0) return;
    for (std::size_t i = s; i < e; ++i)
      if (a[i] != b[i]) {
        found[me] = i;
        return;
      }
  });
  return *std::min_element(found.begin(), found.end());
}

std::uint64_t free_disk(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) throw Error(std::strerror(errno), dir);
  return std::uint64_t{st.f_bavail} * st.f_frsize;
}
// What the checkpoint directory lives on: tmpfs means "disk" is memory and nothing can be cold.
std::string filesystem_of(const std::string& dir) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0) return "unknown";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x01021994: return "tmpfs (memory: restores cannot be cold)";
    case 0x794c7630: return "overlayfs";
    case 0x9123683E: return "btrfs";
    default: return fmt::format("f_type {:#x}", static_cast<unsigned long>(st.f_type));
  }
}

std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

// Evicts the file's pages; returns the method used. Clean pages go with DONTNEED, so the data is
// made durable first (it already is: the checkpoint fsynced it).
std::string drop_cached(const std::string& path) {
  {
    const Fd f = open_file(path, O_RDONLY);
    ::fdatasync(f.get());
    ::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  bool dropped = fd >= 0 && ::write(fd, "1", 1) == 1;
  if (fd >= 0) ::close(fd);
  return dropped ? "posix_fadvise DONTNEED + drop_caches" : "posix_fadvise DONTNEED";
}

// Fraction of the file's pages in the page cache (mincore).
double resident_fraction(const std::string& path) {
  const Fd f = open_file(path, O_RDONLY);
  struct stat st {};
  if (::fstat(f.get(), &st) != 0 || st.st_size == 0) return 0;
  const auto size = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.get(), 0);
  if (m == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> v((size + page - 1) / page);
  std::size_t in = 0;
  if (::mincore(m, size, v.data()) == 0)
    for (unsigned char c : v) in += c & 1;
  ::munmap(m, size);
  return static_cast<double>(in) / static_cast<double>(v.size());
}

// The restore peer's read: the whole file, sequentially, into `into` (its capacity `cap`), with the
// same readahead hint the checkpoint reader gives. Returns the bytes read.
std::size_t read_file(const std::string& path, std::byte* into, std::size_t cap) {
  const Fd f = open_file(path, O_RDONLY);
  ::posix_fadvise(f.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::size_t got = 0;
  while (got < cap) {
    const ssize_t r = ::read(f.get(), into + got, std::min<std::size_t>(64 * kMiB, cap - got));
    if (r < 0) throw Error(std::strerror(errno), path);
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

struct Args {
  std::string dir = "/tmp";
  std::vector<std::size_t> sizes_mib{1024, 8192};
  unsigned tensors = 16;
  unsigned reps = 0;  // 0: 3 up to 2 GiB, 2 above (keeps the 8 GiB case inside the run's budget)
};

// One size; false when it was not measured for lack of room. Throws on any error; exits 1 through
// main on a wrong byte.
bool run_size(const Args& a, const std::string& work, std::size_t mib, bootstrap::Session& session, int& wrong) {
  const std::size_t bytes = mib * kMiB;
  const unsigned reps = a.reps ? a.reps : (mib <= 2048 ? 3 : 2);
  // Room: the device block; three pinned copies (the manager's staging, the reference, the floor's
  // and check's readback, which is also the peer's read buffer) plus headroom for the page cache;
  // two steps on disk at once (keep_last=1 retires the older one only after the newer commit).
  std::size_t dev_free = 0, dev_total = 0;
  ck(cudaMemGetInfo(&dev_free, &dev_total), "cudaMemGetInfo");
  const std::uint64_t disk = free_disk(work), host = mem_available();
  if (dev_free < bytes + 256 * kMiB) {
    fmt::print("{:>5} MiB  not measured: only {:.1f} GiB free on the device\n", mib, dev_free / kGiB);
    return false;
  }
  if (host < 3 * bytes + 2 * kGiB) {
    fmt::print("{:>5} MiB  not measured: only {:.1f} GiB of host memory available (needs {:.1f})\n", mib, host / kGiB,
               (3 * bytes + 2 * kGiB) / kGiB);
    return false;
  }
  if (disk < 2 * bytes + kGiB) {
    fmt::print("{:>5} MiB  not measured: only {:.1f} GiB free in {} (needs {:.1f})\n", mib, disk / kGiB, work,
               (2 * bytes + kGiB) / kGiB);
    return false;
  }

  DeviceBlock dev(bytes);
  // The readback also takes the whole shard file for the restore peer: the shard is the tensors
  // plus its header page and entry alignment, far under the slack.
  const std::size_t readback_cap = bytes + 16 * kMiB;
  Pinned reference(bytes), readback(readback_cap);
  fill_pattern(reference.get(), bytes, 0x5eed0000 + mib);
  ck(cudaMemcpy(dev.get(), reference.get(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D (pattern)");

  const std::string dir = fmt::format("{}/ckpt-{}", work, mib);
  checkpoint::Options o;
  o.directory = dir;
  o.keep_last = 1;
  o.staging_cap_bytes = std::max(o.staging_cap_bytes, bytes);
  checkpoint::Manager mgr(session, o);
  // Carve the tensors at 4 KiB boundaries; the last takes the rest. f32 and bf16 alternate.
  const unsigned n = std::max(1u, a.tensors);
  const std::size_t chunk = std::max<std::size_t>(4096, bytes / n / 4096 * 4096);
  struct T {
    std::size_t offset, bytes;
  };
  std::vector<T> ts;
  for (std::size_t off = 0, i = 0; off < bytes; ++i) {
    const std::size_t b = i + 1 == n ? bytes - off : std::min(chunk, bytes - off);
    const DType dt = i % 2 ? DType::BF16 : DType::F32;
    mgr.register_buffer(fmt::format("t{:02}", i), dev.get() + off, b, dt,
                        {static_cast<std::int64_t>(b / size_of(dt))}, checkpoint::Sharding::PerRank,
                        checkpoint::Location::Device);
    ts.push_back({off, b});
    off += b;
  }

  // Stall vs floor, A B A B. The device is idle and the previous save fully done before each.
  std::vector<double> floor_one, floor_each, stall, stall_inside, persist;
  std::uint64_t step = 0;
  for (unsigned r = 0; r < reps; ++r) {
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    auto t = Clock::now();
    ck(cudaMemcpy(readback.get(), dev.get(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H (floor)");
    floor_one.push_back(since(t));
    t = Clock::now();
    for (const auto& x : ts)
      ck(cudaMemcpy(readback.get() + x.offset, dev.get() + x.offset, x.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    floor_each.push_back(since(t));
    t = Clock::now();
    auto future = mgr.save(++step);
    stall.push_back(since(t));
    const auto res = future.get();
    mgr.wait_idle();
    stall_inside.push_back(res.stall_seconds);
    persist.push_back(res.persist_seconds);
  }
  if (std::size_t at = first_difference(reference.get(), readback.get(), bytes); at != bytes) {
    fmt::print("FAIL: {} MiB: the floor copy differs from the pattern at byte {}\n", mib, at);
    ++wrong;
  }

  // Restore vs read + H2D, A B A B, pages dropped before each timed read.
  const std::string shard = fmt::format("{}/step_{:012}/rank_{:05}.shard", dir, step, 0u);
  const std::size_t shard_bytes = static_cast<std::size_t>(fs::file_size(shard));
  if (shard_bytes < bytes || shard_bytes > readback_cap)
    throw Error(fmt::format("{} bytes, outside the {}..{} a shard of {} saved bytes can hold", shard_bytes, bytes,
                            readback_cap, bytes),
                shard);
  std::byte* peer_buf = readback.get();
  std::string method;
  double worst_resident = 0;
  auto drop = [&] {
    method = drop_cached(shard);
    worst_resident = std::max(worst_resident, resident_fraction(shard));
  };
  std::vector<double> restore_s, plain_s, read_s, h2d_s;
  bench::RestorePhaseMedians phases;  // restore()'s own
  unsigned checked = 0;
  for (unsigned r = 0; r < reps; ++r) {
    ck(cudaMemset(dev.get(), 0xa5, bytes), "cudaMemset (poison)");
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    drop();
    auto t = Clock::now();
    const std::int64_t got = mgr.restore();
    restore_s.push_back(since(t));
    phases.add(mgr.last_restore());
    if (got != static_cast<std::int64_t>(step)) {
      fmt::print("FAIL: {} MiB: restore() returned step {}, saved {}\n", mib, got, step);
      ++wrong;
    }
    ck(cudaMemcpy(readback.get(), dev.get(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H (check)");
    if (std::size_t at = first_difference(reference.get(), readback.get(), bytes); at != bytes) {
      fmt::print("FAIL: {} MiB: restored device bytes differ from the saved ones at byte {} (restore {})\n", mib, at, r + 1);
      ++wrong;
    } else {
      ++checked;
    }
    drop();
    t = Clock::now();
    const std::size_t n_read = read_file(shard, peer_buf, shard_bytes);
    const double tr = since(t);
    // The same number of bytes the checkpoint holds for the tensors (the peer knows no layout).
    ck(cudaMemcpy(dev.get(), peer_buf, std::min(n_read, bytes), cudaMemcpyHostToDevice), "cudaMemcpy H2D (peer)");
    plain_s.push_back(since(t));
    read_s.push_back(tr);
    h2d_s.push_back(plain_s.back() - tr);
    if (n_read != shard_bytes) throw Error(fmt::format("read {} of {} bytes", n_read, shard_bytes), shard);
  }

  const double gb = static_cast<double>(bytes) / 1e9;
  const double st = median(stall), fl = median(floor_one), fe = median(floor_each), pe = median(persist);
  const double rs = median(restore_s), pl = median(plain_s);
  fmt::print("{:>5} MiB  save() stall {:8.2f} ms ({:.1f} GB/s; stall_seconds {:.2f} ms)  one cudaMemcpy D2H pinned {:8.2f} ms "
             "({:.1f} GB/s)  ratio {:.3f}x (goal <= 1.1x) [median of {}]\n",
             mib, st * 1e3, gb / st, median(stall_inside) * 1e3, fl * 1e3, gb / fl, st / fl, reps);
  fmt::print("{:>5} MiB  ({} cudaMemcpy D2H, one per tensor: {:.2f} ms, ratio of save() to it {:.3f}x)\n", mib, ts.size(),
             fe * 1e3, st / fe);
  fmt::print("{:>5} MiB  persist (write + fsync + commit, in the background) {:8.1f} ms ({:.2f} GB/s; shard {} bytes)\n", mib,
             pe * 1e3, gb / pe, shard_bytes);
  fmt::print("{:>5} MiB  restore() {:8.1f} ms ({:.2f} GB/s)  plain read + one cudaMemcpy H2D {:8.1f} ms (read {:.1f} + H2D {:.1f}) "
             "ratio {:.3f}x of its speed (goal >= 0.8x) [median of {}]\n",
             mib, rs * 1e3, gb / rs, pl * 1e3, median(read_s) * 1e3, median(h2d_s) * 1e3, pl / rs, reps);
  // Where the restore's time goes (read: the shard read and its checksums; install: the H2D copies).
  fmt::print("{:>5} MiB  restore() by phase [median of {}]: {}\n", mib, reps, phases.text());
  fmt::print("{:>5} MiB  page cache before each timed read: dropped by {}; at most {:.1f}% of the shard still cached (mincore)"
             " -> {}\n",
             mib, method, worst_resident * 100, worst_resident < 0.05 ? "cold for both" : "partly WARM for both");
  fmt::print("{:>5} MiB  restored device bytes equal the saved ones: {} of {} restores checked\n", mib, checked, reps);
  fmt::print("#device-figures mib={} stall_ms={:.3f} floor_ms={:.3f} floor_each_ms={:.3f} persist_ms={:.2f} restore_ms={:.2f} "
             "plain_restore_ms={:.2f} resident_pct={:.1f}\n",
             mib, st * 1e3, fl * 1e3, fe * 1e3, pe * 1e3, rs * 1e3, pl * 1e3, worst_resident * 100);
  std::fflush(stdout);
  return true;
}

int usage() {
  fmt::print(stderr, "usage: ckpt-device-bench [--dir DIR] [--sizes MiB[,MiB...]] [--tensors N] [--reps N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string k = argv[i];
      if (i + 1 >= argc) return usage();
      const std::string v = argv[++i];
      if (k == "--dir") {
        a.dir = v;
      } else if (k == "--sizes") {
        a.sizes_mib.clear();
        for (std::size_t p = 0; p <= v.size();) {
          const std::size_t q = std::min(v.find(',', p), v.size());
          const std::size_t m = std::stoul(v.substr(p, q - p));
          if (m == 0 || m > (std::size_t{1} << 20)) return usage();  // 1 MiB .. 1 TiB
          a.sizes_mib.push_back(m);
          p = q + 1;
        }
      } else if (k == "--tensors") {
        a.tensors = static_cast<unsigned>(std::clamp<unsigned long>(std::stoul(v), 1, 4096));
      } else if (k == "--reps") {
        a.reps = static_cast<unsigned>(std::clamp<unsigned long>(std::stoul(v), 1, 100));
      } else {
        return usage();
      }
    }
  } catch (const std::exception&) {
    return usage();
  }
  if (const int rc = testing::bench_gpu_presence_exit_code("device checkpoints"); rc >= 0) return rc;

  std::error_code ec;
  const bool made_dir = fs::create_directories(a.dir, ec);
  if (ec) {
    fmt::print("FAIL: cannot create {}: {}\n", a.dir, ec.message());
    return 1;
  }
  const std::string work = fmt::format("{}/ckpt-device-bench.{}", a.dir, ::getpid());
  int rc = 0;
  try {
    fs::create_directory(work);
    ::chmod(work.c_str(), 0700);  // the manager refuses a directory others may write to
    int dev = 0, driver = 0, runtime = 0;
    cudaDeviceProp prop{};
    ck(cudaGetDevice(&dev), "cudaGetDevice");
    ck(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    ck(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    ck(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    fmt::print("# ckpt-device-bench: {} ({:.0f} GiB), CUDA driver {}.{}, runtime {}.{}; {} tensors per size (f32/bf16 "
               "alternating) in one cudaMalloc block; directory {} on {}\n",
               prop.name, prop.totalGlobalMem / kGiB, driver / 1000, driver % 1000 / 10, runtime / 1000,
               runtime % 1000 / 10, a.tensors, work, filesystem_of(work));
    auto session = bootstrap::Session::single_process();
    int wrong = 0, measured = 0;
    for (std::size_t mib : a.sizes_mib) {
      measured += run_size(a, work, mib, *session, wrong) ? 1 : 0;
      fs::remove_all(fmt::format("{}/ckpt-{}", work, mib), ec);  // room for the next size
    }
    if (wrong) {
      fmt::print("FAIL: {} wrong result(s)\n", wrong);
      rc = 1;
    } else if (measured == 0) {
      fmt::print("FAIL: no size could be measured (no room for any of them)\n");
      rc = 1;
    }
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    rc = 1;
  }
  fs::remove_all(work, ec);
  if (made_dir) fs::remove(a.dir, ec);  // only when we made it and it is empty
  return rc;
}
