#pragma once
// What read_run.cpp (the folder, the plan, the verdict's input) and read_rank_files.cpp (one file
// at a time) share.
#include <cstdint>
#include <string>

#include "run_files.hpp"
#include "trainrt/doctor/doctor.hpp"

namespace trainrt::doctor {

// Where problems go, and the per-rank keeps that the totals leave each rank.
struct Reading {
  RunData& run;
  const Limits& lim;
  std::size_t ops_cap = 0;    // flight ops kept per rank
  std::size_t steps_cap = 0;  // step times kept per rank

  void note(std::string s) {
    if (run.notes.size() < lim.max_notes) run.notes.push_back(std::move(s));
    else ++run.notes_dropped;
  }
  void info(std::string s) {
    if (run.info.size() < lim.max_notes) run.info.push_back(std::move(s));
  }
  void error(std::string s) {
    if (run.errors.size() < lim.max_notes) run.errors.push_back(std::move(s));
    else ++run.notes_dropped;
  }
};

// Reads the newest `allowance` bytes of metrics file `name` (whole lines only) into `rd`.
void read_metrics(const RunDir& dir, const std::string& name, std::uint64_t allowance, RankData& rd, Reading& r);
// Reads flight file `name` into `rd` when it is at most lim.max_flight_bytes; `fits` false means
// the run's byte budget had no room left for it (an error: it exists and was not read).
void read_flight(const RunDir& dir, const std::string& name, bool fits, RankData& rd, Reading& r);

}  // namespace trainrt::doctor
