#include "goodput.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "trainrt/error.hpp"

namespace trainrt {
namespace {

struct Step {
  std::uint64_t step;
  double end_wall, secs, stall;
};

struct Run {
  double start = 0, last = 0;
  std::uint64_t restored = 0;
  std::vector<Step> steps;
};

}  // namespace

GoodputSummary summarize_goodput(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read metrics", path);
  std::vector<Run> runs;
  GoodputSummary s;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      continue;  // a line cut short by a kill
    }
    const std::string ev = j.value("event", "");
    if (ev == "start") {
      runs.push_back({});
      runs.back().start = runs.back().last = j.at("wall").get<double>();
      runs.back().restored = j.value("restored_step", 0ull);
    } else if (!runs.empty() && ev == "step") {
      runs.back().steps.push_back({j.at("step").get<std::uint64_t>(), j.at("wall").get<double>(), j.at("step_s").get<double>(),
                                   j.value("ckpt_stall_s", 0.0)});
      runs.back().last = j.at("wall").get<double>();
    } else if (!runs.empty() && ev == "end") {
      runs.back().last = j.at("wall").get<double>();
    } else if (ev == "recovery") {
      const auto& p = j.at("phases");
      ++s.recoveries;
      s.recovery_s += j.value("total_s", 0.0);
      s.detection_s += p.value("detection_s", 0.0);
      s.verdict_s += p.value("verdict_s", 0.0);
      s.launch_s += p.value("launch_s", 0.0);
      s.bootstrap_s += p.value("bootstrap_s", 0.0);
      s.restore_s += p.value("restore_s", 0.0);
      s.first_step_s += p.value("first_step_s", 0.0);
      const std::string source = j.value("restore_source", "");
      s.from_memory += source == "memory";
      s.from_disk += source == "disk";
    }
  }
  if (runs.empty()) throw Error("no run recorded", path);
  s.runs = static_cast<unsigned>(runs.size());
  s.wall_s = runs.back().last - runs.front().start;
  std::vector<std::pair<double, double>> productive_at;  // (wall, step seconds) of counted steps
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const Run& run = runs[r];
    // A step counts when no later run restored from before it.
    std::uint64_t keep_up_to = ~0ull;
    for (std::size_t later = r + 1; later < runs.size(); ++later) keep_up_to = std::min<std::uint64_t>(keep_up_to, runs[later].restored);
    if (!run.steps.empty()) s.startup_s += run.steps.front().end_wall - run.steps.front().secs - run.start;
    if (r + 1 < runs.size()) s.restart_gap_s += runs[r + 1].start - run.last;
    for (const auto& st : run.steps) {
      s.ckpt_stall_s += st.stall;
      if (st.step <= keep_up_to) {
        s.productive_s += st.secs;
        productive_at.push_back({st.end_wall, st.secs});
        s.plot_data += fmt::format("{} {:.6f} {:.6f} {:.4f}\n", st.step, st.secs, st.end_wall - runs.front().start, 0.0);
      } else {
        s.lost_s += st.secs;
        ++s.steps_lost;
      }
    }
  }
  // Cumulative goodput column for the plot.
  std::string data;
  double acc = 0;
  std::size_t i = 0;
  for (const auto& [wall, secs] : productive_at) {
    acc += secs;
    const double elapsed = wall - runs.front().start;
    std::size_t eol = s.plot_data.find('\n', i);
    std::string row = s.plot_data.substr(i, eol - i);
    row = row.substr(0, row.rfind(' ')) + fmt::format(" {:.4f}", elapsed > 0 ? acc / elapsed : 0.0);
    data += row + "\n";
    i = eol + 1;
  }
  s.plot_data = data;
  s.other_s = s.wall_s - s.productive_s - s.startup_s - s.ckpt_stall_s - s.lost_s - s.restart_gap_s;
  const double g = s.wall_s > 0 ? s.productive_s / s.wall_s : 0;
  s.text = fmt::format(
      "goodput {:.1f}% over {:.2f} s wall, {} run(s)\n"
      "  productive steps   {:8.3f} s\n"
      "  badput: start-up   {:8.3f} s (init, restore)\n"
      "          ckpt stall {:8.3f} s\n"
      "          lost work  {:8.3f} s ({} steps recomputed after failures)\n"
      "          restarts   {:8.3f} s (between runs)\n"
      "          other      {:8.3f} s (metrics, logging, exit)\n",
      100 * g, s.wall_s, s.runs, s.productive_s, s.startup_s, s.ckpt_stall_s, s.lost_s, s.steps_lost, s.restart_gap_s,
      s.other_s);
  // The recovery lines split the same time by phase (fault to first step after it), as the
  // batch script and the trainer measured it; they overlap the badput lines above, not add to them.
  if (s.recoveries > 0)
    s.text += fmt::format(
        "  recoveries {}: {:.3f} s from fault to first step ({} from memory, {} from disk)\n"
        "          detection {:.3f} s, verdict {:.3f} s, launch {:.3f} s, bootstrap {:.3f} s, restore {:.3f} s, "
        "first step {:.3f} s\n",
        s.recoveries, s.recovery_s, s.from_memory, s.from_disk, s.detection_s, s.verdict_s, s.launch_s, s.bootstrap_s,
        s.restore_s, s.first_step_s);
  s.json = nlohmann::json{{"goodput", g}, {"wall_s", s.wall_s}, {"productive_s", s.productive_s},
                          {"badput", {{"startup_s", s.startup_s}, {"ckpt_stall_s", s.ckpt_stall_s}, {"lost_work_s", s.lost_s},
                                      {"restarts_s", s.restart_gap_s}, {"other_s", s.other_s}}},
                          {"runs", s.runs}, {"steps_lost", s.steps_lost},
                          {"recovery", {{"count", s.recoveries}, {"total_s", s.recovery_s}, {"detection_s", s.detection_s},
                                        {"verdict_s", s.verdict_s}, {"launch_s", s.launch_s}, {"bootstrap_s", s.bootstrap_s},
                                        {"restore_s", s.restore_s}, {"first_step_s", s.first_step_s},
                                        {"from_memory", s.from_memory}, {"from_disk", s.from_disk}}}}
               .dump(2);
  return s;
}

void write_goodput_files(const GoodputSummary& s, const std::string& dir) {
  std::ofstream(dir + "/goodput.json") << s.json << "\n";
  std::ofstream(dir + "/goodput.dat") << "# step step_time_s elapsed_s cumulative_goodput\n" << s.plot_data;
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fmt::print("plot: gnuplot not installed (apt-get install gnuplot-nox); data in {}/goodput.dat\n", dir);
    return;
  }
  std::ofstream(dir + "/goodput.gp") << fmt::format(
      "set terminal pngcairo size 1000,600\nset output '{0}/goodput.png'\nset multiplot layout 2,1\n"
      "set title 'step time'\nset xlabel 'step'\nset ylabel 's'\nplot '{0}/goodput.dat' using 1:2 with lines title 'step time'\n"
      "set title 'cumulative goodput'\nset xlabel 'wall time (s)'\nset ylabel 'goodput'\nset yrange [0:1]\n"
      "plot '{0}/goodput.dat' using 3:4 with lines title 'goodput'\nunset multiplot\n",
      dir);
  if (std::system(fmt::format("gnuplot '{}/goodput.gp' 2>/dev/null", dir).c_str()) == 0)
    fmt::print("plot: {}/goodput.png\n", dir);
  else
    fmt::print("plot: gnuplot failed; data in {}/goodput.dat\n", dir);
}

}  // namespace trainrt
