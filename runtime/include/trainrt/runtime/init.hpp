#pragma once
// trainrt::init(): the one call a training program makes. Reads the TRAINRT_* environment the
// SPANK plugin exports (docs/environment.md), opens the bootstrap (PMIx, or a one-process world),
// creates the host communicator (shared memory inside one node, Gloo across nodes) and, where CUDA
// is present and asked for, the NCCL communicator on the task's own GPU (choose_cuda_device in
// nccl_communicator.hpp). Ranks that share a GPU (tasks-per-gpu=2) or lack one cannot run NCCL:
// with DeviceComm::Auto, init says so once (rank 0, on stderr), leaves `device` null and explains
// why in `device_note`; the program reduces through `host`. With Required it throws. Deciding
// costs one bootstrap allgather (each rank's GPU) in builds with NCCL unless DeviceComm::Off.
#include <memory>
#include <string>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

enum class DeviceComm { Auto, Off, Required };  // Auto: NCCL when every rank has a GPU of its own

struct InitOptions {
  DeviceComm nccl = DeviceComm::Auto;
  CommOptions comm;
  bootstrap::SessionOptions bootstrap;
};

struct Runtime {
  std::unique_ptr<bootstrap::Session> session;
  std::unique_ptr<Communicator> host;    // CPU memory
  std::unique_ptr<Communicator> device;  // GPU memory; null without NCCL/GPU (device_note says why)
  unsigned rank = 0, size = 1, local_rank = 0, local_size = 1;
  int cuda_device = -1;          // the GPU this rank uses (choose_cuda_device); -1 without one
  std::string device_note;       // why `device` is null; "" when it is not
  std::string placement_cpus;    // TRAINRT_CPUS, "" outside the plugin
  std::string placement_nics;    // TRAINRT_NICS
  unsigned restart_count = 0;    // SLURM_RESTART_COUNT

  std::string describe() const;  // one line for logs
};

std::unique_ptr<Runtime> init(const InitOptions& options = {});

// The host communicator init() makes, for a session of one's own: shared memory when every rank
// is on this node, else shared memory inside nodes plus Gloo between them (TRAINRT_HOST_BACKEND
// overrides: shm, gloo, hierarchical). Collective: every rank of `session` calls it.
std::unique_ptr<Communicator> make_host_communicator(bootstrap::Session& session, const CommOptions& options = {});

}  // namespace trainrt
