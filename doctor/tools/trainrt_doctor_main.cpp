// trainrt-doctor OUTDIR [--json] [--threshold F] [--culprit-nodes]: one verdict from a run's
// flight recorders and metrics. trainrt-doctor --can-shrink CKPT_DIR: whether a rerun on fewer
// nodes can restore the checkpoint. docs/doctor.md. Exit 0 healthy / can shrink, 1 a verdict /
// cannot shrink, 2 bad input.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "trainrt/doctor/doctor.hpp"
#include "trainrt/doctor/shrink.hpp"

namespace {

int print(const std::string& out, int rc) {
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? rc : 2;
}

int can_shrink(const std::string& ckpt_dir) {
  try {
    const auto c = trainrt::doctor::check_shrink(ckpt_dir);
    return print(trainrt::doctor::escape_text(c.message) + "\n", c.can_shrink ? 0 : 1);
  } catch (const std::exception& e) {
    return print("cannot tell: " + trainrt::doctor::escape_text(e.what()) + "\n", 2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainrt-doctor: who hung, who never arrived, who straggles, from a run's out/ folder"};
  std::string dir, shrink_dir;
  bool json = false, culprits = false;
  trainrt::doctor::Options options;
  app.add_option("OUTDIR", dir, "the trainer's --out folder (flight_rank*.json, metrics_rank*.jsonl)");
  app.add_flag("--json", json, "print the verdict as JSON");
  app.add_option("--threshold", options.straggler_threshold,
                 "straggler: compute time above the median by more than this fraction (default 0.2)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_flag("--culprit-nodes", culprits,
               "print only the nodes to exclude on a rerun, comma-separated (empty line: none); same exit code");
  app.add_option("--can-shrink", shrink_dir,
                 "instead: exit 0 when a smaller world can restore this checkpoint directory, 1 when it holds "
                 "sharded state, 2 when it cannot be read");
  try {
    app.parse(argc, argv);
    if (dir.empty() && shrink_dir.empty()) throw CLI::RequiredError("OUTDIR");
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!shrink_dir.empty()) return can_shrink(shrink_dir);
  trainrt::doctor::Verdict v;
  try {
    v = trainrt::doctor::diagnose(std::filesystem::path(dir), options);
  } catch (const std::exception& e) {
    v.kind = trainrt::doctor::Kind::BadInput;
    v.summary = e.what();
  }
  std::string out;
  if (culprits) {
    for (const auto& n : v.culprit_nodes) out += (out.empty() ? "" : ",") + trainrt::doctor::escape_text(n);
    out += "\n";
  } else {
    out = json ? trainrt::doctor::format_json(v) : trainrt::doctor::format_text(v);
  }
  return print(out, trainrt::doctor::exit_code(v));
}
