// Resharded restore against a same-layout restore of the same bytes (benchmarks/reshard.sh runs
// it under mpirun; docs/performance-checkpoints.md). One f32 tensor of `--mib` MiB per saving rank, split by
// rows of 4 KiB over however many ranks run:
//   reshard-bench save DIR --mib M          every rank registers its rows and saves step 1
//   reshard-bench restore DIR [--mib M] [--saved-by N] [--transfer MiB]
//                                           restores (M and N: the saving run's, to size the tensor);
//                                           rank 0 prints one line: ranks, seconds (slowest rank),
//                                           bytes read from files over all ranks (/proc/self/io) per
//                                           byte of state, and the largest rise of a rank's peak RSS
//                                           above what it held before the restore, in MiB
//   reshard-bench fingerprint --mib M       one rank: the content fingerprint against XXH3 over M MiB
// Every restore is checked: each rank compares its rows with what was saved.
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fingerprint.hpp"
#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/runtime/init.hpp"
#include "xxh3.hpp"

using namespace trainrt;

namespace {

constexpr std::int64_t kCols = 1024;  // f32: 4 KiB rows

std::uint64_t field_of(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key)));
  return 0;
}

float value(std::int64_t row, std::int64_t col) { return static_cast<float>((row * 7919 + col * 104729) % 1000003); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int fingerprint_bench(std::size_t mib) {
  std::vector<float> data(mib << 18);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = value(static_cast<std::int64_t>(i), 3);
  const checkpoint::fingerprint::Powers powers(checkpoint::fingerprint::point_for("x"));
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    volatile std::uint64_t f = checkpoint::fingerprint::run(powers, data.data(), data.size() * 4, 0);
    const double fp = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    volatile std::uint64_t h = XXH3_64bits(data.data(), data.size() * 4);
    const double xx = seconds_since(t0);
    (void)f, (void)h;
    const double gib = static_cast<double>(mib) / 1024;
    fmt::print("fingerprint {:.3f} s/GiB ({:.2f} GB/s), XXH3 {:.3f} s/GiB ({:.2f} GB/s): {:.2f}x XXH3's time\n", fp / gib,
               gib * 1.0737 / fp, xx / gib, gib * 1.0737 / xx, fp / xx);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: reshard-bench save DIR --mib M | restore DIR [--mib M] [--saved-by N] [--transfer MiB] | "
                       "fingerprint --mib M\n");
    return 2;
  }
  const std::string mode = argv[1];
  std::size_t mib = 64, transfer = 64;
  unsigned saved_by = 0;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--mib") mib = std::stoul(argv[i + 1]);
    if (std::string(argv[i]) == "--saved-by") saved_by = static_cast<unsigned>(std::stoul(argv[i + 1]));
    if (std::string(argv[i]) == "--transfer") transfer = std::stoul(argv[i + 1]);
  }
  if (mode == "fingerprint") return fingerprint_bench(mib);
  try {
    auto rt = trainrt::init({DeviceComm::Off, {}, {}});
    const unsigned rank = rt->rank, world = rt->size;
    if (saved_by == 0) saved_by = world;
    const std::int64_t rows_per_saver = static_cast<std::int64_t>((mib << 20) / (kCols * 4));
    const std::int64_t rows = rows_per_saver * saved_by;
    const std::int64_t lo = rows * rank / world, hi = rows * (rank + 1) / world;
    std::vector<float> mine(static_cast<std::size_t>((hi - lo) * kCols));
    checkpoint::Options o;
    o.directory = argv[2];
    o.host = rt->host.get();
    o.transfer_bytes = transfer << 20;
    checkpoint::Manager mgr(*rt->session, o);
    mgr.register_buffer("x", mine.data(), mine.size() * 4, DType::F32, {hi - lo, kCols},
                        checkpoint::Shard{{rows, kCols}, {lo, 0}});
    if (mode == "save") {
      for (std::int64_t r = lo; r < hi; ++r)
        for (std::int64_t c = 0; c < kCols; ++c) mine[static_cast<std::size_t>((r - lo) * kCols + c)] = value(r, c);
      mgr.save(1).get();
      if (rank == 0) fmt::print("saved {} MiB per rank on {} ranks\n", mib, world);
      return 0;
    }
    std::fill(mine.begin(), mine.end(), -1.f);  // touched: its pages count before the restore
    std::ofstream("/proc/self/clear_refs") << "5";  // the peak RSS starts again from here
    const std::uint64_t rss0 = field_of("/proc/self/status", "VmRSS:"), read0 = field_of("/proc/self/io", "read_bytes: ");
    rt->session->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    const std::int64_t step = mgr.restore();
    const double s = seconds_since(t0);
    const std::uint64_t peak = field_of("/proc/self/status", "VmHWM:"), read = field_of("/proc/self/io", "read_bytes: ") - read0;
    std::size_t bad = 0;
    for (std::int64_t r = lo; r < hi; ++r)
      for (std::int64_t c = 0; c < kCols; ++c) bad += mine[static_cast<std::size_t>((r - lo) * kCols + c)] != value(r, c);
    const std::string mine_text = fmt::format("{} {} {} {}", s, read, peak > rss0 ? peak - rss0 : 0, bad);
    const bootstrap::Blob blob(mine_text.begin(), mine_text.end());
    const auto all = rt->session->allgather(blob);
    if (rank != 0) return bad ? 1 : 0;
    double slowest = 0;
    std::uint64_t read_sum = 0, rise_max = 0, bad_sum = 0;
    for (const auto& b : all) {
      double t;
      unsigned long long rd, rise, bd;
      std::sscanf(std::string(b.begin(), b.end()).c_str(), "%lf %llu %llu %llu", &t, &rd, &rise, &bd);
      slowest = std::max(slowest, t), read_sum += rd, rise_max = std::max<std::uint64_t>(rise_max, rise), bad_sum += bd;
    }
    const double state = static_cast<double>(rows) * kCols * 4;
    fmt::print("restore {} -> {} ranks: {:.3f} s, read {:.2f} x the state, peak RSS rise {:.1f} MiB (transfer {} MiB), {} "
               "(step {})\n",
               saved_by, world, slowest, static_cast<double>(read_sum) / state, static_cast<double>(rise_max) / 1024, transfer,
               bad_sum ? "WRONG CONTENT" : "content checked", step);
    return bad_sum || step != 1 ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "reshard-bench: {}\n", e.what());
    return 1;
  }
}
