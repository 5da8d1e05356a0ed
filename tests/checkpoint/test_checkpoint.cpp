// Single-process checkpoint behaviour: round trip, retention, and every kind of damage and
// failure: detected, named, and restore falls back to the last good step.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "fixture.hpp"

using namespace trainrt;
namespace fs = std::filesystem;

using namespace trainrt::testing;

TEST_CASE("save and restore round trip, latest pointer, retention", "[checkpoint]") {
  Fixture f;
  CHECK(f.mgr->restore() == -1);
  for (std::uint64_t s = 1; s <= 4; ++s) f.save(s);

  f.set(99);
  CHECK(f.mgr->restore() == 4);
  CHECK(f.holds(4));
  CHECK_FALSE(fs::exists(f.dir + "/step_000000000002"));  // keep_last = 2
  CHECK(fs::exists(f.dir + "/step_000000000003"));
  std::ifstream latest(f.dir + "/latest");
  std::string pointer;
  latest >> pointer;
  CHECK(pointer == "step_000000000004");
  auto r = f.mgr->save(5).get();
  CHECK(r.step == 5);
  CHECK(r.stall_seconds >= 0);
  CHECK(r.shard_bytes > 400000);
}

TEST_CASE("damaged checkpoints are detected, named, and skipped", "[checkpoint]") {
  struct Damage {
    const char* name;
    std::function<void(Fixture&)> apply;
    const char* reason;
  };
  std::vector<Damage> damages = {
      {"flipped bit", [](Fixture& f) {
         std::fstream s(f.shard(3), std::ios::in | std::ios::out | std::ios::binary);
         s.seekg(8192);
         char c;
         s.read(&c, 1);
         c ^= 0x10;
         s.seekp(8192);
         s.write(&c, 1);
       }, "fails its checksum"},
      {"truncated shard", [](Fixture& f) { fs::resize_file(f.shard(3), fs::file_size(f.shard(3)) - 100); }, "the manifest says"},
      {"missing shard", [](Fixture& f) { fs::remove(f.shard(3)); }, "cannot open"},
      {"corrupted manifest", [](Fixture& f) { std::ofstream(f.manifest(3)) << "{\"format\": 1, \"step\": "; }, "corrupt"},
      {"uncommitted step", [](Fixture& f) { fs::remove(f.manifest(3)); }, "no committed manifest"},
  };
  for (const auto& dmg : damages) {
    SECTION(dmg.name) {
      Fixture f;
      f.save(2);
      f.save(3);
      dmg.apply(f);
      f.set(99);
      CHECK(f.mgr->restore() == 2);
      CHECK(f.holds(2));
      CHECK(f.logged("skipped step 3"));
      CHECK(f.logged(dmg.reason));
    }
  }
}

void flip_a_bit(const std::string& path, std::streamoff at) {
  std::fstream s(path, std::ios::in | std::ios::out | std::ios::binary);
  s.seekg(at);
  char c;
  s.read(&c, 1);
  c ^= 0x10;
  s.seekp(at);
  s.write(&c, 1);
}

TEST_CASE("restore says where its time went: phases that tile the call, a failed step's included", "[checkpoint]") {
  Fixture f;
  f.save(2);
  f.save(3);
  flip_a_bit(f.shard(3), 8192);
  f.set(99);
  REQUIRE(f.mgr->restore() == 2);
  const auto& r = f.mgr->last_restore();
  std::vector<std::string> seen;
  double sum = 0;
  for (const auto& p : r.phases) {
    seen.push_back(fmt::format("{} {}", p.name, p.step));
    CHECK(p.seconds >= 0);
    sum += p.seconds;
  }
  // Step 3 is checked and read (its checksum fails there), then step 2 is checked, read, installed.
  CHECK(seen == std::vector<std::string>{"find -1", "check 3", "read 3", "check 2", "read 2", "install 2"});
  CHECK(r.seconds > 0);
  CHECK(sum == Approx(r.seconds).epsilon(1e-9));
  CHECK(f.logged("read of step 3 "));
  CHECK(f.logged(", check "));
  CHECK(f.logged(", install "));
  // A later restore starts a new account.
  REQUIRE(f.mgr->restore() == 2);
  CHECK(f.mgr->last_restore().phases.size() == 6);
}

TEST_CASE("a corrupt only step: in-place restore refuses to pretend the buffers are fresh", "[checkpoint]") {
  SECTION("in place (default): the error names the step, the entry and what to do") {
    Fixture f;
    f.save(3);
    flip_a_bit(f.shard(3), 8192 + 4 * 90000);  // late in 'w': most of it was already read in place
    f.set(99);
    CHECK_THROWS_WITH(f.mgr->restore(), Catch::Contains("step 3") && Catch::Contains("entry 'w'") &&
                                            Catch::Contains("fails its checksum") && Catch::Contains("initialize them again"));
    CHECK_THROWS_AS(f.mgr->restore(), CheckpointError);  // a checkpoint failure, not a program bug
  }
  SECTION("verify_before_load: -1 and the buffers exactly as they were") {
    Fixture f;
    f.open(checkpoint::Sharding::PerRank, true);
    f.save(3);
    flip_a_bit(f.shard(3), 8192 + 4 * 90000);
    f.set(99);
    CHECK(f.mgr->restore() == -1);
    CHECK(f.holds(99));
    CHECK(f.logged("fails its checksum"));
  }
  SECTION("verify_before_load still restores and falls back like the in-place path") {
    Fixture f;
    f.open(checkpoint::Sharding::PerRank, true);
    f.save(2);
    f.save(3);
    flip_a_bit(f.shard(3), 8192);
    f.set(99);
    CHECK(f.mgr->restore() == 2);
    CHECK(f.holds(2));
  }
  SECTION("a step failing structural checks never touches the buffers, in place or not") {
    Fixture f;
    f.save(3);
    fs::resize_file(f.shard(3), fs::file_size(f.shard(3)) - 100);
    f.set(99);
    CHECK(f.mgr->restore() == -1);
    CHECK(f.holds(99));
  }
}

TEST_CASE("user metadata travels in the manifest", "[checkpoint]") {
  Fixture f;
  CHECK(f.mgr->restored_metadata().empty());
  f.set(4);
  f.mgr->save(4, {{"loss", "0.25"}, {"data_epoch", "3"}}).get();
  f.save(5);  // no metadata
  f.set(99);
  CHECK(f.mgr->restore() == 5);
  CHECK(f.mgr->restored_metadata().empty());
  fs::remove(f.manifest(5));
  CHECK(f.mgr->restore() == 4);
  CHECK(f.mgr->restored_metadata() == checkpoint::Metadata{{"data_epoch", "3"}, {"loss", "0.25"}});
}

TEST_CASE("a shard header altered into other valid JSON is caught before any buffer is touched", "[checkpoint]") {
  Fixture f;
  f.save(3);
  {
    std::fstream s(f.shard(3), std::ios::in | std::ios::out | std::ios::binary);
    std::string head(4096, '\0');
    s.read(head.data(), static_cast<std::streamsize>(head.size()));
    auto at = head.find("\"checksum\":\"");
    REQUIRE(at != std::string::npos);
    at += 12;
    head[at] = head[at] == '0' ? '1' : '0';  // still a valid hex string
    s.seekp(0);
    s.write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  f.set(99);
  CHECK(f.mgr->restore() == -1);  // in place, yet no throw: nothing was read into the buffers
  CHECK(f.holds(99));
  CHECK(f.logged("header does not match its checksum in the manifest"));
}

TEST_CASE("inspect: committed, uncommitted and damaged steps, without registering anything", "[checkpoint]") {
  Fixture f;
  f.set(1);
  f.mgr->save(1, {{"loss", "0.5"}}).get();
  f.save(2);
  f.save(3);
  f.mgr->wait_idle();
  fs::remove(f.manifest(3));                    // uncommitted
  flip_a_bit(f.shard(2), 8192);                 // damaged inside entry 'w'
  std::vector<std::string> progress;
  checkpoint::InspectOptions o;
  o.progress = [&](const std::string& m) { progress.push_back(m); };
  auto steps = checkpoint::inspect(f.dir, o);
  REQUIRE(steps.size() == 2);  // keep_last = 2 removed step 1
  CHECK(steps[0].step == 3);
  CHECK_FALSE(steps[0].committed);
  CHECK_THAT(steps[0].problem, Catch::Contains("no committed manifest"));
  CHECK(steps[1].step == 2);
  CHECK(steps[1].committed);
  CHECK_FALSE(steps[1].intact());
  REQUIRE(steps[1].problems().size() == 1);
  CHECK_THAT(steps[1].problems()[0], Catch::Contains("entry 'w'") && Catch::Contains("fails its checksum"));
  REQUIRE(steps[1].shards.size() == 1);
  CHECK(steps[1].shards[0].entries.size() == 3);  // w, d, rng
  CHECK(progress.size() == 1);
  CHECK(checkpoint::latest_step(f.dir) == std::optional<std::uint64_t>(3));
  o.check_data = false;  // headers only: the flipped bit is not seen, the structure is
  auto quick = checkpoint::inspect(f.dir, o);
  CHECK(quick[1].problems().empty());
  CHECK_FALSE(quick[1].data_checked);
  CHECK_THROWS_WITH(checkpoint::inspect(f.dir + "/nope"), Catch::Contains("cannot read checkpoint directory"));
  CHECK_THROWS_AS(checkpoint::inspect(f.dir + "/nope"), CheckpointError);
}

TEST_CASE("a failing write leaves earlier checkpoints intact and training goes on", "[checkpoint]") {
  Fixture f;
  f.save(1);
  // RLIMIT_FSIZE makes the kernel refuse writes past 64 KiB (EFBIG), like a full disk would.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ign, &old);
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit small{65536, saved.rlim_max};  // soft limit only: lowering the hard one is for good
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  f.set(2);
  auto fut = f.mgr->save(2);
  CHECK_THROWS_WITH(fut.get(), Catch::Contains("step 2 not committed") && Catch::Contains("File too large"));
  CHECK_THROWS_AS(fut.get(), CheckpointError);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
  sigaction(SIGXFSZ, &old, nullptr);
  CHECK_FALSE(fs::exists(f.dir + "/step_000000000002"));  // the failed step left nothing
  f.set(99);
  CHECK(f.mgr->restore() == 1);
  CHECK(f.holds(1));
  f.save(3);  // and the next save works again
  CHECK(f.mgr->restore() == 3);
}

TEST_CASE("unusable directories are errors naming the path", "[checkpoint]") {
  auto session = bootstrap::Session::single_process();
  checkpoint::Options o;
  o.directory = "/nonexistent-parent-trainrt/ckpt";
  CHECK_THROWS_WITH(checkpoint::Manager(*session, o), Catch::Contains("/nonexistent-parent-trainrt/ckpt"));
  std::string file = (fs::temp_directory_path() / fmt::format("trainrt-notadir-{}", ::getpid())).string();
  std::ofstream(file) << "x";
  o.directory = file + "/ckpt";
  CHECK_THROWS_WITH(checkpoint::Manager(*session, o), Catch::Contains("Not a directory"));
  fs::remove(file);
  if (::geteuid() == 0) {
    WARN("running as root: permission-denied directories cannot be provoked (root writes anywhere)");
  } else {
    std::string ro = (fs::temp_directory_path() / fmt::format("trainrt-ro-{}", ::getpid())).string();
    fs::create_directory(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    o.directory = ro + "/ckpt";
    CHECK_THROWS_WITH(checkpoint::Manager(*session, o), Catch::Contains("Permission denied"));
    fs::permissions(ro, fs::perms::owner_all);
    fs::remove_all(ro);
  }
  o.directory = "";
  CHECK_THROWS_AS(checkpoint::Manager(*session, o), UsageError);
}

TEST_CASE("world-size changes: sharded state refuses, replicated state restores", "[checkpoint]") {
  Fixture f;
  // Step 1 written by a real 2-rank world (one thread per rank), every entry replicated.
  save_in_world(f.dir, 2, checkpoint::Sharding::Replicated, 1);
  // f registered its entries PerRank: nothing restorable, and starting fresh would drop step 1.
  CHECK_THROWS_AS(f.mgr->restore(), checkpoint::WorldSizeError);
  CHECK_THROWS_WITH(f.mgr->restore(), Catch::Contains("starting fresh would drop the progress of step 1") &&
                                          Catch::Contains("saved by 2 ranks, this job has 1"));
  f.open(checkpoint::Sharding::Replicated);
  f.set(99);
  CHECK(f.mgr->restore() == 1);
  CHECK(f.holds(1));
  auto steps = checkpoint::inspect(f.dir);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].intact());
  CHECK(steps[0].shards.size() == 2);
}

TEST_CASE("world-size changes: state saved per rank is not read as replicated", "[checkpoint]") {
  Fixture f;
  save_in_world(f.dir, 2, checkpoint::Sharding::PerRank, 1);  // each rank's own state
  f.open(checkpoint::Sharding::Replicated);                   // a job that claims it is replicated
  f.set(99);
  CHECK_THROWS_WITH(f.mgr->restore(), Catch::Contains("starting fresh would drop the progress of step 1") &&
                                          Catch::Contains("was saved per rank by 2 ranks"));
  CHECK(f.holds(99));
}

TEST_CASE("stop signals set the flag the loop polls", "[checkpoint]") {
  checkpoint::install_stop_signals();
  CHECK_FALSE(checkpoint::should_stop());
  ::raise(SIGUSR1);
  CHECK(checkpoint::should_stop());
  CHECK(checkpoint::stop_signal() == SIGUSR1);
}

TEST_CASE("device buffers: pinned staging is refused cleanly without a GPU", "[checkpoint]") {
  Fixture f;
  float* fake_device = f.w.data();
  try {
    f.mgr->register_buffer("dev", fake_device, 64, DType::F32, {16}, checkpoint::Sharding::PerRank,
                           checkpoint::Location::Device);
    WARN("a CUDA device is present: device registration succeeded (the gpu-labelled test covers the round trip)");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("checkpoint") &&
                                          (Catch::Contains("cudaMallocHost") || Catch::Contains("CUDA build")));
  }
  CHECK_THROWS_WITH(f.mgr->register_buffer("odd", f.w.data(), 6, DType::F32, {1}), Catch::Contains("whole number"));
  f.save(1);  // the manager still works after the refused registration
  CHECK(f.mgr->restore() == 1);
}
