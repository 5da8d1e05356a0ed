// The cross-node rail check: identical layouts agree, a port down or a NIC on another
// GPU names the node that differs, and a line that is not an honest signature is an error.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/rails.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

Node two_rails(const std::string& name, const std::string& second_nic = "mlx5_1") {
  SynthNode n;
  SynthSwitch a{{"0000:03:00.0"}, {{"0000:05:00.0", "mlx5_0", "ib0", 0x0207, 1}}};
  SynthSwitch b{{"0000:83:00.0"}, {{"0000:85:00.0", second_nic, "ib1", 0x0207, 1}}};
  n.packages = {{{{4, {{{a}}}}, {4, {{{b}}}}}}};
  return load_file(write_hwloc_xml(n, name));
}

}  // namespace

TEST_CASE("the rail signature names GPUs, rail NICs, link layers, port states and path classes", "[rails]") {
  Node n = two_rails("sig-basic");
  CHECK(rail_layout(n) ==
        "gpus=2 rails=2 0000:03:00.0>mlx5_0:InfiniBand:1=4/PIX 0000:83:00.0>mlx5_1:InfiniBand:1=4/PIX");
  const std::string line = rail_signature_line("node a", n);
  CHECK(line.starts_with("node_a rails/1:"));
}

TEST_CASE("the rail check names the nodes whose layout differs", "[rails]") {
  Node good = two_rails("sig-good");
  Node renamed = two_rails("sig-renamed", "mlx5_7");
  Node down = good;
  down.nics[1].ports[0].state = 1;  // a port down
  const std::string a = rail_signature_line("n1", good), b = rail_signature_line("n2", good);
  const std::string c = rail_signature_line("n3", good);

  RailCheck same = check_rail_signatures(a + "\n" + b + "\n" + c + "\n");
  CHECK_FALSE(same.mismatch);
  CHECK(same.differing.empty());

  // `srun -l` prefixes are accepted; the minority nodes are named.
  RailCheck diff = check_rail_signatures("0: " + a + "\n1: " + rail_signature_line("n2", down) + "\n2: " + c + "\n3: " +
                                         rail_signature_line("n4", renamed) + "\n");
  CHECK(diff.mismatch);
  CHECK(diff.differing == std::vector<std::string>{"n2", "n4"});
  CHECK_THAT(diff.report, Catch::Contains("majority 2 node(s): n1,n3"));
  CHECK_THAT(diff.report, Catch::Contains("mlx5_1:InfiniBand:1=1/PIX"));
}

TEST_CASE("rail check input that is not an honest signature is an error", "[rails][hostile]") {
  std::string line = rail_signature_line("n1", two_rails("sig-hostile"));
  std::string forged = line;
  forged.back() = forged.back() == 'X' ? 'Y' : 'X';  // the layout no longer matches its hash
  CHECK_THROWS_WITH(check_rail_signatures(forged), Catch::Contains("does not match"));
  CHECK_THROWS_WITH(check_rail_signatures("n1 hello world\n"), Catch::Contains("not a trainrt-topo rail-signature"));
  CHECK_THROWS_WITH(check_rail_signatures("\n\n"), Catch::Contains("no signature lines"));
  CHECK_THROWS_WITH(check_rail_signatures("n1 rails/1:0000000000000000 " + std::string(70000, 'x')),
                    Catch::Contains("longer than"));
}

TEST_CASE("two nodes: the tie goes to the first node's layout, so the second is named", "[rails]") {
  Node good = two_rails("sig-tie");
  Node renamed = two_rails("sig-tie-renamed", "mlx5_7");
  const std::string first = rail_signature_line("trt-n1", good), second = rail_signature_line("trt-n2", renamed);
  for (const auto& text : {first + "\n" + second + "\n", first + "\n" + first + "\n" + second + "\n" + second + "\n"}) {
    // Several tasks per node send the same line: each node counts once.
    RailCheck r = check_rail_signatures(text);
    CHECK(r.mismatch);
    CHECK(r.differing == std::vector<std::string>{"trt-n2"});
    CHECK_THAT(r.report, Catch::Contains("rail check: 2 node(s), 2 layout(s)") && Catch::Contains("majority 1 node(s): trt-n1"));
  }
  CHECK(check_rail_signatures(second + "\n" + first + "\n").differing == std::vector<std::string>{"trt-n1"});
}

TEST_CASE("live extras: a port's subnet prefix and an Ethernet rail's networks, from sysfs and procfs", "[rails]") {
  const std::string root = temp_dir("rail-extras");
  auto put = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + rel).parent_path());
    std::ofstream(root + rel) << text;
  };
  put("/sys/class/infiniband/mlx5_0/ports/1/gids/0", "fe80:0000:0000:0000:0800:3803:00bb:34d4\n");
  put("/sys/class/infiniband/mlx5_1/ports/1/gids/0", "not a gid\n");
  put("/proc/net/route",
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
      "ens1\t00000000\t0101000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"   // default route: not a network
      "ens1\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n");  // 10.1.0.0/16
  put("/proc/net/if_inet6",
      "fd000001000000000000000000000001 02 40 00 80 ens1\n"    // global: fd00:1::/64
      "fe800000000000000a0027fffe8a1b2c 02 40 20 80 ens1\n");  // link-local: left out
  Node n = two_rails("sig-extras");
  n.nics[0].link = n.nics[1].link = LinkLayer::Ethernet;  // a RoCE node: both are rails
  n.nics[1].netdevs = {"ens1"};
  RailExtras x = read_rail_extras(n, root + "/sys", root + "/proc");
  CHECK(x.port_prefix == std::map<std::string, std::string>{{"mlx5_0/1", "fe80:0000:0000:0000"}});
  CHECK(x.netdev_networks ==
        std::map<std::string, std::string>{{"ens1", "10.1.0.0/16+fd00:0001:0000:0000:0000:0000:0000:0000/64"}});
  const std::string layout = rail_layout(n, {}, &x);
  CHECK_THAT(layout, Catch::Contains("mlx5_0:Ethernet:1=4@fe80:0000:0000:0000/PIX"));
  CHECK_THAT(layout, Catch::Contains("mlx5_1:Ethernet:1=4:ip=10.1.0.0/16+fd00:0001"));
  // Another subnet prefix is another layout.
  RailExtras other = x;
  other.port_prefix["mlx5_0/1"] = "fe80:0000:0000:0001";
  CHECK(rail_layout(n, {}, &other) != layout);
  // Without extras (a topology file), the layout is as before.
  CHECK(rail_layout(n) == rail_layout(n, {}, nullptr));
}
