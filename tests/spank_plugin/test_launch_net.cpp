#include <catch2/catch.hpp>

#include <arpa/inet.h>

#include <set>

#include "gpu_identity.hpp"
#include "launch_net.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::spank;

namespace {

Address v4(const char* text) {
  Address a;
  a.text = text;
  inet_pton(AF_INET, text, a.bytes);
  a.loopback = a.bytes[0] == 127;
  return a;
}

}  // namespace

TEST_CASE("MASTER_PORT: below the ephemeral range, outside reserved ports, distinct for steps and jobs", "[net]") {
  PortBand band = port_band_from("32768\t60999\n", "");
  CHECK(band.low == 20000);
  CHECK(band.high == 32767);
  std::set<unsigned> seen;
  for (std::uint32_t job : {1u, 999u, 1000u, 1001u, 4294967295u, 123456789u})
    for (std::uint32_t step : {0u, 1u, 15u, 4294967294u}) {
      unsigned p = master_port(job, step, band);
      CHECK(p >= band.low);
      CHECK(p <= band.high);
      CHECK(p != 29500);
    }
  for (std::uint32_t step = 0; step < 16; ++step) seen.insert(master_port(77, step, band));
  CHECK(seen.size() == 16);  // 16 concurrent steps of one job never share a port
  seen.clear();
  for (std::uint32_t job = 5000; job < 5700; ++job) seen.insert(master_port(job, 0, band));
  CHECK(seen.size() == 700);  // nor do 700 consecutive jobs (jobs equal modulo 1000 included)
  CHECK(master_port(1000, 0, band) != master_port(2000, 0, band));

  PortBand low = port_band_from("15000 60999", "14000-14999,20000");
  CHECK(low.high == 14999);
  CHECK(low.low == 2232);
  for (std::uint32_t job = 0; job < 2000; ++job) {
    unsigned p = master_port(job, job % 7, low);
    CHECK(p < 14000);
  }
  PortBand reserved = port_band_from("32768 60999", "20000-32000");
  for (std::uint32_t job = 0; job < 100; ++job) CHECK(master_port(job, 0, reserved) > 32000);
  CHECK_THROWS_WITH(port_band_from("1024 60999", ""), Catch::Contains("no room"));
  CHECK_THROWS_WITH(port_band_from("abc", ""), Catch::Contains("ip_local_port_range"));
  CHECK_THROWS_WITH(port_band_from("32768 60999", "8080,x"), Catch::Contains("'x' is not a port"));
  PortBand none;
  none.reserved = {{0, 65535}};
  CHECK_THROWS_WITH(master_port(1, 1, none), Catch::Contains("reserved"));
}

TEST_CASE("MASTER_ADDR: reachable from this node, on the data network when one is named", "[net]") {
  MasterInput in;
  in.first_host = "gpu001";
  in.nnodes = 1;
  CHECK(choose_master_addr(in) == "127.0.0.1");

  in.nnodes = 4;
  in.resolved = {v4("127.0.1.1")};  // Debian's /etc/hosts line for the host's own name
  CHECK_THROWS_WITH(choose_master_addr(in), Catch::Contains("'gpu001' resolves to 127.0.1.1") &&
                                                Catch::Contains("TRAINRT_IFNAME") && Catch::Contains("MASTER_ADDR"));
  in.resolved = {};
  CHECK_THROWS_WITH(choose_master_addr(in), Catch::Contains("resolves to nothing"));
  in.this_is_first = true;
  in.resolved = {v4("127.0.1.1")};
  CHECK(choose_master_addr(in) == "127.0.1.1");  // its own tasks reach it; the others resolve it themselves
  in.this_is_first = false;
  in.resolved = {v4("192.168.1.5"), v4("10.1.0.5")};
  CHECK(choose_master_addr(in) == "192.168.1.5");
  in.ifname = "ib0";
  in.ifname_networks = {{v4("10.1.0.9"), 16}};
  CHECK(choose_master_addr(in) == "10.1.0.5");  // the address on the data network
  in.this_is_first = true;
  CHECK(choose_master_addr(in) == "10.1.0.9");  // the first node names its own data-network address
  in.ifname_networks = {};
  CHECK_THROWS_WITH(choose_master_addr(in), Catch::Contains("interface 'ib0' has no IP address"));
}

TEST_CASE("live name resolution and interfaces", "[net]") {
  CHECK_FALSE(resolve("localhost").empty());
  CHECK(resolve("no-such-host.invalid").empty());
  CHECK(interface_exists("lo"));
  CHECK_FALSE(interface_exists("trainrt-none0"));
  auto lo = interface_networks("lo");
  REQUIRE_FALSE(lo.empty());
  CHECK(lo.front().address.text == "127.0.0.1");
  CHECK(lo.front().prefix == 8);
}

TEST_CASE("the driver's GPU table: minor number, bus id, UUID", "[gpu]") {
  DriverGpu g = parse_driver_information("0000:18:00.0",
                                         "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-4a9b0c1d\n"
                                         "Bus Location: \t 0000:18:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n");
  CHECK(g.minor == 3);
  CHECK(g.uuid == "GPU-4a9b0c1d");
  CHECK(g.busid == "0000:18:00.0");
  CHECK_THROWS_WITH(parse_driver_information("0000:18:00.0", "Model: x\n"), Catch::Contains("no Device Minor"));
  CHECK_THROWS_WITH(parse_driver_information("x", "Device Minor: -1\n"), Catch::Contains("'-1' is not a Device Minor number"));
  CHECK(read_driver_gpus("/nonexistent").empty());
}
