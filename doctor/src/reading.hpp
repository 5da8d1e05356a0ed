#pragma once
// What read_run.cpp (the folder, the plan, the verdict's input) and read_rank_files.cpp (one file
// at a time) share.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
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
  std::set<unsigned> node_local{};  // ranks whose legacy failure numbers its ranks within their node

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

// legacy_reason.cpp: a flight file without failure fields, its reason read into them; `node_local`
// when the ranks are numbered within the reporter's node, for map_node_local() to map to global
// ranks once every rank's node and local rank are known.
struct LegacyFailure {
  std::optional<CollectiveFailure> failure;
  bool node_local = false;
};
LegacyFailure legacy_failure(const std::string& reason, unsigned max_rank);
void map_node_local(std::map<unsigned, RankData>& ranks, const std::set<unsigned>& node_local);

}  // namespace trainrt::doctor
