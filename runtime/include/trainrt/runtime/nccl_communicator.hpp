#pragma once
// NCCL for device memory, wired through the bootstrap: rank 0 (or one root per `ranks_per_root`
// ranks, for large worlds) creates the unique id(s), the bootstrap hands them out, every rank
// initialises non-blocking and aborts the communicator if init does not finish in time.
// Collectives are stream-ordered on the communicator's stream; Work completes with a CUDA event.
#include <chrono>
#include <memory>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

struct NcclOptions {
  int device = -1;                                   // CUDA device; -1: TRAINRT_CUDA_DEVICE, else 0
  std::chrono::milliseconds init_timeout{std::chrono::minutes(2)};
  unsigned ranks_per_root = 0;                       // > 0 and < world: ncclCommInitRankScalable
};

bool nccl_available();  // built with NCCL and a CUDA device is present
std::unique_ptr<Communicator> make_nccl_communicator(bootstrap::Session& session, const NcclOptions& options = {});
// Ranks with the same color form a new communicator, ordered by key (ncclCommSplit).
std::unique_ptr<Communicator> split_nccl_communicator(Communicator& parent, int color, int key);

// The id exchange alone (no GPU needed): rank 0's ncclGetUniqueId, broadcast by the bootstrap.
bootstrap::Blob exchange_nccl_unique_id(bootstrap::Session& session);

}  // namespace trainrt
