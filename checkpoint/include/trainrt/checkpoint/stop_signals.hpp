#pragma once
// Stopping a training job cleanly: SIGUSR1 and SIGTERM (Slurm's --signal, the time limit,
// scancel) set a flag the training loop polls; save_and_exit() writes a final checkpoint and
// exits with the code sbatch templates requeue on.
#include <cstdint>
#include <map>
#include <string>

namespace trainrt {

namespace checkpoint {
class Manager;
}

// Exit code of save_and_exit(): sbatch templates requeue on it (EX_TEMPFAIL).
constexpr int kRequeueExitCode = 75;
// Exit code of a trainer whose restore() raised checkpoint::WorldSizeError: the checkpoint holds
// per-rank state only the world size that saved it can restore (train.sbatch requeues for it).
constexpr int kWorldSizeExitCode = 76;

void install_stop_signals();
bool should_stop();
int stop_signal();  // the signal that arrived, 0 if none

// Saves `step` (with `metadata`, rank 0's kept), waits for its commit and for old-step cleanup,
// and exits with kRequeueExitCode, or 1 when the save failed. A step that is already committed (a
// stop signal right after a periodic save or a restore) is left exactly as it is: that counts as
// success, the stored metadata included. Every rank passes a barrier before exiting, so srun's
// --kill-on-bad-exit cannot cut a rank's final save short.
[[noreturn]] void save_and_exit(checkpoint::Manager& manager, std::uint64_t step,
                                std::map<std::string, std::string> metadata = {});

}  // namespace trainrt
