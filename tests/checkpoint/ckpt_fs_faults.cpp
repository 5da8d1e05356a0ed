// Real filesystem failures, provoked as root in a private mount namespace (nothing outside this
// process sees the mounts, and they vanish with it):
//   full disk      a 1 MiB tmpfs that holds one step but not two          -> ENOSPC
//   read-only      the same tmpfs remounted read-only                     -> EROFS
//   other user     a child that dropped to uid/gid 65534, saving in root's directory -> refused
//   no permission  the same child in its own directory made read-only (0555) -> EACCES
// In every case the save reports the errno text, training goes on (the manager keeps working), and
// the last committed step still restores bit for bit. Exit 77 (skipped) when not root or when no
// mount namespace can be made; 1 with FAIL lines otherwise.
#include <fmt/format.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"

using namespace trainrt;
namespace fs = std::filesystem;

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
  fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

struct State {
  std::vector<float> w = std::vector<float>((600u << 10) / 4);  // 600 KiB: one step fits in 1 MiB, two do not
  std::vector<std::uint8_t> blob;
  void set(std::uint64_t step) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(step * 7919 + i % 4099);
    blob.assign(8, static_cast<std::uint8_t>(step));
  }
  bool holds(std::uint64_t step) {
    State want;
    want.set(step);
    return want.w == w && want.blob == blob;
  }
};

struct Run {
  std::unique_ptr<bootstrap::Session> session = bootstrap::Session::single_process();
  State s;
  std::unique_ptr<checkpoint::Manager> mgr;
  explicit Run(const std::string& dir) {
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 2;
    mgr = std::make_unique<checkpoint::Manager>(*session, o);
    mgr->register_buffer("w", s.w.data(), s.w.size() * 4, DType::F32, {static_cast<std::int64_t>(s.w.size())});
    mgr->register_blob("rng", &s.blob);
  }
  // The save's error text, or "" when it committed.
  std::string save(std::uint64_t step) {
    s.set(step);
    try {
      mgr->save(step).get();
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  bool restores(std::uint64_t step) {
    s.set(999);
    return mgr->restore() == static_cast<std::int64_t>(step) && s.holds(step);
  }
};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void full_disk_then_read_only(const std::string& mnt) {
  Run r(mnt + "/ckpt");
  expect(r.save(1).empty(), "step 1 fits on the 1 MiB tmpfs");
  std::string err = r.save(2);
  fmt::print("     save(2): {}\n", err);
  expect(contains(err, "step 2 not committed") && contains(err, "No space left on device"),
         "full disk: save(2) reports ENOSPC");
  expect(!fs::exists(mnt + "/ckpt/step_000000000002"), "full disk: the failed step left nothing behind");
  expect(r.restores(1), "full disk: step 1 still restores bit for bit");
  err = r.save(3);
  expect(contains(err, "No space left on device"), "full disk: the next save fails the same clean way");
  expect(r.restores(1), "full disk: and step 1 is still intact after it");

  if (::mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    expect(false, fmt::format("remount read-only: {}", std::strerror(errno)));
    return;
  }
  err = r.save(4);
  fmt::print("     save(4): {}\n", err);
  expect(contains(err, "Read-only file system"), "read-only: save(4) reports EROFS");
  expect(r.restores(1), "read-only: step 1 still restores");
}

void permission_denied(const std::string& root_dir) {
  {
    Run r(root_dir);  // root commits step 1 in its own 0755 directory
    expect(r.save(1).empty(), "root saves step 1");
  }
  std::fflush(stdout);  // or the child would print the parent's buffered lines again
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
      std::_Exit(3);
    int before = failures;
    Run r(root_dir);
    std::string err = r.save(2);
    fmt::print("     save(2) as uid 65534: {}\n", err);
    expect(contains(err, "owned by uid 0"), "another user's directory: save(2) is refused, naming the owner");
    expect(r.restores(1), "another user's directory: step 1 (readable) still restores");
    {
      // Its own directory, but read-only to it: the kernel's EACCES reaches the caller.
      Run own(root_dir + "-nobody");
      expect(own.save(1).find("Permission denied") != std::string::npos, "no permission: save(1) reports EACCES");
    }
    try {
      checkpoint::Options o;
      o.directory = root_dir + "/sub";
      checkpoint::Manager m(*r.session, o);
      expect(false, "no permission: a manager on an uncreatable directory must refuse");
    } catch (const Error& e) {
      expect(contains(e.what(), "Permission denied") && contains(e.what(), root_dir + "/sub"),
             fmt::format("no permission: the manager names the directory ({})", e.what()));
    }
    std::fflush(stdout);
    std::_Exit(failures == before ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the unprivileged child saw every expected error");
  expect(!fs::exists(root_dir + "/step_000000000002"), "no permission: nothing of step 2 exists");
}

}  // namespace

int main() {
  if (::geteuid() != 0) {
    fmt::print("SKIPPED: needs root (a private mount namespace with a small tmpfs)\n");
    return 77;
  }
  // Before any thread exists: unshare(CLONE_NEWNS) refuses multi-threaded callers.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    fmt::print("SKIPPED: cannot make a private mount namespace here: {}\n", std::strerror(errno));
    return 77;
  }
  const std::string base = fmt::format("/tmp/trainrt-fsfaults-{}", ::getpid());
  fs::create_directories(base + "/mnt");
  if (::mount("tmpfs", (base + "/mnt").c_str(), "tmpfs", 0, "size=1m,mode=0755") != 0) {
    fmt::print("SKIPPED: cannot mount a tmpfs: {}\n", std::strerror(errno));
    fs::remove_all(base);
    return 77;
  }
  try {
    full_disk_then_read_only(base + "/mnt");
    ::umount2((base + "/mnt").c_str(), MNT_DETACH);
    fs::create_directories(base + "/owned-by-root");
    fs::create_directories(base + "/owned-by-root-nobody");
    if (::chown((base + "/owned-by-root-nobody").c_str(), 65534, 65534) != 0 || ::chmod((base + "/owned-by-root-nobody").c_str(), 0555) != 0)
      expect(false, "chown/chmod of the unprivileged child's directory");
    fs::permissions(base, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    permission_denied(base + "/owned-by-root");
  } catch (const std::exception& e) {
    expect(false, fmt::format("unexpected exception: {}", e.what()));
  }
  fs::remove_all(base);
  fmt::print("{} failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
