// The memory tier on one node (docs/checkpoint.md "Memory tier"): snapshots and saves keep the
// shard in a tmpfs file, a restarted process restores from it without the checkpoint directory,
// and every bad tier file (flipped, truncated, a symlink, a FIFO, another user's, writable by
// others) is refused with the reason logged and the directory's step used instead. Buddy copies
// between nodes are tested under mpirun (tier_mp.cpp, memory_tier.sh).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../../checkpoint/src/tier_dir.hpp"
#include "trainrt/checkpoint/memory_tier.hpp"
#include "fixture.hpp"

using namespace trainrt;
using namespace trainrt::testing;
namespace fs = std::filesystem;

namespace {

// <base>/trainrt-<uid>/job-<job>/ckpt-<key>/<node>: the one checkpoint directory's key there.
std::string tier_node_dir(const std::string& base, const std::string& job, const std::string& node) {
  const fs::path j = fmt::format("{}/trainrt-{}/job-{}", base, ::geteuid(), job);
  std::vector<fs::path> keys;
  if (fs::exists(j))
    for (const auto& e : fs::directory_iterator(j)) keys.push_back(e.path());
  if (keys.size() != 1) return (j / "no-single-ckpt-key" / node).string();
  return (keys[0] / node).string();
}

// A private tmpfs base (not the real /dev/shm/trainrt-<uid>), one job, one node.
struct Tier : Fixture {
  std::string base = fmt::format("/dev/shm/trainrt-test-{}-{}", ::getpid(), counter);
  std::string job = "job1";
  std::string node_dir() const { return tier_node_dir(base, job, "n0"); }
  std::string tier_file(std::uint64_t step, unsigned rank = 0) const {
    return fmt::format("{}/step_{:012}/rank_{:05}.shard", node_dir(), step, rank);
  }
  Tier() {
    fs::create_directories(base);
    reopen();
  }
  ~Tier() {
    mgr.reset();
    fs::remove_all(base);
  }
  void reopen(bool verify_before_load = false) {
    mgr.reset();
    checkpoint::Options o;
    o.directory = dir;
    o.keep_last = 2;
    o.verify_before_load = verify_before_load;
    o.log = [this](const std::string& m) { log.push_back(m); };
    o.memory_tier.enabled = true;
    o.memory_tier.base = base;
    o.memory_tier.job = job;
    o.memory_tier.node = "n0";
    mgr = std::make_unique<checkpoint::Manager>(*session, o);
    mgr->register_buffer("w", w.data(), w.size() * 4, DType::F32, {100, 1000});
    mgr->register_buffer("d", d.data(), d.size() * 8, DType::F64, {7});
    mgr->register_blob("rng", &blob);
  }
  void snapshot(std::uint64_t step) {
    set(step);
    auto r = mgr->snapshot(step).get();
    REQUIRE(r.in_memory);
    REQUIRE_FALSE(r.buddy_protected);  // one node: nobody to copy to
  }
  // A restarted process: new manager, state scrambled, restore.
  std::int64_t restart(bool verify_before_load = false) {
    reopen(verify_before_load);
    set(999);
    log.clear();
    return mgr->restore();
  }
  static std::string read(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
};

// Where a shard's data starts (after its header pages): a byte there is inside entry "w".
std::uint64_t data_start(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[16];
  f.read(head, 16);
  std::uint32_t len = 0;
  std::memcpy(&len, head + 12, 4);
  return (16 + std::uint64_t{len} + 4095) / 4096 * 4096;
}

void flip_byte(const std::string& path, std::uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c ^= 0x20;
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("a snapshot restores from memory, without the checkpoint directory", "[memory_tier]") {
  Tier t;
  t.snapshot(5);
  REQUIRE(fs::exists(t.tier_file(5)));
  REQUIRE(fs::exists(t.node_dir() + "/step_000000000005/MANIFEST.json"));
  REQUIRE_FALSE(fs::exists(t.manifest(5)));  // a snapshot never writes the directory
  REQUIRE(t.restart() == 5);
  CHECK(t.holds(5));
  CHECK(t.mgr->last_restore().source == "memory");
  CHECK(t.mgr->last_restore().local_copies == 1);
  CHECK(t.mgr->last_restore().moved_copies == 0);
  CHECK(t.logged("restored step 5 from the memory tier"));
  std::vector<std::string> phases;
  for (const auto& p : t.mgr->last_restore().phases) phases.push_back(fmt::format("{} {}", p.name, p.step));
  CHECK(phases == std::vector<std::string>{"find -1", "memory tier 5", "install 5"});
  // Modes: 0700 at every level, so no other user can read the state.
  for (const std::string& p : {t.base + fmt::format("/trainrt-{}", ::geteuid()), t.node_dir()})
    CHECK((fs::status(p).permissions() & fs::perms::all) == fs::perms::owner_all);
}

TEST_CASE("save writes the directory and the tier with the same bytes; the newest step wins", "[memory_tier]") {
  Tier t;
  t.save(3);
  REQUIRE(Tier::read(t.shard(3)) == Tier::read(t.tier_file(3)));
  REQUIRE(Tier::read(t.manifest(3)) == Tier::read(t.node_dir() + "/step_000000000003/MANIFEST.json"));
  t.snapshot(4);
  // The tier keeps one step: its file moved on to step 4, step 3's directory is gone.
  CHECK_FALSE(fs::exists(t.node_dir() + "/step_000000000003"));
  REQUIRE(t.restart() == 4);
  CHECK(t.holds(4));
  // Restored from memory, saved again: the file is reused (staged in place), still one step kept.
  t.snapshot(6);
  CHECK_FALSE(fs::exists(t.node_dir() + "/step_000000000004"));
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(t.node_dir()))
    if (e.is_regular_file() && e.path().extension() == ".shard") ++files;
  CHECK(files == 1);
  REQUIRE(t.restart() == 6);
  CHECK(t.holds(6));
  // The directory's step 3 is what a lost tier leaves.
  fs::remove_all(t.node_dir() + "/step_000000000006");
  const auto got = t.restart();
  INFO(fmt::format("log: {}", fmt::join(t.log, "\n")));
  REQUIRE(got == 3);
  CHECK(t.mgr->last_restore().source == "disk");
}

TEST_CASE("a bad tier file is never used: the reason is logged and the directory's step restores", "[memory_tier]") {
  struct Case {
    const char* name;
    std::function<void(const std::string&)> spoil;
    const char* reason;
  };
  const bool root = ::geteuid() == 0;
  std::vector<Case> cases = {
      {"a flipped byte in the data", [](const std::string& p) { flip_byte(p, data_start(p) + 1000); }, "fails its checksum"},
      {"a flipped byte in the header", [](const std::string& p) { flip_byte(p, 40); }, "does not match its checksum"},
      {"truncated", [](const std::string& p) { fs::resize_file(p, fs::file_size(p) / 2); }, "the manifest says"},
      {"a symlink to a good copy",
       [](const std::string& p) {
         fs::rename(p, p + ".real");
         fs::create_symlink(p + ".real", p);
       },
       "symbolic link"},
      {"a FIFO", [](const std::string& p) { fs::remove(p), ::mkfifo(p.c_str(), 0600); }, "is a FIFO"},
      {"writable by others", [](const std::string& p) { fs::permissions(p, fs::perms::others_write, fs::perm_options::add); },
       "writable by others"},
  };
  if (root)
    cases.push_back({"owned by another user", [](const std::string& p) { REQUIRE(::chown(p.c_str(), 65534, 65534) == 0); },
                     "owned by uid 65534"});
  for (const auto& c : cases) {
    SECTION(c.name) {
      Tier t;
      t.save(3);
      t.snapshot(4);
      c.spoil(t.tier_file(4));
      REQUIRE(t.restart() == 3);
      CHECK(t.holds(3));
      CHECK(t.mgr->last_restore().source == "disk");
      INFO(fmt::format("log: {}", fmt::join(t.log, "\n")));
      REQUIRE(t.mgr->last_restore().fallbacks.size() == 1);
      CHECK_THAT(t.mgr->last_restore().fallbacks[0], Catch::Contains("memory tier step 4") && Catch::Contains(c.reason));
      CHECK(t.logged("skipped step 4 in the memory tier"));
    }
  }
}

TEST_CASE("verify_before_load: a bad tier copy leaves the buffers untouched and falls back", "[memory_tier]") {
  Tier t;
  t.snapshot(4);
  flip_byte(t.tier_file(4), data_start(t.tier_file(4)) + 1000);
  REQUIRE(t.restart(true) == -1);  // nothing on disk
  CHECK(t.holds(999));
  CHECK(t.logged("fails its checksum"));
}

TEST_CASE("four ranks on one node: every rank's copy, one manifest, restored together", "[memory_tier]") {
  const std::string base = fmt::format("/dev/shm/trainrt-test-{}-mt4", ::getpid());
  const std::string dir = (fs::temp_directory_path() / fmt::format("trainrt-mt4-{}", ::getpid())).string();
  fs::create_directories(base);
  auto run = [&](bool save) {
    ThreadWorld world(4);
    std::vector<std::thread> ranks;
    std::atomic<int> failures{0};
    std::vector<std::int64_t> restored(4, -2);
    for (unsigned r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        try {
          ThreadSession session(world, r);
          std::vector<float> w(5000 + r);  // per-rank sizes differ
          checkpoint::Options o;
          o.directory = dir;
          o.memory_tier.enabled = true;
          o.memory_tier.base = base;
          o.memory_tier.job = "j4";
          o.memory_tier.node = "n0";
          checkpoint::Manager m(session, o);
          m.register_buffer("w", w.data(), w.size() * 4, DType::F32, {static_cast<std::int64_t>(w.size())});
          if (save) {
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(r * 100000 + i);
            m.snapshot(8).get();
          } else {
            restored[r] = m.restore();
            for (std::size_t i = 0; i < w.size(); ++i)
              if (w[i] != static_cast<float>(r * 100000 + i)) throw std::runtime_error("wrong value");
            if (m.last_restore().source != "memory") throw std::runtime_error("not from memory");
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %u: %s\n", r, e.what());
          ++failures;
        }
      });
    for (auto& th : ranks) th.join();
    REQUIRE(failures == 0);
    return restored;
  };
  run(true);
  const std::string step = tier_node_dir(base, "j4", "n0") + "/step_000000000008";
  CHECK(fs::exists(step + "/MANIFEST.json"));
  for (unsigned r = 0; r < 4; ++r) CHECK(fs::exists(step + fmt::format("/rank_{:05}.shard", r)));
  CHECK(run(false) == std::vector<std::int64_t>(4, 8));
  fs::remove_all(base);
  fs::remove_all(dir);
}

TEST_CASE("the tier refuses another user's directory and bad names; snapshot needs the tier", "[memory_tier]") {
  Tier t;
  const std::string user = t.base + fmt::format("/trainrt-{}", ::geteuid());
  SECTION("a name that is not one path component") {
    checkpoint::Options o;
    o.directory = t.dir;
    o.memory_tier.enabled = true;
    o.memory_tier.base = t.base;
    o.memory_tier.job = "../x";
    CHECK_THROWS_WITH(checkpoint::Manager(*t.session, o), Catch::Contains("job '../x'"));
    o.memory_tier.job = "1";
    o.memory_tier.node = "a/b";
    CHECK_THROWS_WITH(checkpoint::Manager(*t.session, o), Catch::Contains("node 'a/b'"));
  }
  SECTION("a user directory that is a symlink is never followed: the tier is off, saves go to disk") {
    t.mgr.reset();
    fs::remove_all(user);
    fs::create_directories(t.base + "/elsewhere");
    fs::create_symlink(t.base + "/elsewhere", user);
    t.reopen();
    t.save(2);  // the tier opens at the first save or restore
    CHECK_THAT(t.mgr->memory_tier_off(), Catch::Contains("symbolic link"));
    CHECK(fs::is_empty(t.base + "/elsewhere"));
    REQUIRE(t.restart() == 2);
    CHECK(t.mgr->last_restore().source == "disk");
  }
  if (::geteuid() == 0) {
    SECTION("a user directory owned by someone else: the tier is off") {
      t.mgr.reset();
      fs::create_directories(user);
      REQUIRE(::chown(user.c_str(), 65534, 65534) == 0);
      t.reopen();
      CHECK_THROWS_WITH(t.mgr->snapshot(1).get(), Catch::Contains("not in the memory tier"));
      CHECK_THAT(t.mgr->memory_tier_off(), Catch::Contains("owned by uid 65534"));
    }
  }
  SECTION("snapshot without the tier is a usage error") {
    t.open();  // the fixture's manager: no tier
    CHECK_THROWS_AS(t.mgr->snapshot(1), UsageError);
  }
}

TEST_CASE("tier files never outlive the job: removal skips a live manager's node", "[memory_tier]") {
  Tier t;
  t.snapshot(1);
  const std::string job = fs::path(t.node_dir()).parent_path().parent_path().string();
  // The manager holds its node directory's lock: removal leaves it.
  auto left = checkpoint::tier::remove_job(t.base, t.job);
  CHECK(fs::exists(t.tier_file(1)));
  REQUIRE(left.size() == 1);
  CHECK_THAT(left[0], Catch::Contains("in use"));
  t.mgr.reset();
  // A finished job of the same user goes; the current one and one not known to be over stay.
  fs::create_directories(t.base + fmt::format("/trainrt-{}/job-7/ckpt-0123456789abcdef/n0/step_000000000001", ::geteuid()));
  auto lines = checkpoint::tier::clean_finished_jobs(t.base, "job1", [](const std::string& j) { return j == "7"; });
  CHECK_FALSE(fs::exists(t.base + fmt::format("/trainrt-{}/job-7", ::geteuid())));
  CHECK(fs::exists(t.tier_file(1)));
  lines = checkpoint::tier::remove_job(t.base, t.job);
  CHECK_FALSE(fs::exists(job));
}

TEST_CASE("cleaners of one job at once: each node directory goes, none reported in use, the job's too", "[memory_tier]") {
  Tier t;
  t.snapshot(1);
  const std::string job = fs::path(t.node_dir()).parent_path().parent_path().string();
  const std::string key = fs::path(t.node_dir()).parent_path().string();
  for (int n = 0; n < 6; ++n) fs::create_directories(fmt::format("{}/n{}/step_000000000001", key, n));
  t.mgr.reset();
  std::vector<std::vector<std::string>> said(4);
  std::vector<std::thread> cleaners;
  for (auto& lines : said) cleaners.emplace_back([&t, &lines] { lines = checkpoint::tier::remove_job(t.base, t.job); });
  for (auto& c : cleaners) c.join();
  int removed = 0;
  for (const auto& lines : said)
    for (const auto& l : lines) {
      CHECK_THAT(l, !Catch::Contains("in use"));
      removed += l.rfind("removed ", 0) == 0 ? 1 : 0;
    }
  CHECK(removed == 1);  // said once, by the cleaner that did it
  CHECK_FALSE(fs::exists(job));
}

TEST_CASE("a checkpoint directory made anew does not see the tier its predecessor left", "[memory_tier]") {
  Tier t;
  t.snapshot(5);
  t.mgr.reset();
  fs::remove_all(t.dir);  // the same path, another directory: a new run (or a job id used again)
  REQUIRE(t.restart() == -1);
  CHECK(t.holds(999));
}

TEST_CASE("two checkpoint directories in one job never see each other's memory tier", "[memory_tier]") {
  Tier a, b;
  fs::remove_all(b.base);
  b.job = a.job;
  b.base = a.base;  // same job, same tmpfs, another checkpoint directory
  b.reopen();
  a.snapshot(5);
  REQUIRE(b.restart() == -1);
  CHECK(b.holds(999));
  REQUIRE(a.restart() == 5);
}

TEST_CASE("the default tier base: the huge-page tmpfs where it qualifies, /dev/shm otherwise", "[memory_tier]") {
  using checkpoint::tier_base_problem;
  CHECK(tier_base_problem("/dev/shm") == "");  // root's tmpfs, mounted there, 1777
  // A folder inside a tmpfs, even root's and sticky: what a failed mount leaves in /run.
  const std::string dir = fmt::format("/dev/shm/trainrt-test-{}-base", ::getpid());
  fs::remove_all(dir);
  fs::create_directory(dir);
  ::chmod(dir.c_str(), 01777);
  const std::string inner = tier_base_problem(dir);
  fs::create_directory_symlink("/dev/shm", dir + "/link");
  const std::string link = tier_base_problem(dir + "/link");
  fs::remove_all(dir);
  CHECK(inner.find("not a mount of its own") != std::string::npos);
  CHECK(link.find("not a directory") != std::string::npos);  // never through a symlink
  CHECK(tier_base_problem("/proc").find("not a tmpfs") != std::string::npos);
  CHECK(tier_base_problem("/no/such/base").find("No such file") != std::string::npos);
  const std::string expected = tier_base_problem(checkpoint::kHugePageTierBase).empty() ? checkpoint::kHugePageTierBase
                                                                                      : checkpoint::kFallbackTierBase;
  CHECK(checkpoint::default_tier_base() == expected);

  // The rules on the facts, every one alone.
  checkpoint::TierBaseFacts ok{true, true, true, 0, S_IFDIR | 01777};
  CHECK(checkpoint::judge_tier_base("/b", ok) == "");
  auto with = [&](auto change) {
    auto f = ok;
    change(f);
    return checkpoint::judge_tier_base("/b", f);
  };
  CHECK(with([](auto& f) { f.mode = S_IFDIR | 0755; }) == "");  // root's alone: no sticky bit needed
  CHECK(with([](auto& f) { f.mode = S_IFDIR | 0777; }) == "/b: writable by others without the sticky bit (mode 777)");
  CHECK(with([](auto& f) { f.mode = S_IFDIR | 0775; }) == "/b: writable by others without the sticky bit (mode 775)");
  CHECK(with([](auto& f) { f.uid = 1000; }) == "/b: owned by uid 1000, not root");
  CHECK(with([](auto& f) { f.own_mount = false; }) == "/b: not a mount of its own");
  CHECK(with([](auto& f) { f.tmpfs = false; }) == "/b: not a tmpfs");
  CHECK(with([](auto& f) { f.directory = false; }) == "/b: not a directory");
}
