#pragma once
// NCCL for device memory, wired through the bootstrap: rank 0 (or one root per `ranks_per_root`
// ranks, for large worlds) creates the unique id(s), the bootstrap hands them out, every rank
// initialises non-blocking and aborts the communicator if init does not finish in time.
//
// Stream ordering (the contract for device memory):
//  - Every collective orders after the work enqueued so far on the caller's stream (the stream in
//    NcclOptions::stream or set_nccl_stream; by default the legacy default stream): an event is
//    recorded there and the communicator's own stream waits for it. A producer on another stream
//    must be ordered before the caller's stream by the caller (cudaStreamWaitEvent).
//  - Work enqueued on the caller's stream after the call orders after the collective (the caller's
//    stream waits for the collective's completion event), so a consumer on that stream needs no
//    host synchronisation. A blocking call also waits on the host, so any stream may use the result
//    once it returns; an asynchronous one completes its Work with the collective.
// Failures: an NCCL error, an asynchronous error seen while waiting (ncclCommGetAsyncError is
// polled) or a collective not done within NcclOptions::timeout aborts the communicator, once, and
// throws PeerError; every later call, and every outstanding Work, throws PeerError too. The abort
// runs beside the caller (it can wait for work queued on the device), so the PeerError comes at
// the timeout; the failed collective's buffers may be freed or reused once the communicator is
// destroyed, whose destruction waits for the abort.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

struct NcclOptions {
  int device = -1;  // CUDA device; -1: choose_cuda_device() from the environment
  std::chrono::milliseconds init_timeout{std::chrono::minutes(2)};
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // one collective, issue to completion
  unsigned ranks_per_root = 0;  // > 0 and < world: ncclCommInitRankScalable
  void* stream = nullptr;       // the caller's cudaStream_t; nullptr: the legacy default stream
};

bool nccl_built();      // this build has the NCCL backend
bool nccl_available();  // built with NCCL and a CUDA device is present
std::unique_ptr<Communicator> make_nccl_communicator(bootstrap::Session& session, const NcclOptions& options = {});
// Ranks with the same color form a new communicator, ordered by key (ncclCommSplit). The child
// starts with its parent's caller stream.
std::unique_ptr<Communicator> split_nccl_communicator(Communicator& parent, int color, int key);
// The caller's stream of an NCCL communicator (see above); UsageError for another backend.
void set_nccl_stream(Communicator& comm, void* stream);
void* nccl_stream(Communicator& comm);

// The id exchange alone (no GPU needed): rank 0's ncclGetUniqueId, broadcast by the bootstrap.
bootstrap::Blob exchange_nccl_unique_id(bootstrap::Session& session);
// What make_nccl_communicator hands ncclCommInitRankScalable: one id from every root (ranks 0,
// ranks_per_root, 2 * ranks_per_root, ...), in root order, on every rank. ranks_per_root 0 or at
// least the world: rank 0's id alone. Collective; no GPU needed.
std::vector<bootstrap::Blob> exchange_nccl_unique_ids(bootstrap::Session& session, unsigned ranks_per_root);

// The device ordinal a rank uses (pure, no CUDA call): TRAINRT_CUDA_DEVICE when set (the plugin's
// position of the task's own GPU in CUDA_VISIBLE_DEVICES); else the local rank when it is below
// `device_count` and CUDA_VISIBLE_DEVICES lists several devices (unset: all `device_count` are
// visible); else 0. Arguments are the raw environment values (nullptr: unset). Throws Error for
// a TRAINRT_CUDA_DEVICE that is not a number below `device_count`.
int choose_cuda_device(const char* trainrt_cuda_device, unsigned local_rank, const char* cuda_visible_devices,
                       int device_count);

// choose_cuda_device() with this process's environment and CUDA device count; -1 without a device.
int pick_cuda_device(unsigned local_rank);

// This rank's GPU as NCCL would see it: PCI bus id of `device` ("" without a usable device).
std::string gpu_bus_id(int device);

// One rank's GPU, as allgathered at init: which node, which PCI bus id ("" = no GPU).
struct RankGpu {
  unsigned rank = 0;
  std::uint32_t node = 0;
  std::string bus_id;
};
// Why NCCL cannot run on these ranks (pure): ranks without a GPU, or ranks of one node sharing a
// GPU (NCCL refuses a GPU twice in one communicator: "Duplicate GPU"). nullopt when it can.
std::optional<std::string> nccl_placement_problem(const std::vector<RankGpu>& ranks);

}  // namespace trainrt
