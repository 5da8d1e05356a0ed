#pragma once
// Goodput from a rank's metrics file, across every run that appended to it (restarts included):
// goodput = time of the steps that count toward the final model / wall time from the first start.
#include <string>

namespace trainrt {

struct GoodputSummary {
  double wall_s = 0, productive_s = 0, startup_s = 0, ckpt_stall_s = 0, lost_s = 0, restart_gap_s = 0, other_s = 0;
  unsigned runs = 0, steps_lost = 0;
  // Recoveries (docs/recovery.md): how many, their phases summed, and from which tier they restored.
  unsigned recoveries = 0;
  double recovery_s = 0;
  double detection_s = 0, verdict_s = 0, launch_s = 0, bootstrap_s = 0, restore_s = 0, first_step_s = 0;
  unsigned from_memory = 0, from_disk = 0;
  std::string text;  // the human summary
  std::string json;
  std::string plot_data;  // "step step_time_s cumulative_goodput" lines, for gnuplot
};

GoodputSummary summarize_goodput(const std::string& metrics_path);
// Writes goodput.json, goodput.dat and, when gnuplot is installed, goodput.png into `dir`.
void write_goodput_files(const GoodputSummary& s, const std::string& dir);

}  // namespace trainrt
