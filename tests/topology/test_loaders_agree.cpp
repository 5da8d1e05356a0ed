// Both loaders build GPUs and NICs with one builder: the same machine described as an
// hwloc XML and as an NCCL topology file gives the same GPUs and NICs, EFA included.
#include <catch2/catch.hpp>

#include <fstream>

#include "synthetic_topology.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

// An AWS-like node: one NUMA node of 4 cores x 2 threads, one switch with a GPU, an EFA NIC
// (rdmap name, as the efa driver registers it) and an ENA NIC.
SynthNode aws_like() {
  SynthNode n;
  SynthNic efa{"0000:10:1b.0", "rdmap16s27", "", 0x0200, 1, 0x1d0f, 0xefa0};
  SynthNic ena{"0000:10:1e.0", "", "ens32", 0x0200, 1, 0x1d0f, 0xec20};
  n.packages = {{{{4, {{{{{"0000:10:1c.0"}, {efa, ena}}}}}}}}};
  return n;
}

// The same devices in NCCL's format; PUs 0-7 are NUMA node 0's.
std::string aws_like_nccl(const std::string& dir) {
  std::string path = dir + "/aws-like.xml";
  std::ofstream(path) << R"(<system version="1">
  <cpu numaid="0" affinity="000000ff">
    <pci busid="ffff:ff:01.0" class="0x060400" vendor="0xffff" device="0xffff">
      <pci busid="0000:10:1c.0" class="0x030200" vendor="0x10de" device="0x20b0"/>
      <pci busid="0000:10:1b.0" class="0x020000" vendor="0x1d0f" device="0xefa0"/>
      <pci busid="0000:10:1e.0" class="0x020000" vendor="0x1d0f" device="0xec20"/>
    </pci>
  </cpu>
</system>
)";
  return path;
}

}  // namespace

TEST_CASE("hwloc and NCCL descriptions of one node give the same GPUs and NICs, EFA in both", "[loader]") {
  Node h = load_file(write_hwloc_xml(aws_like(), "aws-like"));
  Node x = load_file(aws_like_nccl(temp_dir("aws-like-nccl")));
  REQUIRE(h.gpus.size() == 1);
  REQUIRE(x.gpus.size() == 1);
  REQUIRE(h.nics.size() == 2);
  REQUIRE(x.nics.size() == 2);
  CHECK(h.gpus[0].busid == x.gpus[0].busid);
  CHECK(h.gpus[0].vendor == x.gpus[0].vendor);
  CHECK(h.gpus[0].device == x.gpus[0].device);
  CHECK(h.gpus[0].numa == x.gpus[0].numa);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO("NIC " << i);
    CHECK(h.nics[i].busid == x.nics[i].busid);
    CHECK(h.nics[i].vendor == x.nics[i].vendor);
    CHECK(h.nics[i].device == x.nics[i].device);
    CHECK(h.nics[i].class_id == x.nics[i].class_id);
    CHECK(h.nics[i].link == x.nics[i].link);
    CHECK(h.nics[i].numa == x.nics[i].numa);
  }
  CHECK(h.nics[0].link == LinkLayer::Efa);   // 1d0f:efa0
  CHECK(h.nics[1].link == LinkLayer::Ethernet);  // 1d0f:ec20 is ENA, not EFA
  CHECK(h.nics[0].rdma_name == "rdmap16s27");
}
