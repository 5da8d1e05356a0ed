// trainrt-doctor OUTDIR [--json] [--threshold F] [--culprit-nodes]: one verdict from a run's
// flight recorders and metrics (docs/doctor.md). Exit 0 healthy, 1 a verdict, 2 bad input.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "trainrt/doctor/doctor.hpp"

int main(int argc, char** argv) {
  CLI::App app{"trainrt-doctor: who hung, who never arrived, who straggles, from a run's out/ folder"};
  std::string dir;
  bool json = false, culprits = false;
  trainrt::doctor::Options options;
  app.add_option("OUTDIR", dir, "the trainer's --out folder (flight_rank*.json, metrics_rank*.jsonl)")->required();
  app.add_flag("--json", json, "print the verdict as JSON");
  app.add_option("--threshold", options.straggler_threshold,
                 "straggler: compute time above the median by more than this fraction (default 0.2)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_flag("--culprit-nodes", culprits,
               "print only the nodes to exclude on a rerun, comma-separated (empty line: none); same exit code");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
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
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? trainrt::doctor::exit_code(v) : 2;
}
