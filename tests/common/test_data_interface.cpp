// The data network's interface rule (trainrt/data_interface.hpp) over data_interface_cases.json,
// the table tests/python/test_data_interface.py checks through the Python binding as well.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "trainrt/data_interface.hpp"
#include "trainrt/error.hpp"

using trainrt::DataInterface;

namespace {

nlohmann::json cases() {
  std::ifstream in(TRAINRT_DATA_INTERFACE_CASES);
  REQUIRE(in);
  return nlohmann::json::parse(in).at("cases");
}

DataInterface run(const nlohmann::json& c) {
  const auto env = c.at("env").get<std::map<std::string, std::string>>();
  const auto interfaces = c.value("interfaces", std::vector<std::string>{});
  return trainrt::data_interface(
      [&](std::string_view name) -> std::optional<std::string> {
        auto it = env.find(std::string(name));
        return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
      },
      interfaces, c.value("fallback", std::string()), "plugstack.conf ifname");
}

}  // namespace

TEST_CASE("the data network's interface: every case of the shared table", "[data-interface]") {
  const nlohmann::json all = cases();
  REQUIRE(all.size() >= 20);
  for (const auto& c : all) {
    INFO(c.at("why").get<std::string>());
    if (c.contains("error")) {
      CHECK_THROWS_WITH(run(c), Catch::Contains(c.at("error").get<std::string>()));
    } else {
      const DataInterface want{c.at("want")[0].get<std::string>(), c.at("want")[1].get<std::string>()};
      const DataInterface got = run(c);
      CHECK(got.name == want.name);
      CHECK(got.source == want.source);
    }
  }
}

TEST_CASE("the process environment and this node's interfaces feed the same rule", "[data-interface]") {
  const auto names = trainrt::node_interfaces();
  CHECK(std::find(names.begin(), names.end(), "lo") != names.end());  // every Linux network namespace has it
  ::setenv("TRAINRT_IFNAME", "", 1);
  ::setenv("GLOO_SOCKET_IFNAME", "^docker0", 1);
  ::setenv("NCCL_SOCKET_IFNAME", "l", 1);  // a prefix: lo, the only interface sure to be here
  CHECK(trainrt::data_interface_from_environment() == DataInterface{"lo", "NCCL_SOCKET_IFNAME"});
  ::unsetenv("NCCL_SOCKET_IFNAME");
  CHECK(trainrt::data_interface_from_environment("eth9", "fallback") == DataInterface{"eth9", "fallback"});
  ::unsetenv("GLOO_SOCKET_IFNAME");
  ::unsetenv("TRAINRT_IFNAME");
}
