// trainrt-topo-bench: time load + place of a topology file against `lstopo-no-graphics --of xml -i`
// on the same file, in the same run, alternating A B A B so machine noise hits both alike.
#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string largest_xml(const std::string& dir) {
  std::string best;
  std::uintmax_t best_size = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".xml") continue;
    if (e.file_size() > best_size) best_size = e.file_size(), best = e.path().string();
  }
  if (best.empty()) throw trainrt::Error("no .xml files", dir);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string arg = argc > 1 ? argv[1] : "../shared/topologies";
    std::string file = std::filesystem::is_directory(arg) ? largest_xml(arg) : arg;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
    std::string lstopo = fmt::format("lstopo-no-graphics --of xml -i '{}' - > /dev/null", file);

    std::vector<double> load_ms, place_ms, total_ms, lstopo_ms;
    for (int i = 0; i < rounds; ++i) {
      auto t0 = Clock::now();
      trainrt::topo::Node node = trainrt::topo::load_file(file);
      double l = ms_since(t0);
      auto t1 = Clock::now();
      trainrt::topo::PlacementRequest req;
      req.tasks = 8;
      if (node.gpus.size() < 8) req.tasks_per_gpu = static_cast<unsigned>((8 + node.gpus.size() - 1) / std::max<std::size_t>(1, node.gpus.size()));
      auto placement = trainrt::topo::place(node, req);
      double p = ms_since(t1);
      load_ms.push_back(l), place_ms.push_back(p), total_ms.push_back(l + p);
      if (placement.tasks.size() != 8) throw trainrt::Error("placement lost ranks");

      auto t2 = Clock::now();
      int rc = std::system(lstopo.c_str());
      lstopo_ms.push_back(ms_since(t2));
      if (rc != 0) throw trainrt::Error(fmt::format("exit status {}", rc), "lstopo-no-graphics");
    }
    double total = median(total_ms), peer = median(lstopo_ms);
    fmt::print("file: {} ({} bytes), 8 ranks, {} rounds (A B A B), medians\n", file, std::filesystem::file_size(file), rounds);
    fmt::print("trainrt load          {:8.2f} ms\n", median(load_ms));
    fmt::print("trainrt place         {:8.3f} ms\n", median(place_ms));
    fmt::print("trainrt load+place    {:8.2f} ms   (goal < 20 ms)\n", total);
    fmt::print("lstopo --of xml -i    {:8.2f} ms   (process incl. exec)\n", peer);
    fmt::print("ratio lstopo / trainrt: {:.2f}x\n", peer / total);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainrt-topo-bench: {}\n", e.what());
    return 2;
  }
}
