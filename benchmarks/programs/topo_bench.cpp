// trainrt-topo-bench: time load + place of a topology file against `lstopo-no-graphics --of xml -i`
// on the same file, in the same run, alternating A B A B so machine noise hits both alike.
// `trainrt-topo-bench cache [DIR|FILE] [ROUNDS]`: what a step pays per source: the
// digested cache (file checks, decode, staleness stamp) against parsing the XML, and the live
// machine's cache against live discovery, alternating in the same run.
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/topology/cache.hpp"
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

template <typename Fn>
double time_ms(Fn&& fn) {
  auto t0 = Clock::now();
  fn();
  return ms_since(t0);
}

int bench_cache(const std::string& file, int rounds) {
  using namespace trainrt::topo;
  char tmpl[] = "/tmp/trainrt-topo-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) throw trainrt::Error("cannot create a temporary directory", "/tmp");
  const std::string dir = tmpl, xml_cache = dir + "/xml.cache", live_cache = dir + "/live.cache";
  CachedNode from_xml{current_stamp(file, true), load_file(file)};
  write_cache_file(from_xml, xml_cache);
  CachedNode live{current_stamp("", false), load_live()};
  write_cache_file(live, live_cache);

  std::vector<double> xml_ms, xml_cached_ms, live_ms, live_cached_ms, stamp_live_ms;
  std::string note;
  for (int i = 0; i < rounds; ++i) {
    xml_ms.push_back(time_ms([&] { (void)load_file(file); }));
    xml_cached_ms.push_back(time_ms([&] {
      Node n = load_cached_or_file(file, &note, xml_cache);
      if (!note.empty() || !(n == from_xml.node)) throw trainrt::Error("the XML cache was not used: " + note);
    }));
    live_ms.push_back(time_ms([&] { (void)load_live(); }));
    live_cached_ms.push_back(time_ms([&] {
      Node n = load_cached_or_live(&note, live_cache);
      if (!note.empty() || !(n == live.node)) throw trainrt::Error("the live cache was not used: " + note);
    }));
    stamp_live_ms.push_back(time_ms([&] { (void)current_stamp("", false); }));
  }
  std::filesystem::remove_all(dir);
  fmt::print("file: {} ({} bytes; its cache {} bytes), {} rounds alternating, medians\n", file,
             std::filesystem::file_size(file), encode_cache(from_xml).size(), rounds);
  fmt::print("XML parse       (load_file)            {:8.3f} ms\n", median(xml_ms));
  fmt::print("XML via cache   (load_cached_or_file)  {:8.3f} ms   ({:.0f}x faster)\n", median(xml_cached_ms),
             median(xml_ms) / median(xml_cached_ms));
  fmt::print("live discovery  (load_live)            {:8.3f} ms   ({} PCI vertices here)\n", median(live_ms),
             live.node.pci.size());
  fmt::print("live via cache  (load_cached_or_live)  {:8.3f} ms   ({:.0f}x faster)\n", median(live_cached_ms),
             median(live_ms) / median(live_cached_ms));
  fmt::print("  of which the live stamp (boot id, sysfs device set: {} entries) {:.3f} ms\n",
             live.stamp.devices_count, median(stamp_live_ms));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "cache") {
      std::string arg = argc > 2 ? argv[2] : "../shared/topologies";
      return bench_cache(std::filesystem::is_directory(arg) ? largest_xml(arg) : arg, argc > 3 ? trainrt::parse_number(argv[3], "a number of rounds", 1, 1000000, "ROUNDS") : 50);
    }
    std::string arg = argc > 1 ? argv[1] : "../shared/topologies";
    std::string file = std::filesystem::is_directory(arg) ? largest_xml(arg) : arg;
    const int rounds = argc > 2 ? trainrt::parse_number(argv[2], "a number of rounds", 1, 1000000, "ROUNDS") : 20;
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
