// Rail pairing on small nodes the test writes itself, one per case of the pairing rules.
#include <catch2/catch.hpp>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/rails.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

SynthNic ib(const std::string& busid, const std::string& name, unsigned ports = 1) {
  return {busid, name, "ib_" + name, 0x0207, ports};
}

// Two NUMA nodes in one package, each with one PCIe switch.
SynthNode two_switches(SynthSwitch a, SynthSwitch b) {
  SynthNode n;
  n.packages = {{{{4, {{{std::move(a)}}}}, {4, {{{std::move(b)}}}}}}};
  return n;
}

std::vector<std::string> rail_names(const Node& node, const RailMap& map, unsigned gpu) {
  std::vector<std::string> out;
  for (unsigned n : map.gpus[gpu].nics) out.push_back(node.nics[n].rdma_name);
  return out;
}

int rail_by_busid(const Node& node, const RailMap& map, const std::string& busid) {
  for (const auto& n : node.nics)
    if (n.busid == busid) return map.rail_of_nic[n.index];
  return -2;
}

}  // namespace

TEST_CASE("one NIC per GPU: each GPU gets the NIC on its switch", "[rails]") {
  Node node = load_hwloc_xml(write_hwloc_xml(
      two_switches({{"0000:05:00.0"}, {ib("0000:04:00.0", "mlx5_9")}}, {{"0000:85:00.0"}, {ib("0000:84:00.0", "mlx5_2")}}),
      "one-per-gpu"));
  REQUIRE(node.gpus.size() == 2);
  REQUIRE(node.nics.size() == 2);
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_9"});
  CHECK(rail_names(node, map, 1) == std::vector<std::string>{"mlx5_2"});
  CHECK(map.gpus[0].path == PathClass::PIX);
  CHECK(map.gpus[0].on_switch);
  CHECK(map.gpus[0].note.empty());
  CHECK(map.matrix[0][1] == PathClass::SYS);  // GPU0 to the other NUMA node's NIC
  CHECK(map.rail_count == 2);
}

TEST_CASE("rail ids follow the PCI tree, not the NIC names", "[rails]") {
  Node a = load_hwloc_xml(write_hwloc_xml(
      two_switches({{"0000:05:00.0"}, {ib("0000:04:00.0", "mlx5_0")}}, {{"0000:85:00.0"}, {ib("0000:84:00.0", "mlx5_1")}}),
      "names-a"));
  Node b = load_hwloc_xml(write_hwloc_xml(
      two_switches({{"0000:05:00.0"}, {ib("0000:04:00.0", "mlx5_1")}}, {{"0000:85:00.0"}, {ib("0000:84:00.0", "mlx5_0")}}),
      "names-b"));
  RailMap ra = pair_rails(a), rb = pair_rails(b);
  for (const char* busid : {"0000:04:00.0", "0000:84:00.0"}) {
    INFO(busid);
    CHECK(rail_by_busid(a, ra, busid) == rail_by_busid(b, rb, busid));
  }
  CHECK(rail_by_busid(a, ra, "0000:04:00.0") == 0);
  CHECK(rail_by_busid(b, rb, "0000:84:00.0") == 1);
}

TEST_CASE("fewer NICs than GPUs: GPUs on a switch share its NIC, balanced", "[rails]") {
  SynthNode n;
  n.packages = {{{{8, {{{SynthSwitch{{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"},
                                    {ib("0000:03:00.0", "mlx5_0"), ib("0000:04:00.0", "mlx5_1")}}}}}}}}};
  Node node = load_hwloc_xml(write_hwloc_xml(n, "shared-nics"));
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_0"});
  CHECK(rail_names(node, map, 1) == std::vector<std::string>{"mlx5_0"});
  CHECK(rail_names(node, map, 2) == std::vector<std::string>{"mlx5_1"});
  CHECK(rail_names(node, map, 3) == std::vector<std::string>{"mlx5_1"});

  Node p4d_like = load_hwloc_xml(write_hwloc_xml(
      two_switches({{"0000:05:00.0", "0000:06:00.0"}, {ib("0000:04:00.0", "mlx5_0")}},
                   {{"0000:85:00.0", "0000:86:00.0"}, {ib("0000:84:00.0", "mlx5_1")}}),
      "two-gpus-one-nic"));
  RailMap m2 = pair_rails(p4d_like);
  CHECK(rail_names(p4d_like, m2, 0) == rail_names(p4d_like, m2, 1));
  CHECK(rail_names(p4d_like, m2, 2) == std::vector<std::string>{"mlx5_1"});
  CHECK(m2.gpus[3].path == PathClass::PIX);
}

TEST_CASE("more NICs than GPUs: the GPU gets every NIC on its switch, every port", "[rails]") {
  SynthNode n;
  n.packages = {{{{4, {{{SynthSwitch{{"0000:05:00.0"}, {ib("0000:03:00.0", "mlx5_0", 2), ib("0000:04:00.0", "mlx5_1")}}}}}}}}};
  Node node = load_hwloc_xml(write_hwloc_xml(n, "more-nics"));
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_0", "mlx5_1"});
  REQUIRE(node.nics[0].ports.size() == 2);
  CHECK(node.nics[0].ports[1].number == 2);
  CHECK(node.nics[0].ports[1].state == 4);
}

TEST_CASE("no NIC on the GPU's switch: nearest by locality, and the note says so", "[rails]") {
  SynthNode n;
  // Package 0: GPU in NUMA 0, NIC in NUMA 1. Package 1: NIC in NUMA 2, GPU in NUMA 3.
  n.packages = {{{{4, {{{SynthSwitch{{"0000:05:00.0"}, {}}}}}}, {4, {{{SynthSwitch{{}, {ib("0000:44:00.0", "mlx5_0")}}}}}}}},
                {{{4, {{{SynthSwitch{{}, {ib("0000:84:00.0", "mlx5_1")}}}}}}, {4, {{{SynthSwitch{{"0000:c5:00.0"}, {}}}}}}}}};
  Node node = load_hwloc_xml(write_hwloc_xml(n, "no-local-nic"));
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_0"});  // same package wins
  CHECK(rail_names(node, map, 1) == std::vector<std::string>{"mlx5_1"});
  CHECK(map.gpus[0].path == PathClass::SYS);
  CHECK_FALSE(map.gpus[0].on_switch);
  CHECK_THAT(map.gpus[0].note, Catch::Contains("no rail NIC on the PCIe switch") && Catch::Contains("0000:05:00.0"));

  // Same host bridge, different switches: PHB.
  SynthNode h;
  h.packages = {{{{4, {{{SynthSwitch{{"0000:05:00.0"}, {}}, SynthSwitch{{}, {ib("0000:09:00.0", "mlx5_0")}}}}}}}}};
  Node hb = load_hwloc_xml(write_hwloc_xml(h, "phb"));
  RailMap hm = pair_rails(hb);
  CHECK(hm.gpus[0].path == PathClass::PHB);
  CHECK_FALSE(hm.gpus[0].note.empty());

  // Different host bridges in one NUMA node: NODE.
  SynthNode d;
  d.packages = {{{{4, {SynthHostBridge{{SynthSwitch{{"0000:05:00.0"}, {}}}}, SynthHostBridge{{SynthSwitch{{}, {ib("0000:19:00.0", "mlx5_0")}}}}}}}}};
  Node dn = load_hwloc_xml(write_hwloc_xml(d, "node-class"));
  CHECK(pair_rails(dn).gpus[0].path == PathClass::NODE);
}

TEST_CASE("Ethernet mlx5 ports are not rails on an InfiniBand node, even on the GPU's switch", "[rails]") {
  SynthNic roce{"0000:03:00.0", "mlx5_1", "eno1np0", 0x0200, 1};
  SynthNic plain{"0000:02:00.0", "", "eno2", 0x0200, 1};
  SynthNode n;
  n.packages = {{{{4, {{{SynthSwitch{{"0000:05:00.0"}, {plain, roce, ib("0000:04:00.0", "mlx5_0")}}}}}}}}};
  Node node = load_hwloc_xml(write_hwloc_xml(n, "eth-not-rail"));
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_0"});
  CHECK(map.rail_count == 1);
  REQUIRE(map.excluded.size() == 2);
  CHECK_THAT(map.excluded[0], Catch::Contains("no RDMA"));
  CHECK_THAT(map.excluded[1], Catch::Contains("mlx5_1") && Catch::Contains("Ethernet"));
}

TEST_CASE("a RoCE-only node uses its RDMA Ethernet NICs as rails", "[rails]") {
  SynthNic roce0{"0000:04:00.0", "mlx5_bond_0", "bond0", 0x0200, 1};
  SynthNic roce1{"0000:84:00.0", "mlx5_bond_1", "bond1", 0x0200, 1};
  Node node = load_hwloc_xml(write_hwloc_xml(two_switches({{"0000:05:00.0"}, {roce0}}, {{"0000:85:00.0"}, {roce1}}), "roce"));
  RailMap map = pair_rails(node);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_bond_0"});
  CHECK(rail_names(node, map, 1) == std::vector<std::string>{"mlx5_bond_1"});
  CHECK(node.nics[0].link == LinkLayer::Ethernet);
}

TEST_CASE("nic_include restricts the rails and rejects names it cannot find", "[rails]") {
  Node node = load_hwloc_xml(write_hwloc_xml(
      two_switches({{"0000:05:00.0"}, {ib("0000:04:00.0", "mlx5_0")}}, {{"0000:85:00.0"}, {ib("0000:84:00.0", "mlx5_1")}}),
      "include"));
  RailOptions only1;
  only1.nic_include = {"mlx5_1"};
  RailMap map = pair_rails(node, only1);
  CHECK(rail_names(node, map, 0) == std::vector<std::string>{"mlx5_1"});
  CHECK(map.gpus[0].path == PathClass::SYS);
  RailOptions bad;
  bad.nic_include = {"mlx5_7"};
  CHECK_THROWS_WITH(pair_rails(node, bad), Catch::Contains("mlx5_7"));
  RailOptions by_busid;
  by_busid.nic_include = {"0000:04:00.0", "ib_mlx5_1"};
  CHECK(pair_rails(node, by_busid).rail_count == 2);
}
