#include "trainrt/checkpoint/stop_signals.hpp"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "trainrt/checkpoint/manager.hpp"

namespace trainrt {
namespace {

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }

}  // namespace

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool should_stop() { return g_stop_signal.load() != 0; }
int stop_signal() { return g_stop_signal.load(); }

void save_and_exit(checkpoint::Manager& manager, std::uint64_t step, std::map<std::string, std::string> metadata) {
  try {
    manager.save(step, std::move(metadata)).get();
    manager.wait_idle();
    // Leave together: under `srun --kill-on-bad-exit` the first rank to exit 75 makes srun kill
    // the others, which may still be finishing the final save or old-step removal.
    try {
      manager.session().barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainrt: step %llu is committed; the exit barrier failed: %s\n",
                   static_cast<unsigned long long>(step), e.what());
    }
    std::fflush(nullptr);
    std::_Exit(kRequeueExitCode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrt: final checkpoint of step %llu failed: %s\n", static_cast<unsigned long long>(step), e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

}  // namespace trainrt
