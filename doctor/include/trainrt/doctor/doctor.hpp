#pragma once
// trainrt-doctor's library: reads what every rank of a run left in its output folder (the flight
// recorders flight_rank<R>.json and the metrics metrics_rank<R>.jsonl, see observability.hpp) and
// turns them into one verdict: the collective where the ranks diverged, the ranks and nodes that
// never arrived, those that waited and for how long, or, when nothing hung, the stragglers.
//
// The files are untrusted input (a rank killed mid-write, a disk that filled, a hand-edited file):
// every size, count and depth is bounded before use, nothing is allocated in proportion to a
// number read from a file, and whatever could not be read becomes a note naming the file.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/runtime/stragglers.hpp"

namespace trainrt::doctor {

// Bounds on what is read, chosen so that reading a folder at every cap stays within a stated
// memory and time (docs/doctor.md, "Damaged and hostile input", measured there). Every file counts
// against one budget of bytes read, so the time is bounded by the folder, not by its file count.
struct Limits {
  std::uintmax_t max_flight_bytes = 16u << 20;     // a larger flight file is not read (a real one: ~30 KB)
  std::uintmax_t max_metrics_bytes = 256u << 20;   // a larger metrics file is read from its end (the newest)
  std::uintmax_t max_total_bytes = 2ull << 30;     // bytes read from all files together
  std::size_t max_line_bytes = 64 << 10;           // a longer metrics line is skipped with a note
  std::size_t max_ops = 4096;                      // flight ops kept per rank (the newest) ...
  std::size_t max_total_ops = 1u << 20;            // ... and over all ranks (each keeps at least 16)
  std::size_t max_steps = 4096;                    // step times kept per rank (the newest) ...
  std::size_t max_total_steps = 1u << 22;          // ... and over all ranks (each keeps at least 16)
  unsigned max_rank = 1u << 16;                    // rank numbers at or above this are refused
  std::size_t max_dir_entries = 1u << 20;          // directory entries looked at
  std::size_t max_notes = 200;                     // notes kept (then one "and N more")
  unsigned max_depth = 32;                         // JSON nesting accepted
};

struct Options {
  double straggler_threshold = 0.2;  // a rank this much (fraction) slower than the median
  double straggler_min_excess_s = 0.0005;  // and at least this many seconds slower
  Limits limits;
};

// One collective as a rank recorded it.
struct OpRecord {
  std::uint64_t seq = 0;
  std::string op;
  std::uint64_t bytes = 0;
  double start_s = 0;
  std::optional<double> end_s;  // empty while in flight
};

// What one rank left behind, as far as it could be read.
struct RankData {
  unsigned rank = 0;
  std::string node;  // empty when no file names it
  // Its rank within its node (the start event's "local_rank"): dumps older than the failure
  // fields name the peers of a node's shared-memory group by it ("shm: rank 1: ... waiting for
  // rank(s) 0"), so reading them across nodes needs it to map those names to global ranks.
  std::optional<unsigned> local_rank;
  // metrics (the last attempt only: everything after the last "start" event)
  bool have_metrics = false;
  std::optional<std::uint64_t> world;  // the world size this rank's last start event names
  std::optional<double> start_wall;
  std::optional<std::uint64_t> start_pid;  // the process that wrote the last start event, where it says
  std::uint64_t attempts = 0;          // start events seen
  std::optional<std::uint64_t> last_step;
  std::optional<double> last_wall;     // wall clock of the last step line
  bool ended = false;                  // an "end" event after the last start
  std::vector<double> compute_s;       // per step: step_s - allreduce_s (the newest max_steps)
  // flight recorder
  bool have_flight = false;
  bool flight_stale = false;  // older than this rank's last start: from an earlier attempt
  std::optional<std::uint64_t> flight_pid;  // the process that dumped it, where it says
  std::string reason;  // for people: shown, never parsed (but in dumps without `failure`)
  // What ended its collective (the dump's "failure", "failure_ranks", "waited_s"; ranks are global
  // ranks below max_rank). Empty when the dump names none. A dump written before these fields
  // existed has them derived from `reason` once, when it is read (legacy_reason.cpp).
  std::optional<CollectiveFailure> failure;
  std::uint64_t last_completed = 0;
  std::optional<std::uint64_t> in_flight;
  // The collective the recorder does not number that the rank was in when it dumped (a trainer's
  // stop agreement), after #last_completed; none when it was in no such collective.
  std::optional<std::string> unnumbered;
  std::vector<OpRecord> ops;
  std::optional<double> flight_mtime;  // seconds since the epoch
};

struct RunData {
  std::vector<RankData> ranks;  // sorted by rank; only ranks with at least one file
  // Files that exist but could not be read (a permission error, an I/O error, the read budget
  // spent): the run cannot be judged, since a rank whose file was not read would look absent.
  std::vector<std::string> errors;
  std::vector<std::string> notes;  // one line per thing that could not be read or does not agree
  std::vector<std::string> info;   // files set aside as expected (an earlier attempt's): no problem
  std::size_t notes_dropped = 0;
  std::optional<std::uint64_t> world;  // the world size most files agree on
};

// Reads OUTDIR: the folder opened once, each rank file opened relative to it without following a
// link or blocking (a regular file checked on the descriptor read), JSON parsed as it streams in.
// Throws trainrt::Error only when the folder itself cannot be opened or listed; a file that cannot
// be read is an error in RunData::errors, a problem with what a file holds is a note.
RunData read_run(const std::filesystem::path& out_dir, const Limits& limits = {});

enum class Kind { Healthy, Hang, Mismatch, Failure, Stragglers, BadInput };
const char* to_string(Kind k);

struct RankNode {
  unsigned rank = 0;
  std::string node;
  std::string evidence;  // why this rank is listed
  double seconds = -1;   // waited (for waiters), -1 when unknown
};

struct Verdict {
  Kind kind = Kind::Healthy;
  std::string summary;  // one line
  std::optional<OpRecord> collective;  // where the ranks diverged
  std::vector<RankNode> never_arrived, waited;
  std::vector<std::string> mismatches;  // "rank 1: broadcast 8 B" for a mismatched collective
  std::vector<Straggler> stragglers;
  double median_compute_s = 0;
  std::vector<std::string> culprit_nodes;  // nodes to exclude on a rerun (sorted, unique, non-empty)
  std::vector<std::string> notes;
  std::optional<std::uint64_t> world;
  std::size_t ranks_read = 0;
};

Verdict diagnose(const RunData& run, const Options& options = {});
inline Verdict diagnose(const std::filesystem::path& out_dir, const Options& options = {}) {
  return diagnose(read_run(out_dir, options.limits), options);
}
int exit_code(const Verdict& v);  // 0 healthy, 1 a verdict, 2 bad input (also: any file unreadable)

// Output: text (control bytes escaped, one line per item) and JSON (valid UTF-8: invalid bytes
// replaced).
std::string format_text(const Verdict& v);
std::string format_json(const Verdict& v);
// Escapes control bytes and backslashes as \xNN so a hostile file name or reason cannot move the
// terminal's cursor or forge a line.
std::string escape_text(const std::string& s);

}  // namespace trainrt::doctor
