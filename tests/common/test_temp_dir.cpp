// The test kit's temporary directory: fresh and private, gone afterwards with what it holds, even
// when the test fails half-way (the tests' own leftovers must not feed a later run).
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "temp_dir.hpp"

namespace fs = std::filesystem;
using trainrt::testing::TempDir;

TEST_CASE("a temporary directory is fresh, private and removed with its contents", "[test-kit]") {
  fs::path kept;
  {
    TempDir a("kit-"), b("kit-");
    CHECK(a.path() != b.path());
    CHECK(a.path().filename().string().rfind("kit-", 0) == 0);
    struct stat st {};
    REQUIRE(::stat(a.str().c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0700);
    CHECK(fs::is_empty(a.path()));
    fs::create_directories(a.path() / "sub" / "deeper");
    std::ofstream(a / "sub/deeper/file") << "x";
    CHECK(a / "file" == (a.path() / "file").string());
    kept = a.path();
  }
  CHECK_FALSE(fs::exists(kept));
}

TEST_CASE("a temporary directory is removed when the test throws", "[test-kit]") {
  fs::path kept;
  try {
    TempDir d;
    kept = d.path();
    std::ofstream(d / "file") << "x";
    throw std::runtime_error("a failed REQUIRE");
  } catch (const std::runtime_error&) {
  }
  REQUIRE_FALSE(kept.empty());
  CHECK_FALSE(fs::exists(kept));
}
