// The cross-node rail check (issue 15): identical layouts agree, a port down or a NIC on another
// GPU names the node that differs, and a line that is not an honest signature is an error.
#include <catch2/catch.hpp>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/rails.hpp"

using namespace trainrt::topo;
using namespace trainrt::test;

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
  CHECK_THROWS_WITH(check_rail_signatures("n1 hello world\n"), Catch::Contains("not a trainrt-topo --rail-signature"));
  CHECK_THROWS_WITH(check_rail_signatures("\n\n"), Catch::Contains("no signature lines"));
  CHECK_THROWS_WITH(check_rail_signatures("n1 rails/1:0000000000000000 " + std::string(70000, 'x')),
                    Catch::Contains("longer than"));
}
