#pragma once
// The one temporary directory of the C++ tests: made fresh by mkdtemp (a name no earlier run or
// other process can hold, so a test never starts on a previous run's leftovers), removed with
// everything in it when the object goes, even when a REQUIRE throws.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace trainrt::testing {

class TempDir {
 public:
  // Under $TMPDIR (else /tmp), mode 0700 as mkdtemp makes it.
  explicit TempDir(std::string_view prefix = "trainrt-test-") {
    std::string pattern = (std::filesystem::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;  // a destructor must not throw; what is left is in $TMPDIR
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  // A path inside, as a string (what the APIs under test take).
  std::string operator/(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace trainrt::testing
