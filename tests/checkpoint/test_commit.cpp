// The commit protocol and file access that cannot be redirected: one commit point, a committed
// step never rewritten, failures on either side of the commit point, retention that counts
// committed steps only and never leaves the checkpoint directory, planted symlinks.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fixture.hpp"
#include "trainrt/checkpoint/inspect.hpp"

using namespace trainrt;
using namespace trainrt::testing;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string step_dir(const Fixture& f, std::uint64_t step) { return f.dir + fmt::format("/step_{:012}", step); }

// An outside directory with one file whose content must survive everything.
struct Outside {
  std::string dir = (fs::temp_directory_path() / fmt::format("trainrt-outside-{}", ::getpid())).string();
  Outside() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir + "/precious") << "precious";
  }
  ~Outside() { fs::remove_all(dir); }
  bool intact() const { return fs::is_regular_file(dir + "/precious") && slurp(dir + "/precious") == "precious"; }
};

}  // namespace

TEST_CASE("a committed step is never rewritten, and keeps its metadata", "[checkpoint][commit]") {
  Fixture f;
  f.set(2);
  f.mgr->save(2, {{"loss", "0.5"}}).get();
  const std::string shard = slurp(f.shard(2)), manifest = slurp(f.manifest(2));
  f.set(77);                         // other state, as after more training
  auto r = f.mgr->save(2).get();     // what save_and_exit does after a stop signal right after a save
  CHECK(r.already_committed);
  CHECK(slurp(f.shard(2)) == shard);
  CHECK(slurp(f.manifest(2)) == manifest);
  CHECK(f.logged("already committed"));
  f.set(99);
  CHECK(f.mgr->restore() == 2);
  CHECK(f.holds(2));
  CHECK(f.mgr->restored_metadata() == checkpoint::Metadata{{"loss", "0.5"}});

  SECTION("even when every write would fail (a full disk at the end of a run)") {
    struct sigaction ign {}, old {};
    ign.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ign, &old);
    rlimit saved{};
    getrlimit(RLIMIT_FSIZE, &saved);
    rlimit none{0, saved.rlim_max};
    REQUIRE(setrlimit(RLIMIT_FSIZE, &none) == 0);
    auto again = f.mgr->save(2).get();
    REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    sigaction(SIGXFSZ, &old, nullptr);
    CHECK(again.already_committed);
    CHECK(slurp(f.shard(2)) == shard);
    CHECK(f.mgr->restore() == 2);
  }
}

TEST_CASE("a failure after the commit point leaves the step committed and whole", "[checkpoint][commit]") {
  Fixture f;
  f.save(1);
  // `latest` turned into a non-empty directory: the pointer cannot be renamed into place, which
  // happens after the manifest's rename, so the step stays committed with its shard.
  fs::remove(f.dir + "/latest");
  fs::create_directories(f.dir + "/latest/in-the-way");
  f.save(2);
  CHECK(f.logged("latest pointer was not updated"));
  CHECK(fs::exists(f.shard(2)));
  f.set(99);
  CHECK(f.mgr->restore() == 2);
  CHECK(f.holds(2));
}

TEST_CASE("a failure before the commit point leaves nothing of the step", "[checkpoint][commit]") {
  Fixture f;
  f.save(1);
  // Something not a file where rank 0 writes the manifest's temporary: the commit fails.
  fs::create_directories(step_dir(f, 2) + "/MANIFEST.json.tmp/in-the-way");
  f.set(2);
  CHECK_THROWS_WITH(f.mgr->save(2).get(), Catch::Contains("step 2 not committed"));
  CHECK_FALSE(fs::exists(f.shard(2)));
  CHECK_FALSE(fs::exists(f.shard(2) + ".tmp"));
  CHECK_FALSE(fs::exists(f.manifest(2)));
  f.set(99);
  CHECK(f.mgr->restore() == 1);
  CHECK(f.holds(1));
}

TEST_CASE("retention counts committed steps only", "[checkpoint][commit]") {
  Fixture f;  // keep_last = 2
  f.save(1);
  f.save(2);
  f.mgr->wait_idle();
  std::ofstream(f.manifest(2), std::ios::trunc) << "{";  // step 2: committed once, now unusable
  fs::create_directories(step_dir(f, 0));                // an uncommitted leftover, older
  f.set(99);
  CHECK(f.mgr->restore() == 1);
  CHECK(f.mgr->save(2).get().already_committed);  // never rewritten, even damaged
  f.save(3);
  f.mgr->wait_idle();
  CHECK(fs::exists(f.manifest(1)));  // the old code counted 2 and deleted 1: one usable step left
  CHECK(fs::exists(f.manifest(3)));
  CHECK_FALSE(fs::exists(step_dir(f, 2)));
  CHECK_FALSE(fs::exists(step_dir(f, 0)));
  f.set(99);
  CHECK(f.mgr->restore() == 3);

  SECTION("keep_last = 0 still keeps the newest step") {
    checkpoint::Options o;
    o.directory = f.dir;
    o.keep_last = 0;
    checkpoint::Manager m(*f.session, o);
    std::vector<float> w(16, 1.0f);
    m.register_buffer("w", w.data(), 64, DType::F32, {16});
    m.save(4).get();
    m.wait_idle();
    CHECK(fs::exists(f.dir + "/step_000000000004/MANIFEST.json"));
    CHECK_FALSE(fs::exists(f.manifest(3)));
  }
}

TEST_CASE("cleanup never leaves the checkpoint directory", "[checkpoint][redirect]") {
  Outside out;
  Fixture f;
  f.save(1);
  // A symlink named like a step, pointing at the outside directory (which holds a step's files).
  fs::copy(step_dir(f, 1), out.dir + "/step", fs::copy_options::recursive);
  fs::create_directory_symlink(out.dir + "/step", step_dir(f, 0));
  // Inside a real step: a symlink to the outside file and a directory with a file of its own.
  fs::create_symlink(out.dir + "/precious", step_dir(f, 1) + "/link");
  fs::create_directories(step_dir(f, 1) + "/sub");
  std::ofstream(step_dir(f, 1) + "/sub/file") << "x";
  for (std::uint64_t s = 2; s <= 5; ++s) f.save(s);
  f.mgr->wait_idle();
  CHECK(out.intact());
  CHECK(fs::exists(out.dir + "/step/MANIFEST.json"));
  CHECK(fs::exists(out.dir + "/step/rank_00000.shard"));
  CHECK(fs::is_symlink(step_dir(f, 0)));          // not a step: left alone
  CHECK_FALSE(fs::exists(f.manifest(1)));         // step 1 was retired ...
  CHECK(fs::exists(step_dir(f, 1) + "/sub/file"));  // ... without recursing into what is not ours
  CHECK_FALSE(fs::exists(step_dir(f, 1) + "/link"));
  auto steps = checkpoint::inspect(f.dir);
  REQUIRE(steps.size() == 3);  // 5, 4, and what is left of 1 (uncommitted)
  CHECK(steps[0].intact());
  CHECK_FALSE(steps[2].committed);
}

TEST_CASE("planted symlinks at temporary and final names are replaced, never written through", "[checkpoint][redirect]") {
  Outside out;
  Fixture f;
  f.save(1);
  fs::create_directories(step_dir(f, 2));
  for (const char* name : {"rank_00000.shard.tmp", "MANIFEST.json.tmp", "rank_00000.shard"})
    fs::create_symlink(out.dir + "/precious", step_dir(f, 2) + "/" + name);
  fs::remove(f.dir + "/latest");
  fs::create_symlink(out.dir + "/precious", f.dir + "/latest.tmp");
  fs::create_symlink(out.dir + "/precious", f.dir + "/latest");
  f.save(2);
  CHECK(out.intact());
  CHECK(fs::is_regular_file(fs::symlink_status(f.dir + "/latest")));
  CHECK(fs::is_regular_file(fs::symlink_status(f.shard(2))));
  f.set(99);
  CHECK(f.mgr->restore() == 2);
  CHECK(f.holds(2));
}

TEST_CASE("the checkpoint directory itself", "[checkpoint][users]") {
  auto session = bootstrap::Session::single_process();
  Outside out;
  checkpoint::Options o;
  SECTION("a symlink is refused, with or without a trailing slash") {
    const std::string link = out.dir + "/link";
    fs::create_directory_symlink(out.dir, link);
    for (const auto& path : {link, link + "/", link + "//"}) {
      o.directory = path;
      CHECK_THROWS_WITH(checkpoint::Manager(*session, o), Catch::Contains("symbolic link"));
      CHECK_THROWS_WITH(checkpoint::inspect(path), Catch::Contains("symbolic link"));
    }
  }
  SECTION("writable by others: saving is refused, restore still reads it") {
    Fixture f;
    f.save(1);
    fs::permissions(f.dir, fs::perms::all);
    f.set(2);
    CHECK_THROWS_WITH(f.mgr->save(2).get(), Catch::Contains("writable by others"));
    CHECK_FALSE(fs::exists(step_dir(f, 2)));
    f.set(99);
    CHECK(f.mgr->restore() == 1);
    CHECK(f.holds(1));
  }
  SECTION("owned by another user: saving is refused, restore still reads it") {
    if (::geteuid() != 0) {
      WARN("not root: cannot give a directory to another user here (checkpoint.hostile.users covers it)");
      return;
    }
    Fixture f;
    f.save(1);
    REQUIRE(::chown(f.dir.c_str(), 65534, 65534) == 0);
    f.set(2);
    CHECK_THROWS_WITH(f.mgr->save(2).get(), Catch::Contains("owned by uid 65534"));
    CHECK_FALSE(fs::exists(step_dir(f, 2)));
    f.set(99);
    CHECK(f.mgr->restore() == 1);
  }
}

TEST_CASE("save refuses what a reader would refuse", "[checkpoint][bounds]") {
  Fixture f;
  CHECK_THROWS_WITH(f.mgr->save(std::uint64_t{1} << 63), Catch::Contains("above the largest step"));
  CHECK_THROWS_WITH(f.mgr->save(1, {{"k", std::string("\xff\xfe", 2)}}), Catch::Contains("not UTF-8"));
  CHECK_THROWS_WITH(f.mgr->save(1, {{"k", std::string((1u << 20) + 1, 'x')}}), Catch::Contains("limit"));
  // The program's arguments, not the checkpoint, are at fault.
  CHECK_THROWS_AS(f.mgr->save(std::uint64_t{1} << 63), UsageError);
  CHECK_THROWS_AS(f.mgr->save(1, {{"k", std::string("\xff\xfe", 2)}}), UsageError);
  std::vector<std::uint8_t> b;
  CHECK_THROWS_WITH(f.mgr->register_blob("", &b), Catch::Contains("UTF-8"));
  CHECK_THROWS_WITH(f.mgr->register_blob(std::string("\xc0\x80", 2), &b), Catch::Contains("UTF-8"));
  CHECK_THROWS_WITH(f.mgr->register_buffer("big", f.w.data(), ~std::size_t{0} - 3, DType::F32, {1}),
                    Catch::Contains("staging cap"));
  f.save(1);  // and the manager still works
  CHECK(f.mgr->restore() == 1);
}
