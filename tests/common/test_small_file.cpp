// read_small_file: the shared reader of procfs/sysfs files (plugin's port band and VM test,
// topology cache's staleness stamp).
#define CATCH_CONFIG_MAIN
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <string>

#include "temp_dir.hpp"
#include "trainrt/small_file.hpp"

using trainrt::LastLink;
using trainrt::read_small_file;
using trainrt::testing::TempDir;

namespace {

// A file of `text` in `dir`; its path.
std::string write(const trainrt::testing::TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

}  // namespace

TEST_CASE("a small file is read whole, a long one up to the cap") {
  TempDir dir;
  const std::string file = write(dir, "range", "32768\t60999\n");
  CHECK(read_small_file(file, 64, LastLink::refuse) == "32768\t60999\n");
  CHECK(read_small_file(file, 5, LastLink::refuse) == "32768");
  CHECK(read_small_file(write(dir, "empty", ""), 64, LastLink::refuse) == "");
  CHECK_FALSE(read_small_file(dir / "absent", 64, LastLink::follow).has_value());
}

TEST_CASE("a link is followed only when the caller says sysfs answers through links") {
  TempDir dir;
  const std::string target = write(dir, "vendor", "QEMU\n");
  REQUIRE(::symlink(target.c_str(), (dir / "link").c_str()) == 0);
  CHECK(read_small_file(dir / "link", 64, LastLink::follow) == "QEMU\n");
  CHECK_FALSE(read_small_file(dir / "link", 64, LastLink::refuse).has_value());
}

TEST_CASE("a FIFO in a file's place does not hang the reader") {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opened non-blocking with no writer: read() returns 0 at once, so the answer is empty.
  CHECK(read_small_file(fifo, 64, LastLink::refuse) == "");
}

TEST_CASE("procfs files come back as the kernel writes them") {
  const auto boot_id = read_small_file("/proc/sys/kernel/random/boot_id", 128, LastLink::refuse);
  REQUIRE(boot_id.has_value());
  CHECK(boot_id->size() == 37);  // a UUID and its newline
  // /proc/self is a link: refused unless followed.
  CHECK_FALSE(read_small_file("/proc/self", 16, LastLink::refuse).has_value());
  const auto cpuinfo = read_small_file("/proc/cpuinfo", 1 << 20, LastLink::refuse);
  REQUIRE(cpuinfo.has_value());
  std::ifstream in("/proc/cpuinfo");
  const std::string whole{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Whole, on a many-core node over several reads of a page each. Compared without the "cpu MHz"
  // lines, which the kernel recomputes at every read on many x86 hosts.
  auto steady = [](const std::string& text) {
    std::string out;
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t end = text.find('\n', at);
      end = end == std::string::npos ? text.size() : end + 1;
      if (text.compare(at, 7, "cpu MHz") != 0) out.append(text, at, end - at);
      at = end;
    }
    return out;
  };
  CHECK(steady(*cpuinfo) == steady(whole));
}
