#include "trainrt/runtime/prometheus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainrt/error.hpp"
#include "trainrt/printable.hpp"
#include "trainrt/temp_file.hpp"

namespace trainrt {

namespace {

bool valid_name(const std::string& s, bool colon_ok) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':');
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label values: UTF-8 (the format says so; a byte that is not becomes U+FFFD), with backslash,
// double quote and newline escaped (the format's only escapes).
std::string escape_value(const std::string& s) {
  std::string out;
  for (char c : valid_utf8(s)) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// HELP text: UTF-8 too, backslash and newline escaped.
std::string escape_help(const std::string& s) {
  std::string out;
  for (char c : valid_utf8(s)) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);  // shortest round-trip form
}

}  // namespace

std::string prometheus_text(const std::vector<PromSample>& samples) {
  // Grouped by name: the format wants every sample of one metric together under its HELP/TYPE.
  std::vector<std::string> order;
  for (const auto& s : samples) {
    if (!valid_name(s.name, true)) throw UsageError("not a Prometheus metric name", s.name);
    if (s.type != "gauge" && s.type != "counter") throw UsageError("metric type must be gauge or counter", s.name);
    for (const auto& [k, v] : s.labels)
      if (!valid_name(k, false) || k.rfind("__", 0) == 0) throw UsageError("not a Prometheus label name", k);
    if (std::find(order.begin(), order.end(), s.name) == order.end()) order.push_back(s.name);
  }
  std::string out;
  for (const auto& name : order) {
    bool header = false;
    for (const auto& s : samples) {
      if (s.name != name) continue;
      if (!header) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(s.help), name, s.type);
        header = true;
      }
      out += name;
      if (!s.labels.empty()) {
        out += '{';
        for (std::size_t i = 0; i < s.labels.size(); ++i)
          out += fmt::format("{}{}=\"{}\"", i ? "," : "", s.labels[i].first, escape_value(s.labels[i].second));
        out += '}';
      }
      out += ' ' + number(s.value) + '\n';
    }
  }
  return out;
}

void write_prometheus_textfile(const std::string& path, const std::vector<PromSample>& samples) {
  // The temporary name (<name>.tmp.<random>) does not end in .prom, so the collector skips it while
  // it is written; it is created exclusively, so a FIFO or link another member of the folder's
  // group planted is never opened (trainrt/temp_file.hpp).
  replace_file(path, prometheus_text(samples), 0644, "Prometheus textfile");
}

double quantile(std::vector<double> values, double p) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double x) { return !std::isfinite(x); }), values.end());
  if (values.empty()) return 0;
  p = std::clamp(std::isfinite(p) ? p : 0.5, 0.0, 1.0);
  // Nearest rank: the smallest value with at least p of the values at or below it.
  std::size_t k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(values.size())));
  k = std::clamp<std::size_t>(k, 1, values.size()) - 1;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(k), values.end());
  return values[k];
}

std::vector<PromSample> training_samples(const TrainingGauges& g) {
  const std::vector<std::pair<std::string, std::string>> labels = {
      {"job", g.job}, {"step", g.slurm_step}, {"node", g.node}, {"rank", std::to_string(g.rank)}};
  std::vector<PromSample> out;
  auto add = [&](const char* name, const char* help, double v, const char* type = "gauge") {
    out.push_back({name, help, type, labels, v});
  };
  add("trainrt_step", "Last completed training step.", static_cast<double>(g.step));
  if (g.samples_per_s) add("trainrt_samples_per_second", "Global samples per second of the last step.", *g.samples_per_s);
  if (g.step_p50_s) add("trainrt_step_seconds_p50", "Median step time over the recent window, seconds.", *g.step_p50_s);
  if (g.step_p99_s) add("trainrt_step_seconds_p99", "99th percentile step time over the recent window, seconds.", *g.step_p99_s);
  if (g.allreduce_s) add("trainrt_allreduce_seconds", "Gradient allreduce time of the last step, seconds.", *g.allreduce_s);
  if (g.allreduce_busbw_gbs)
    add("trainrt_allreduce_busbw_gbytes_per_second", "Gradient allreduce bus bandwidth of the last step, GB/s.",
        *g.allreduce_busbw_gbs);
  if (g.ckpt_stall_s) add("trainrt_checkpoint_stall_seconds", "Training stall of the last checkpoint save, seconds.", *g.ckpt_stall_s);
  if (g.ckpt_persist_s)
    add("trainrt_checkpoint_persist_seconds", "Background persist time of the last finished checkpoint, seconds.",
        *g.ckpt_persist_s);
  if (g.goodput) add("trainrt_goodput_ratio", "Productive training time over wall time so far (0..1).", *g.goodput);
  add("trainrt_restarts_total", "Restarts of this job (Slurm requeues and reruns).", static_cast<double>(g.restarts),
      "counter");
  if (g.stragglers)
    add("trainrt_stragglers", "Ranks flagged as stragglers by the last straggler check.", static_cast<double>(*g.stragglers));
  return out;
}

}  // namespace trainrt
