// The generated NCCL topology (trainrt-topo show --format nccl-xml) read back by our NCCL loader gives
// the same GPUs (bus id, NUMA node) and the same rails (each GPU's rail NICs by bus id and link
// layer) for every real topology in ../shared/topologies.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "../common/temp_dir.hpp"
#include "shared_topologies.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/rails.hpp"
#include "trainrt/topology/render.hpp"

using namespace trainrt::topo;

namespace {

std::vector<std::string> rail_text(const Node& node) {
  RailMap rails = pair_rails(node);
  std::vector<std::string> out;
  for (const auto& g : rails.gpus) {
    std::string s = node.gpus[g.gpu].busid + " numa" + std::to_string(node.gpus[g.gpu].numa.at(0)) + " >";
    for (unsigned n : g.nics) s += " " + node.nics[n].busid + ":" + to_string(node.nics[n].link);
    out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("every real topology's generated NCCL file reads back to the same rails", "[nccl-render]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  const trainrt::testing::TempDir tmp("trainrt-nccl-render-");
  unsigned files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".xml") continue;
    INFO(e.path().string());
    Node original = load_file(e.path().string());
    const std::string out = tmp / e.path().filename().string();
    std::ofstream(out) << render_nccl_topology(original);
    Node back = load_nccl_xml(out);
    CHECK(back.gpus.size() == original.gpus.size());
    CHECK(rail_text(back) == rail_text(original));
    ++files;
  }
  CHECK(files >= 8);
}
