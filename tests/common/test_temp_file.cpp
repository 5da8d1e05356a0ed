// create_temp_file and replace_file (trainrt/temp_file.hpp): a name planted in a shared directory
// is never opened, followed or truncated, and the file put in place is exactly the bytes given.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "trainrt/error.hpp"
#include "trainrt/temp_file.hpp"

namespace fs = std::filesystem;

namespace {

struct TmpDir {
  TmpDir() {
    char t[] = "/tmp/trainrt-temp-file-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE("create_temp_file: a fresh regular file under an unpredictable name, created exclusively") {
  TmpDir d;
  trainrt::Fd dir(::open(d.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(dir);
  std::set<std::string> names;
  for (int i = 0; i < 8; ++i) {
    trainrt::TempFile t = trainrt::create_temp_file(dir.get(), "metrics.prom", 0600, d.path);
    REQUIRE(t.fd);
    CHECK(t.name.rfind("metrics.prom.tmp.", 0) == 0);
    CHECK(t.name.size() == std::string("metrics.prom.tmp.").size() + 16);
    struct stat st {};
    REQUIRE(::fstat(t.fd.get(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK(st.st_size == 0);
    CHECK((::fcntl(t.fd.get(), F_GETFL) & O_NONBLOCK) != 0);
    names.insert(t.name);
  }
  CHECK(names.size() == 8);
  CHECK_THROWS_AS(trainrt::create_temp_file(dir.get(), "a/b", 0600, d.path), trainrt::Error);
}

TEST_CASE("replace_file: a FIFO or a link planted at the old fixed temporary name is not touched") {
  TmpDir d;
  const std::string path = d.path + "/train.prom";
  // The name the writers used before (<path>.tmp.<pid>): a FIFO there blocked an O_WRONLY open
  // forever; a link there was followed.
  const std::string fixed = path + ".tmp." + std::to_string(::getpid());
  REQUIRE(::mkfifo(fixed.c_str(), 0666) == 0);
  REQUIRE(::symlink("/etc/passwd", (path + ".tmp").c_str()) == 0);
  trainrt::replace_file(path, "x 1\n", 0644, "test file");
  CHECK(slurp(path) == "x 1\n");
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0644);
  REQUIRE(::lstat(fixed.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));  // left alone
  // Nothing else left behind: the planted two and the file.
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 3);
}

TEST_CASE("replace_file: a symlink at the final name is replaced, its target untouched") {
  TmpDir d;
  const std::string victim = d.path + "/victim";
  std::ofstream(victim) << "keep";
  const std::string path = d.path + "/train.prom";
  REQUIRE(::symlink(victim.c_str(), path.c_str()) == 0);
  trainrt::replace_file(path, "new\n", 0644, "test file");
  CHECK(slurp(victim) == "keep");
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(slurp(path) == "new\n");
}

TEST_CASE("replace_file: failures name the path and leave no temporary") {
  TmpDir d;
  try {
    trainrt::replace_file(d.path + "/missing/x.prom", "x", 0644, "test file");
    FAIL("no error");
  } catch (const trainrt::Error& e) {
    CHECK(std::string(e.what()).find("missing") != std::string::npos);
    CHECK(std::string(e.what()).find("No such file or directory") != std::string::npos);
  }
  CHECK_THROWS_AS(trainrt::replace_file(d.path + "/", "x", 0644, "test file"), trainrt::Error);
  // A directory at the final name: the rename fails, the temporary goes.
  fs::create_directory(d.path + "/dir.prom");
  fs::create_directory(d.path + "/dir.prom/sub");
  CHECK_THROWS_AS(trainrt::replace_file(d.path + "/dir.prom", "x", 0644, "test file"), trainrt::Error);
  CHECK(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()) == 1);
}
