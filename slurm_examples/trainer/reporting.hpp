#pragma once
// A rank's reporting (metrics, trace, flight recorder, watchdog) and the watchdog's beat during
// start-up.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "options.hpp"
#include "trainrt/checkpoint/stop_signals.hpp"
#include "trainrt/runtime/observability.hpp"

namespace train_mlp {

// Where one rank's run reports: metrics, trace, flight recorder and the watchdog around them.
struct Reporting {
  std::string metrics_path, flight_path;
  bool first_attempt;  // a rerun (its metrics file already exists) never injects the fault again
  trainrt::FlightRecorder recorder;
  trainrt::Watchdog watchdog;
  trainrt::MetricsWriter metrics;
  trainrt::TraceWriter trace;
  Reporting(const Options& o, unsigned rank)
      : metrics_path(fmt::format("{}/metrics_rank{}.jsonl", o.out_dir, rank)),
        flight_path(fmt::format("{}/flight_rank{}.json", o.out_dir, rank)),
        first_attempt(!std::filesystem::exists(metrics_path)),
        // The collective timeout fires first and names the ranks that never arrived; the watchdog
        // (2 s later) catches hangs outside collectives.
        watchdog(recorder, rank, std::chrono::milliseconds(static_cast<long>(o.watchdog_s * 1000) + 2000), flight_path,
                 [] { return trainrt::stop_signal() == SIGTERM; }, std::chrono::milliseconds(static_cast<long>(o.term_grace_s * 1000))),
        metrics(metrics_path),
        trace(fmt::format("{}/trace_rank{}.json", o.out_dir, rank), rank) {}
};

// Start-up (the ballast's memory, mapping the memory tier, restore() and its copies between nodes)
// takes seconds per GiB of state, longer than a tight --watchdog: it is no hang. While it runs the
// progress watchdog hears from this thread, for at most 10 minutes; a start-up stuck longer is the
// watchdog's again (restore's own collectives time out well before that).
class StartupBeat {
 public:
  explicit StartupBeat(trainrt::Watchdog& w)
      : thread_([this, &w] {
          const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(10);
          std::unique_lock<std::mutex> lock(m_);
          while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return done_; }) &&
                 std::chrono::steady_clock::now() < until)
            w.heartbeat();
        }) {}
  StartupBeat(const StartupBeat&) = delete;
  StartupBeat& operator=(const StartupBeat&) = delete;
  ~StartupBeat() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace train_mlp
