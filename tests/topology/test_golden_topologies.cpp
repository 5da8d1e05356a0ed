// Golden placements on real GPU servers' topology files (../shared/topologies). Every expected
// value below was written by hand from the file's PCI tree (lstopo/hwloc-calc output and the
// folder's SOURCES.md), not produced by the code under test.
#include <catch2/catch.hpp>

#include <map>

#include "shared_topologies.hpp"
#include "trainrt/topology/env.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"

using namespace trainrt::topo;

namespace {

struct ExpectedRank {
  std::string gpu_busid;
  unsigned numa;
  std::vector<std::string> nics;  // RDMA names, or bus ids where the file names none
  PathClass path;
  std::string cpus;
  bool local_nic;  // a rail NIC on the GPU's own switch
};

struct Golden {
  std::string file;
  std::vector<ExpectedRank> ranks;  // one rank per GPU, GPUs in PCI order
  std::vector<std::string> never_rails;  // NICs that must not be handed out
  std::string nccl_ib_hca_rank0;  // "" when the file has no NIC names
};

const std::vector<Golden>& goldens() {
  static const std::vector<Golden> g = {
      {"hwloc-jsc-juwels-booster-jwb0001-4xA100-4xHDR.xml",
       {{"0000:03:00.0", 3, {"mlx5_1"}, PathClass::PIX, "18-23,66-71", true},
        {"0000:44:00.0", 1, {"mlx5_0"}, PathClass::PIX, "6-11,54-59", true},
        {"0000:84:00.0", 7, {"mlx5_3"}, PathClass::PIX, "42-47,90-95", true},
        {"0000:c4:00.0", 5, {"mlx5_2"}, PathClass::PIX, "30-35,78-83", true}},
       {"0000:e1:00.0", "0000:e1:00.1"},
       "=mlx5_1:1"},
      {"hwloc-jsc-juwels-booster-jwb0004-4xA100-4xHDR.xml",
       {{"0000:03:00.0", 3, {"mlx5_0"}, PathClass::PIX, "18-23,66-71", true},
        {"0000:44:00.0", 1, {"mlx5_1"}, PathClass::PIX, "6-11,54-59", true},
        {"0000:84:00.0", 7, {"mlx5_2"}, PathClass::PIX, "42-47,90-95", true},
        {"0000:c4:00.0", 5, {"mlx5_3"}, PathClass::PIX, "30-35,78-83", true}},
       {"0000:e1:00.0", "0000:e1:00.1"},
       "=mlx5_0:1"},
      {"hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml",
       {{"0000:06:00.0", 1, {"mlx5_0"}, PathClass::PIX, "16-31,144-159", true},
        {"0000:16:00.0", 2, {"mlx5_3"}, PathClass::PIX, "32-47,160-175", true},
        {"0000:96:00.0", 6, {"mlx5_4"}, PathClass::PIX, "96-111,224-239", true},
        {"0000:e6:00.0", 7, {"mlx5_5"}, PathClass::PIX, "112-127,240-255", true}},
       {"mlx5_1", "mlx5_2", "0000:51:00.0"},
       "=mlx5_0:1"},
      {"hwloc-llnl-lassen-power9-4xV100-2xCX5dual.xml",
       {{"0004:04:00.0", 0, {"mlx5_0"}, PathClass::NODE, "8-47", false},
        {"0004:05:00.0", 0, {"mlx5_1"}, PathClass::NODE, "48-87", false},
        {"0035:03:00.0", 8, {"mlx5_2"}, PathClass::NODE, "96-135", false},
        {"0035:04:00.0", 8, {"mlx5_3"}, PathClass::NODE, "136-175", false}},
       {},
       "=mlx5_0:1"},
      {"hwloc-meluxina-gpu-mel2001-4xA100-2xHDR.xml",
       {{"0000:03:00.0", 3, {"mlx5_0"}, PathClass::SYS, "24-31,88-95", false},
        {"0000:44:00.0", 1, {"mlx5_0"}, PathClass::PIX, "8-15,72-79", true},
        {"0000:84:00.0", 7, {"mlx5_1"}, PathClass::PIX, "56-63,120-127", true},
        {"0000:c3:00.0", 5, {"mlx5_1"}, PathClass::SYS, "40-47,104-111", false}},
       {"0000:e1:00.0", "0000:e1:00.1"},
       "=mlx5_0:1"},
      {"nccl-aws-p4d-24xlarge-8xA100-4xEFA.xml",
       {{"0000:10:1c.0", 0, {"0000:10:1b.0"}, PathClass::PIX, "0-11", true},
        {"0000:10:1d.0", 0, {"0000:10:1b.0"}, PathClass::PIX, "12-23", true},
        {"0000:20:1c.0", 0, {"0000:20:1b.0"}, PathClass::PIX, "48-59", true},
        {"0000:20:1d.0", 0, {"0000:20:1b.0"}, PathClass::PIX, "60-71", true},
        {"0000:90:1c.0", 1, {"0000:90:1b.0"}, PathClass::PIX, "24-35", true},
        {"0000:90:1d.0", 1, {"0000:90:1b.0"}, PathClass::PIX, "36-47", true},
        {"0000:a0:1c.0", 1, {"0000:a0:1b.0"}, PathClass::PIX, "72-83", true},
        {"0000:a0:1d.0", 1, {"0000:a0:1b.0"}, PathClass::PIX, "84-95", true}},
       {},
       ""},
      {"nccl-azure-ndv4-8xA100-8xHDR.xml",
       {{"0001:00:00.0", 1, {"0101:00:00.0"}, PathClass::PIX, "24-35", true},
        {"0002:00:00.0", 1, {"0102:00:00.0"}, PathClass::PIX, "36-47", true},
        {"0003:00:00.0", 0, {"0103:00:00.0"}, PathClass::PIX, "0-11", true},
        {"0004:00:00.0", 0, {"0104:00:00.0"}, PathClass::PIX, "12-23", true},
        {"000b:00:00.0", 3, {"0105:00:00.0"}, PathClass::PIX, "72-83", true},
        {"000c:00:00.0", 3, {"0106:00:00.0"}, PathClass::PIX, "84-95", true},
        {"000d:00:00.0", 2, {"0107:00:00.0"}, PathClass::PIX, "48-59", true},
        {"000e:00:00.0", 2, {"0108:00:00.0"}, PathClass::PIX, "60-71", true}},
       {},
       ""},
      {"nccl-azure-ndv5-8xH100-8xNDR.xml",
       {{"0001:00:00.0", 0, {"0101:00:00.0"}, PathClass::PIX, "0-11", true},
        {"0002:00:00.0", 0, {"0102:00:00.0"}, PathClass::PIX, "12-23", true},
        {"0003:00:00.0", 0, {"0103:00:00.0"}, PathClass::PIX, "24-35", true},
        {"0008:00:00.0", 0, {"0104:00:00.0"}, PathClass::PIX, "36-47", true},
        {"0009:00:00.0", 1, {"0105:00:00.0"}, PathClass::PIX, "48-59", true},
        {"000a:00:00.0", 1, {"0106:00:00.0"}, PathClass::PIX, "60-71", true},
        {"000b:00:00.0", 1, {"0107:00:00.0"}, PathClass::PIX, "72-83", true},
        {"000c:00:00.0", 1, {"0108:00:00.0"}, PathClass::PIX, "84-95", true}},
       {},
       ""},
  };
  return g;
}

std::string nic_key(const Nic& n) { return n.rdma_name.empty() ? n.busid : n.rdma_name; }

}  // namespace

TEST_CASE("golden placements on real GPU servers", "[golden]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  REQUIRE_FALSE(dir.empty());  // golden_main.cpp skips the whole executable (exit 77) without it
  for (const Golden& g : goldens()) {
    SECTION(g.file) {
      Node node = load_file(dir + "/" + g.file);
      REQUIRE(node.gpus.size() == g.ranks.size());
      PlacementRequest req;
      req.tasks = static_cast<unsigned>(g.ranks.size());
      Placement p = place(node, req);
      for (std::size_t i = 0; i < g.ranks.size(); ++i) {
        const ExpectedRank& want = g.ranks[i];
        const TaskPlacement& t = p.tasks[i];
        INFO("rank " << i << " GPU " << want.gpu_busid);
        REQUIRE(t.gpus.size() == 1);
        const Gpu& gpu = node.gpus[t.gpus[0]];
        CHECK(gpu.busid == want.gpu_busid);
        CHECK(gpu.numa == std::vector<unsigned>{want.numa});
        std::vector<std::string> nics;
        for (unsigned n : t.nics) nics.push_back(nic_key(node.nics[n]));
        CHECK(nics == want.nics);
        CHECK(p.rails.gpus[gpu.index].path == want.path);
        CHECK(p.rails.gpus[gpu.index].on_switch == want.local_nic);
        CHECK(p.rails.gpus[gpu.index].note.empty() == want.local_nic);
        CHECK(t.cpus.to_list() == want.cpus);
        CHECK(t.mems == std::vector<unsigned>{want.numa});
      }
      for (const auto& t : p.tasks)
        for (unsigned n : t.nics)
          for (const auto& bad : g.never_rails) CHECK((node.nics[n].rdma_name != bad && node.nics[n].busid != bad));
      for (const auto& n : node.nics) {
        bool never = std::find(g.never_rails.begin(), g.never_rails.end(), nic_key(n)) != g.never_rails.end() ||
                     std::find(g.never_rails.begin(), g.never_rails.end(), n.busid) != g.never_rails.end();
        if (never) CHECK(p.rails.rail_of_nic[n.index] == -1);
      }
      // The task's own rail as NCCL_IB_HCA names it (the task scope: the node-wide default lists
      // every rail port, which the rail checks above already cover).
      EnvOptions own;
      own.hca_scope = HcaScope::Task;
      std::string hca;
      for (const auto& v : render_env(node, p, p.tasks[0], own))
        if (v.name == "NCCL_IB_HCA") hca = v.value;
      CHECK(hca == g.nccl_ib_hca_rank0);
    }
  }
}

TEST_CASE("identical JUWELS boxes with differently named NICs get the same rails", "[golden]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  REQUIRE_FALSE(dir.empty());
  Node a = load_file(dir + "/hwloc-jsc-juwels-booster-jwb0001-4xA100-4xHDR.xml");
  Node b = load_file(dir + "/hwloc-jsc-juwels-booster-jwb0004-4xA100-4xHDR.xml");
  RailMap ra = pair_rails(a), rb = pair_rails(b);
  std::map<std::string, int> rails_a, rails_b;
  for (const auto& n : a.nics) rails_a[n.busid] = ra.rail_of_nic[n.index];
  for (const auto& n : b.nics) rails_b[n.busid] = rb.rail_of_nic[n.index];
  CHECK(rails_a == rails_b);
  // GPU i (PCI order) is on rail i on both boxes.
  CHECK(rails_a["0000:04:00.0"] == 0);
  CHECK(rails_a["0000:43:00.0"] == 1);
  CHECK(rails_a["0000:83:00.0"] == 2);
  CHECK(rails_a["0000:c3:00.0"] == 3);
  CHECK(a.nics[0].rdma_name != b.nics[0].rdma_name);  // the names really differ
}

TEST_CASE("real files carry the device details the model promises", "[golden]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  REQUIRE_FALSE(dir.empty());
  Node turin = load_file(dir + "/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml");
  CHECK(turin.hostname == "h200-1001");
  CHECK(turin.packages.size() == 2);
  CHECK(turin.numa_nodes.size() == 8);
  CHECK(turin.cores.size() == 128);
  CHECK(turin.all_cpus.count() == 256);
  CHECK(turin.gpus[0].cuda_name == "cuda0");
  CHECK(turin.gpus[0].nvml_name == "nvml0");
  CHECK(turin.gpus[0].device == 0x2335);
  CHECK(turin.gpus[0].uuid == "GPU-46f77619-68bf-8f9d-7cfb-61fa9c4ca692");
  const Nic& cx7 = turin.nics[0];
  CHECK(cx7.busid == "0000:03:00.0");
  CHECK(cx7.rdma_name == "mlx5_0");
  CHECK(cx7.netdevs == std::vector<std::string>{"ib3x"});
  CHECK(cx7.link == LinkLayer::InfiniBand);
  REQUIRE(cx7.ports.size() == 1);
  CHECK(cx7.ports[0].state == 1);  // recorded as DOWN in this capture

  Node p4d = load_file(dir + "/nccl-aws-p4d-24xlarge-8xA100-4xEFA.xml");
  CHECK(p4d.cores_are_pus);
  CHECK(p4d.nics[0].link == LinkLayer::Efa);
  CHECK(p4d.gpus[0].vendor == 0x10de);
  Node ndv5 = load_nccl_xml(dir + "/nccl-azure-ndv5-8xH100-8xNDR.xml");
  CHECK(ndv5.nics[0].link == LinkLayer::InfiniBand);
  CHECK(ndv5.numa_nodes.size() == 2);
}
