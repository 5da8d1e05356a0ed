// Properties that must hold for every topology, task count and allowed-CPU/GPU mask.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "shared_topologies.hpp"
#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"

using namespace trainrt::topo;

namespace {

std::vector<Node> all_topologies() {
  std::vector<Node> nodes;
  const std::string dir = trainrt::testing::shared_topologies_dir();
  if (!dir.empty())
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().extension() == ".xml") nodes.push_back(load_file(e.path().string()));
  trainrt::testing::SynthNode s;
  auto sw = [](const char* gpu, const char* nic, const char* name) {
    return trainrt::testing::SynthSwitch{{gpu}, {trainrt::testing::SynthNic{nic, name, "", 0x0207, 1}}};
  };
  s.packages = {{{{3, {{{sw("0000:05:00.0", "0000:04:00.0", "mlx5_0"), sw("0000:07:00.0", "0000:06:00.0", "mlx5_1")}}}},
                  {5, {}}}},
                {{{2, {{{sw("0000:85:00.0", "0000:84:00.0", "mlx5_2")}}}}}}};
  nodes.push_back(load_hwloc_xml(trainrt::testing::write_hwloc_xml(s, "property")));
  return nodes;
}

CpuSet random_subset(const CpuSet& all, std::mt19937& rng, double keep) {
  std::bernoulli_distribution coin(keep);
  CpuSet out;
  for (unsigned c : all.members())
    if (coin(rng)) out.set(c);
  if (out.empty()) out.set(all.members()[rng() % all.count()]);
  return out;
}

}  // namespace

TEST_CASE("placement properties over topologies x task counts x random allowed masks", "[property]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  if (dir.empty()) WARN("../shared/topologies is absent: properties checked on the synthetic node only");
  const unsigned seed = 20261122;
  std::mt19937 rng(seed);
  INFO("seed " << seed);
  unsigned checked = 0, rejected = 0;
  for (const Node& node : all_topologies()) {
    for (int trial = 0; trial < 60; ++trial) {
      PlacementRequest req;
      req.policy = trial % 5 == 4 ? Policy::Numa : Policy::Rail;
      req.allowed_cpus = trial % 6 == 0 ? node.all_cpus : random_subset(node.all_cpus, rng, 0.05 + (trial % 10) / 10.0);
      std::vector<unsigned> gpus;
      for (const auto& g : node.gpus)
        if (trial % 3 == 0 || rng() % 2) gpus.push_back(g.index);
      if (gpus.empty()) gpus.push_back(static_cast<unsigned>(rng() % node.gpus.size()));
      req.allowed_gpus = gpus;
      req.tasks_per_gpu = 1 + rng() % 3;
      req.tasks = 1 + static_cast<unsigned>(rng() % (gpus.size() * req.tasks_per_gpu));
      INFO(node.source << " trial " << trial << " tasks " << req.tasks << " tpg " << req.tasks_per_gpu << " cpus "
                       << req.allowed_cpus->to_list());
      Placement p;
      try {
        p = place(node, req);
      } catch (const trainrt::Error& e) {
        ++rejected;
        FAIL("a satisfiable request was rejected: " << e.what());
      }
      ++checked;
      REQUIRE(p.tasks.size() == req.tasks);
      bool any_over = false;
      for (const auto& t : p.tasks) {
        REQUIRE_FALSE(t.gpus.empty());
        for (unsigned g : t.gpus) CHECK(std::find(gpus.begin(), gpus.end(), g) != gpus.end());
        CHECK_FALSE(t.cpus.empty());
        CHECK(t.cpus.is_subset_of(*req.allowed_cpus));
        CHECK(t.cores >= 1);
        CpuSet home;
        for (unsigned numa : node.gpus[t.gpus.front()].numa) home |= node.numa_by_os(numa)->cpus;
        if (home.intersects(*req.allowed_cpus)) CHECK(t.cpus.is_subset_of(home));
        any_over |= t.oversubscribed;
      }
      for (std::size_t i = 0; i < p.tasks.size(); ++i)
        for (std::size_t j = i + 1; j < p.tasks.size(); ++j)
          if (p.tasks[i].cpus.intersects(p.tasks[j].cpus)) {
            CHECK(p.tasks[i].oversubscribed);
            CHECK(p.tasks[j].oversubscribed);
          }
      // Oversubscription only where a GPU's NUMA node has fewer allowed cores than ranks on it,
      // or where some rank had to leave its NUMA node.
      bool some_homeless = false;
      for (const auto& t : p.tasks) some_homeless |= !t.notes.empty() && t.notes.back().find("no allowed cores") != std::string::npos;
      if (any_over && !some_homeless) {
        for (const auto& t : p.tasks) {
          if (!t.oversubscribed) continue;
          const auto& home_numa = node.gpus[t.gpus.front()].numa;
          unsigned sharing = 0, cores = 0;
          for (const auto& u : p.tasks) sharing += node.gpus[u.gpus.front()].numa == home_numa;
          CpuSet home;
          for (unsigned numa : home_numa) home |= node.numa_by_os(numa)->cpus;
          for (const auto& c : node.cores) cores += c.pus.intersects(home & *req.allowed_cpus);
          CHECK(cores < sharing);
        }
      }
    }
  }
  CHECK(checked > 0);
  CHECK(rejected == 0);
}
