#pragma once
// Prometheus text exposition format (version 0.0.4) for node_exporter's textfile collector: a
// training job writes <dir>/<name>.prom atomically (a temporary file in the same folder, fsync,
// rename), so the collector never reads half a file. Metric names: docs/doctor.md.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainrt {

struct PromSample {
  std::string name;  // [a-zA-Z_:][a-zA-Z0-9_:]*, checked (UsageError otherwise)
  std::string help;
  std::string type = "gauge";  // gauge or counter
  std::vector<std::pair<std::string, std::string>> labels;  // names checked, values made UTF-8 and escaped
  double value = 0;
};

// The exposition text: one HELP and TYPE per metric name, in first-seen order.
std::string prometheus_text(const std::vector<PromSample>& samples);
// Writes prometheus_text() to `path` atomically, through a temporary created exclusively under an
// unpredictable name in the same folder (trainrt/temp_file.hpp). Throws trainrt::Error naming the path.
void write_prometheus_textfile(const std::string& path, const std::vector<PromSample>& samples);

// What the trainer publishes; each optional one is left out when unset.
struct TrainingGauges {
  // Labels job, step, node, rank. `job` and the label `step` are Slurm's job and job step ids
  // (SLURM_JOB_ID, SLURM_STEP_ID): a rerun inside the allocation is a new job step, so its series
  // do not mix with the failed attempt's. The training step (`step` below) is the value of
  // trainrt_step, never a label: a label per training step would make a new series every write.
  std::string job, slurm_step, node;
  unsigned rank = 0;
  std::uint64_t step = 0;
  std::optional<double> samples_per_s, step_p50_s, step_p99_s, allreduce_s, allreduce_busbw_gbs, ckpt_stall_s,
      ckpt_persist_s, goodput;
  std::uint64_t restarts = 0;
  std::optional<std::uint64_t> stragglers;  // ranks flagged by the last straggler check
};
// The samples for TrainingGauges, named trainrt_* with labels job, step, node, rank (docs/doctor.md).
std::vector<PromSample> training_samples(const TrainingGauges& g);

// p (0..1) quantile of `values` by nearest rank; 0 for none. Copies (the caller's order kept).
double quantile(std::vector<double> values, double p);

}  // namespace trainrt
