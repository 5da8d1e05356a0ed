#pragma once
// Straggler detection, shared by the trainer (every N steps, over a tiny allgather) and by
// trainrt-doctor (after the fact, from the metrics).
//
// Measure compute time, not step time: in synchronous data parallelism every rank waits in the
// gradient allreduce for the slowest one, so whole step times come out nearly equal on every rank
// and the straggler is the rank that spends the least time waiting. The time before the
// collective (step_s - allreduce_s) is what differs.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace trainrt {

class Communicator;

struct Straggler {
  unsigned rank = 0;
  std::string node;
  double seconds = 0;  // this rank's time
  double excess = 0;   // (seconds - median) / median
};

// Ranks whose time exceeds the median of all ranks by more than `threshold` (a fraction: 0.2 is
// 20 %) and by at least `min_excess_s` seconds (so microsecond jitter on a fast step is no
// straggler). nodes[r] names rank r's node ("" or a short span: unknown). Non-finite or negative
// times are ignored. Sorted slowest first. Pure: no I/O.
std::vector<Straggler> detect_stragglers(std::span<const double> seconds, std::span<const std::string> nodes,
                                         double threshold, double min_excess_s = 0);
double median_of(std::span<const double> values);  // of the finite, non-negative values; 0 if none

// Every rank's `my_seconds`, index = rank (one F64 allgather). Collective: every rank calls it.
// Throws what the communicator throws (PeerError, ...).
std::vector<double> share_step_times(Communicator& comm, double my_seconds);
// Every rank's node name (once, at start: one allgather of kNodeNameBytes per rank; longer names
// are cut to 63 bytes on a UTF-8 character boundary). Collective.
constexpr std::size_t kNodeNameBytes = 64;
std::vector<std::string> share_node_names(Communicator& comm, const std::string& my_node);
// This host's node name: SLURMD_NODENAME if set, else gethostname().
std::string local_node_name();

// The metrics line rank 0 writes: {"event":"stragglers","step":S,"median_s":M,"threshold":T,
// "ranks":[{"rank":R,"node":"n","seconds":x,"excess":e},...]} (valid JSON, no newline).
std::string stragglers_metrics_line(std::uint64_t step, double median_s, double threshold,
                                    const std::vector<Straggler>& stragglers);
// One human line: "step 40: 1 straggler(s) above the median 12.1 ms by >20%: rank 3 on node2 (+45%)".
std::string stragglers_log_line(std::uint64_t step, double median_s, double threshold,
                                const std::vector<Straggler>& stragglers);

}  // namespace trainrt
