// The watchdog ends a stuck rank with exit 3 and its flight record; after a termination request
// (SIGTERM) it allows guarded work (a step) only `grace` to end. Each case runs in a child process, which the
// watchdog may _Exit.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "trainrt/runtime/observability.hpp"

namespace {

using namespace std::chrono_literals;

struct Outcome {
  int code = -1;
  double seconds = 0;
  std::string flight;
};

// Runs `body` in a child with a watchdog (timeout 10 s, the given grace) whose termination test
// turns true `ask_after` into the run; the child exits 0 when body returns.
template <typename Body>
Outcome run_child(std::chrono::milliseconds ask_after, std::chrono::milliseconds grace, Body body) {
  const auto path = std::filesystem::temp_directory_path() / ("trainrt-watchdog-" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(path);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    trainrt::FlightRecorder recorder;
    trainrt::Watchdog dog(
        recorder, 7, 10s, path.string(), [=] { return std::chrono::steady_clock::now() - start >= ask_after; }, grace);
    body(dog);
    std::_Exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  Outcome out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (std::ifstream in(path); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    out.flight = ss.str();
  }
  std::filesystem::remove(path);
  return out;
}

}  // namespace

TEST_CASE("after SIGTERM guarded work that does not end within the grace ends the rank, its record naming why") {
  const Outcome o = run_child(200ms, 300ms, [](trainrt::Watchdog& dog) {
    dog.guard_termination(true);  // a step's collectives
    std::this_thread::sleep_for(5s);
  });
  CHECK(o.code == 3);
  CHECK(o.seconds >= 0.5);
  CHECK(o.seconds < 4.5);  // the body sleeps 5 s: the watchdog, not the body, ended it
  CHECK(o.flight.find("SIGTERM") != std::string::npos);
  CHECK(o.flight.find("\"aborted\"") != std::string::npos);
}

TEST_CASE("after SIGTERM work that is not guarded (a restore, the final checkpoint) is not cut short") {
  const Outcome o = run_child(100ms, 300ms, [](trainrt::Watchdog& dog) {
    dog.guard_termination(true);
    std::this_thread::sleep_for(150ms);
    dog.guard_termination(false);
    std::this_thread::sleep_for(1500ms);
  });
  CHECK(o.code == 0);
  CHECK(o.flight.empty());
}

TEST_CASE("the grace counts from the guarded work's start when that comes after SIGTERM, and follows set_termination_grace") {
  const Outcome o = run_child(100ms, 300ms, [](trainrt::Watchdog& dog) {
    dog.set_termination_grace(1500ms);       // steps got slower
    std::this_thread::sleep_for(800ms);      // unguarded: the request is older than the grace
    dog.guard_termination(true);
    std::this_thread::sleep_for(1000ms);     // a step within the (raised) grace
    dog.guard_termination(false);
  });
  CHECK(o.code == 0);
  CHECK(o.flight.empty());
}

TEST_CASE("without a termination request slow guarded work is the ordinary timeout's affair only") {
  const Outcome o = run_child(1h, 300ms, [](trainrt::Watchdog& dog) {
    dog.guard_termination(true);
    std::this_thread::sleep_for(1500ms);
  });
  CHECK(o.code == 0);
  CHECK(o.flight.empty());
}
