// The golden tests need ../shared/topologies (real servers' files). Without the folder the whole
// executable exits 77, which CTest reports as Skipped (SKIP_RETURN_CODE), never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

#include "shared_topologies.hpp"

int main(int argc, char** argv) {
  bool listing = false;  // catch_discover_tests-style listing must work without the folder
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--list")) listing = true;
  if (!listing && trainrt::testing::shared_topologies_dir().empty()) {
    std::printf("SKIPPED: %s is absent (set TRAINRT_SHARED_TOPOLOGIES); golden tests on real topologies did not run\n",
                TRAINRT_SHARED_TOPOLOGIES);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
