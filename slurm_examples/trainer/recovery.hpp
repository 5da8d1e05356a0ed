#pragma once
// Recovery as an operator sees it (docs/recovery.md): the time from a fault to the next completed
// step, by phase. The batch script (train.sbatch) knows when the failed step was last seen making
// progress, when srun returned, when the doctor's verdict came and when it launched the next
// step; it passes those to the new step as TRAINRT_RECOVERY_* variables. The trainer adds what only
// it knows (bootstrap done, restore done and from which tier, first step done) and rank 0 writes
// one "recovery" event to its metrics after that first step (or at the run's end when the failure
// left no step to train). The goodput report sums the phases.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/checkpoint/manager.hpp"

namespace train_mlp {

struct RecoveryTimes {
  double process_start = 0;  // wall clock (s since the epoch) at main()
  double init_done = 0;      // trainrt::init() returned: PMIx, communicators
  double restore_done = 0;   // restore() returned
  std::int64_t restored_step = -1;
  std::string source;        // "memory", "disk" or "" (fresh start)
  unsigned moved_copies = 0;  // shards copied between nodes before the restore (a spare's come from buddies)
  std::string fallbacks;     // why a newer step or a faster tier was not used ("" when none)
  // Rank 0's restore() by phase; restore_s less their sum is the rest of start-up after init()
  // (engine, manager, registration) and rank 0 waiting for the other ranks at the barrier.
  std::vector<trainrt::checkpoint::RestorePhase> restore_phases;
};

// The script's part, from the environment; nullopt when this step is not a recovery (the first
// step of a job, or a script that does not say).
struct ScriptTimes {
  double failed_at = 0;    // last progress of the failed step (newest metrics line of any rank)
  double detected_at = 0;  // srun returned with the failure
  double verdict_at = 0;   // trainrt-doctor's verdict was read
  double launched_at = 0;  // the next srun was started
  std::string kind;        // spare | shrink | same (rerun on the same nodes)
  std::string excluded;    // nodes left out, comma-separated
  std::string spares;      // spare nodes brought in, comma-separated
  unsigned failed_launches = 0;  // reruns of this recovery that failed before their first step
};
std::optional<ScriptTimes> script_times_from_env();

// The "recovery" metrics line: every phase in seconds, and the raw times. `no_step_left`: the
// failure came after the last step (at the run's end), so the restored run had nothing to train and
// `first_step_done` is when it found that out.
std::string recovery_event(const ScriptTimes& s, const RecoveryTimes& t, double first_step_done, bool no_step_left = false);

}  // namespace train_mlp
