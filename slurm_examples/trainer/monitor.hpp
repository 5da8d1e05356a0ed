#pragma once
// train-mlp's view of its own health while it trains (docs/doctor.md): every --straggler-every
// steps the ranks share their compute times (one tiny allgather) and rank 0 logs and records the
// ranks slower than the median, with their nodes; local rank 0 of each node publishes the node's
// gauges as a Prometheus textfile (--prom-file, written atomically).
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "options.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/observability.hpp"

namespace train_mlp {

// --prom-file's %n becomes the node name (one file per node on a shared file system), %% a '%'.
std::string expand_prom_path(const std::string& pattern, const std::string& node);

class Monitor {
 public:
  Monitor(const Options& o, trainrt::Runtime& rt, trainrt::MetricsWriter& metrics, std::string metrics_path);

  const std::string& node() const { return node_; }
  // Every rank's node name, for the straggler lines. Collective: every rank calls it once, at start.
  void share_nodes();
  // One finished step's numbers (the gauges of the next .prom).
  void record_step(double step_s, double comm_s, double samples_per_s, double busbw_gbs, double stall_s, double persist_s);
  // After step `step`: every --straggler-every steps, the straggler check (collective: every rank
  // calls it after every step) and this node's .prom.
  // Whether after_step(step) runs the straggler check, a collective of every rank.
  bool checks_at(std::uint64_t step) const { return o_.straggler_every != 0 && step % o_.straggler_every == 0; }
  void after_step(std::uint64_t step, double compute_s);
  // At the end of the run: the last .prom, with the run's goodput so far.
  void finish(std::uint64_t step);

 private:
  void write_prometheus(std::uint64_t step, std::optional<double> goodput);

  const Options& o_;
  trainrt::Runtime& rt_;
  trainrt::MetricsWriter& metrics_;
  std::string metrics_path_, node_;
  std::vector<std::string> nodes_;  // every rank's node (share_nodes)
  std::deque<double> recent_step_s_;  // the last 1000 steps, for the p50/p99 gauges
  double samples_per_s_ = 0, comm_s_ = 0, busbw_gbs_ = 0, stall_s_ = 0, persist_s_ = -1;
  std::uint64_t stragglers_ = 0;
  bool prom_failed_ = false;  // said once: the .prom must never end or flood a training run
};

}  // namespace train_mlp
