#include "trainrt/runtime/observability.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "trainrt/error.hpp"
#include "trainrt/runtime/stragglers.hpp"

namespace trainrt {

double FlightRecorder::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

std::uint64_t FlightRecorder::begin(const std::string& op, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const std::uint64_t seq = next_++;
  ops_.push_back({seq, op, bytes, now(), -1});
  while (ops_.size() > capacity_) ops_.pop_front();
  return seq;
}

void FlightRecorder::end(std::uint64_t seq) {
  std::lock_guard lock(mutex_);
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it)
    if (it->seq == seq) {
      it->end = now();
      break;
    }
  last_completed_.store(seq);
}

void FlightRecorder::begin_unnumbered(const std::string& op) {
  std::lock_guard lock(mutex_);
  unnumbered_.emplace(op, now());
}

void FlightRecorder::end_unnumbered() {
  std::lock_guard lock(mutex_);
  unnumbered_.reset();
}

bool FlightRecorder::in_flight(std::uint64_t& seq, std::chrono::duration<double>& age) const {
  std::lock_guard lock(mutex_);
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it)
    if (it->end < 0) {
      seq = it->seq;
      age = std::chrono::duration<double>(now() - it->start);
      return true;
    }
  return false;
}

void FlightRecorder::dump(const std::string& path, unsigned rank, const std::string& reason,
                          const std::optional<CollectiveFailure>& failure) const {
  nlohmann::json ops = nlohmann::json::array();
  nlohmann::json flight = nullptr;
  nlohmann::json unnumbered = nullptr, unnumbered_start = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (unnumbered_) {
      unnumbered = unnumbered_->first;
      unnumbered_start = unnumbered_->second;
    }
    for (const auto& o : ops_) {
      ops.push_back({{"seq", o.seq}, {"op", o.op}, {"bytes", o.bytes}, {"start_s", o.start},
                     {"end_s", o.end < 0 ? nlohmann::json(nullptr) : nlohmann::json(o.end)}});
      if (o.end < 0) flight = o.seq;
    }
  }
  // Which node and process wrote it: a flight file copied out of a job's folder still says where
  // the rank ran (the doctor otherwise learns the host only from the metrics).
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  // "node": the name Slurm knows (SLURMD_NODENAME), which the doctor names culprits by and the job
  // script excludes: the node even when every metrics line is past the doctor's read budget.
  nlohmann::json doc = {{"rank", rank}, {"host", std::string(host)}, {"node", local_node_name()}, {"pid", static_cast<long>(::getpid())},
                        {"reason", reason}, {"failure", nullptr}, {"failure_ranks", nlohmann::json::array()},
                        {"waited_s", nullptr}, {"last_completed", last_completed_.load()},
                        {"in_flight", flight}, {"unnumbered", unnumbered},
                        {"unnumbered_start_s", unnumbered_start}, {"ops", ops}};
  if (failure) {
    doc["failure"] = to_string(failure->kind);
    doc["failure_ranks"] = failure->ranks;
    if (failure->waited_s >= 0) doc["waited_s"] = failure->waited_s;
  }
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
}

Watchdog::Watchdog(const FlightRecorder& recorder, unsigned rank, std::chrono::milliseconds timeout, std::string dump_path,
                   std::function<bool()> terminating, std::chrono::milliseconds grace)
    : recorder_(recorder),
      rank_(rank),
      timeout_(timeout),
      path_(std::move(dump_path)),
      terminating_(std::move(terminating)),
      grace_ms_(grace.count()) {
  heartbeat();
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::uint64_t seq = 0;
      std::chrono::duration<double> age{};
      const auto now = std::chrono::steady_clock::now();
      const auto since_beat = now.time_since_epoch() - std::chrono::steady_clock::duration(last_beat_.load());
      std::string reason;
      double waited = 0;
      FailureKind kind = FailureKind::Timeout;
      if (recorder_.in_flight(seq, age) && age > timeout_) {
        waited = age.count();
        reason = fmt::format("collective #{} in flight for {:.1f} s (timeout {} ms)", seq, waited, timeout_.count());
      } else if (since_beat > timeout_) {
        waited = std::chrono::duration<double>(since_beat).count();
        reason = fmt::format("no step progress for {:.1f} s (timeout {} ms)", waited, timeout_.count());
      } else if (reason = termination_overdue(now); !reason.empty()) {
        waited = std::chrono::duration<double>(now - *terminating_since_).count();  // from the request
        kind = FailureKind::Aborted;
      }
      if (reason.empty()) continue;
      // This rank cannot tell whom it waits for: a failure naming no rank.
      recorder_.dump(path_, rank_, "watchdog: " + reason, CollectiveFailure{kind, {}, waited});
      std::fprintf(stderr, "trainrt: rank %u watchdog fired: %s; flight recorder in %s\n", rank_, reason.c_str(), path_.c_str());
      std::fflush(nullptr);
      std::_Exit(3);
    }
  });
}

void Watchdog::guard_termination(bool on) {
  if (on) guarded_since_.store(std::chrono::steady_clock::now().time_since_epoch().count());
  guarded_.store(on);
}

std::string Watchdog::termination_overdue(std::chrono::steady_clock::time_point now) {
  if (!terminating_) return {};
  if (!terminating_since_) {
    bool asked = false;
    try {
      asked = terminating_();
    } catch (...) {
      terminating_ = nullptr;  // a test that throws cannot be trusted again; the other rules still hold
    }
    if (asked) terminating_since_ = now;
    return {};
  }
  if (!guarded_.load()) return {};
  const std::chrono::steady_clock::time_point began{std::chrono::steady_clock::duration(guarded_since_.load())};
  const auto from = std::max(*terminating_since_, began);
  const std::chrono::milliseconds grace(grace_ms_.load());
  if (now - from <= grace) return {};
  return fmt::format("the step was told to end (SIGTERM) and this rank's step has not ended {:.1f} s later (grace {} ms): "
                     "it waits for a peer that is gone",
                     std::chrono::duration<double>(now - from).count(), grace.count());
}

Watchdog::~Watchdog() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

MetricsWriter::MetricsWriter(const std::string& path) : out_(path, std::ios::app) {
  if (!out_) throw Error("cannot open for writing", path);
}

void MetricsWriter::write(const std::string& line) {
  out_ << line << "\n";
  out_.flush();
}

TraceWriter::TraceWriter(const std::string& path, unsigned rank) : out_(path), rank_(rank) {
  if (!out_) throw Error("cannot open for writing", path);
  out_ << "[\n";
}

TraceWriter::~TraceWriter() { out_ << "\n]\n"; }

double TraceWriter::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void TraceWriter::event(const std::string& name, const std::string& category, double start_s, double duration_s) {
  std::lock_guard lock(mutex_);
  out_ << (first_ ? "" : ",\n")
       << fmt::format(R"({{"name":"{}","cat":"{}","ph":"X","ts":{:.1f},"dur":{:.1f},"pid":{},"tid":0}})", name, category,
                      start_s * 1e6, duration_s * 1e6, rank_);
  first_ = false;
  out_.flush();
}

}  // namespace trainrt
