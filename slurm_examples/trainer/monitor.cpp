#include "monitor.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

#include "goodput.hpp"
#include "trainrt/runtime/prometheus.hpp"
#include "trainrt/runtime/stragglers.hpp"
#include "trainrt/error.hpp"

namespace train_mlp {

namespace {

// A straggler must also be this much slower in absolute terms: microsecond jitter on a tiny step
// is no straggler (the doctor uses the same floor).
constexpr double kMinExcessSeconds = 0.0005;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

std::string expand_prom_path(const std::string& pattern, const std::string& node) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'n' || pattern[i + 1] == '%')) {
      out += pattern[i + 1] == 'n' ? node : "%";
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Monitor::Monitor(const Options& o, trainrt::Runtime& rt, trainrt::MetricsWriter& metrics, std::string metrics_path)
    : o_(o), rt_(rt), metrics_(metrics), metrics_path_(std::move(metrics_path)), node_(trainrt::local_node_name()) {
  // A node name goes into a file name: nothing that could leave the folder or hide the file.
  for (char& c : node_)
    if (c == '/' || c == '\0' || static_cast<unsigned char>(c) < 0x20) c = '_';
}

void Monitor::share_nodes() { nodes_ = trainrt::share_node_names(*rt_.host, node_); }

void Monitor::record_step(double step_s, double comm_s, double samples_per_s, double busbw_gbs, double stall_s,
                          double persist_s) {
  recent_step_s_.push_back(step_s);
  if (recent_step_s_.size() > 1000) recent_step_s_.pop_front();
  samples_per_s_ = samples_per_s;
  comm_s_ = comm_s;
  busbw_gbs_ = busbw_gbs;
  stall_s_ = stall_s;
  if (persist_s >= 0) persist_s_ = persist_s;
}

void Monitor::after_step(std::uint64_t step, double compute_s) {
  if (!checks_at(step)) return;
  // Compute time, not step time: the fast ranks wait for the slow one inside the allreduce, so
  // whole steps take equally long everywhere (stragglers.hpp).
  const auto times = trainrt::share_step_times(*rt_.host, compute_s);
  if (rt_.rank == 0) {
    const auto found = trainrt::detect_stragglers(times, nodes_, o_.straggler_threshold, kMinExcessSeconds);
    const double median = trainrt::median_of(times);
    stragglers_ = found.size();
    metrics_.write(trainrt::stragglers_metrics_line(step, median, o_.straggler_threshold, found));
    if (!found.empty())
      fmt::print("train-mlp: {}\n", trainrt::stragglers_log_line(step, median, o_.straggler_threshold, found));
  }
  write_prometheus(step, std::nullopt);
}

void Monitor::finish(std::uint64_t step) {
  if (o_.prom_file.empty() || rt_.local_rank != 0) return;
  std::optional<double> goodput;
  try {
    const auto g = trainrt::summarize_goodput(metrics_path_);
    if (g.wall_s > 0) goodput = g.productive_s / g.wall_s;
  } catch (const std::exception&) {
    // Without a readable metrics file the gauge is left out; the summary says why elsewhere.
  }
  write_prometheus(step, goodput);
}

void Monitor::write_prometheus(std::uint64_t step, std::optional<double> goodput) {
  if (o_.prom_file.empty() || rt_.local_rank != 0 || recent_step_s_.empty()) return;
  trainrt::TrainingGauges g;
  g.job = env_or("SLURM_JOB_ID", rt_.session->job_id());
  g.slurm_step = env_or("SLURM_STEP_ID", "");
  g.node = node_;
  g.rank = rt_.rank;
  g.step = step;
  g.samples_per_s = samples_per_s_;
  const std::vector<double> recent(recent_step_s_.begin(), recent_step_s_.end());
  g.step_p50_s = trainrt::quantile(recent, 0.5);
  g.step_p99_s = trainrt::quantile(recent, 0.99);
  g.allreduce_s = comm_s_;
  if (rt_.size > 1) g.allreduce_busbw_gbs = busbw_gbs_;
  g.ckpt_stall_s = stall_s_;
  if (persist_s_ >= 0) g.ckpt_persist_s = persist_s_;
  g.goodput = goodput;
  g.restarts = rt_.restart_count;
  if (rt_.rank == 0 && o_.straggler_every) g.stragglers = stragglers_;
  try {
    trainrt::write_prometheus_textfile(expand_prom_path(o_.prom_file, node_), trainrt::training_samples(g));
  } catch (const trainrt::Error& e) {
    if (!prom_failed_) std::fprintf(stderr, "train-mlp: rank %u: --prom-file: %s (training goes on)\n", rt_.rank, e.what());
    prom_failed_ = true;
  }
}

}  // namespace train_mlp
