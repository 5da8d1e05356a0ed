#pragma once
// What a training job leaves behind to explain itself: a flight recorder of the last collectives
// (dumped when something hangs), a watchdog that ends a hung rank instead of letting the step hang,
// per-rank JSON-lines metrics and a Chrome/Perfetto trace.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "trainrt/error.hpp"

namespace trainrt {

class FlightRecorder {
 public:
  explicit FlightRecorder(std::size_t capacity = 256) : capacity_(capacity) {}
  std::uint64_t begin(const std::string& op, std::size_t bytes);  // returns the op's sequence number
  void end(std::uint64_t seq);
  std::uint64_t last_completed() const { return last_completed_.load(); }
  // A collective the recorder does not number (a trainer's stop agreement: numbering it would
  // shift every step's collective number). While one runs, a dump says so ("unnumbered"), and the
  // doctor counts the rank as having arrived after #last_completed, where a dump without it (a
  // watchdog firing in compute) counts as lagging. One at a time; end_unnumbered() clears it.
  void begin_unnumbered(const std::string& op);
  void end_unnumbered();
  // The op in flight, if any: its sequence number and how long it has been running.
  bool in_flight(std::uint64_t& seq, std::chrono::duration<double>& age) const;
  // JSON: {rank, host, pid, reason, failure, failure_ranks, waited_s, last_completed, in_flight,
  // unnumbered (the op's name, or null), unnumbered_start_s, ops: [{seq, op, bytes, start_s, end_s}]}. `failure` is what ended the collective (an Error's
  // failure(), the watchdog's timeout) as fields that trainrt-doctor decides on; `reason` is the
  // message for people, never parsed. Without one, "failure" is null.
  void dump(const std::string& path, unsigned rank, const std::string& reason,
            const std::optional<CollectiveFailure>& failure = std::nullopt) const;

 private:
  struct Op {
    std::uint64_t seq;
    std::string op;
    std::size_t bytes;
    double start, end;  // seconds since the recorder started; end < 0 while running
  };
  double now() const;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<Op> ops_;
  std::optional<std::pair<std::string, double>> unnumbered_;  // (op, start) while one runs
  std::uint64_t next_ = 1;
  std::atomic<std::uint64_t> last_completed_{0};
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
};

// Fires when an op stays in flight longer than `timeout`, or when no heartbeat arrives for
// `timeout`: dumps the recorder to `dump_path` and ends the process with exit code 3, so Slurm
// (srun --kill-on-bad-exit) ends the step instead of letting it hang.
//
// `terminating` (polled by the watchdog's thread; the trainer passes "SIGTERM arrived") shortens
// the wait inside guarded work (guard_termination: a step's compute and collectives, where a peer
// that is gone blocks; not a restore, a checkpoint or the final save, which Slurm's KillWait alone
// bounds): guarded work that has not ended `grace` after the request (or after it began, if later)
// ends the rank the same way (failure "aborted", naming no rank). Slurm sends SIGTERM when it ends
// a step (a task failed, scancel) and SIGKILL KillWait later (30 s by default): such a rank is stuck
// on a peer that is gone (a send that no closed connection wakes), and it leaves its flight record
// now instead of being killed without one KillWait later.
class Watchdog {
 public:
  Watchdog(const FlightRecorder& recorder, unsigned rank, std::chrono::milliseconds timeout, std::string dump_path,
           std::function<bool()> terminating = {}, std::chrono::milliseconds grace = std::chrono::seconds(2));
  ~Watchdog();
  void heartbeat() { last_beat_.store(std::chrono::steady_clock::now().time_since_epoch().count()); }
  // Marks the start (true) or the end (false) of guarded work.
  void guard_termination(bool on);
  // The grace may follow the work: a trainer whose steps take longer raises it.
  void set_termination_grace(std::chrono::milliseconds grace) { grace_ms_.store(grace.count()); }

 private:
  std::string termination_overdue(std::chrono::steady_clock::time_point now);
  const FlightRecorder& recorder_;
  unsigned rank_;
  std::chrono::milliseconds timeout_;
  std::string path_;
  std::function<bool()> terminating_;
  std::atomic<std::int64_t> grace_ms_;
  std::optional<std::chrono::steady_clock::time_point> terminating_since_;  // the watchdog thread's own
  std::atomic<bool> stop_{false}, guarded_{false};
  std::atomic<std::int64_t> guarded_since_{0};  // steady_clock ticks
  std::atomic<std::int64_t> last_beat_;
  std::thread thread_;
};

// One JSON object per line, flushed per line so a killed rank keeps what it wrote.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const std::string& json_line);

 private:
  std::ofstream out_;
};

// Chrome trace event format ("X" complete events); loadable in chrome://tracing and Perfetto.
class TraceWriter {
 public:
  TraceWriter(const std::string& path, unsigned rank);
  ~TraceWriter();
  void event(const std::string& name, const std::string& category, double start_s, double duration_s);
  double now() const;

 private:
  std::ofstream out_;
  unsigned rank_;
  bool first_ = true;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
};

}  // namespace trainrt
