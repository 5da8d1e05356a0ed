#pragma once
// trainrt::init(): the one call a training program makes. Reads the TRAINRT_* environment the
// SPANK plugin exports (docs/environment.md), opens the bootstrap (PMIx, or a one-process world),
// creates the host communicator (shared memory inside one node, Gloo across nodes) and, where CUDA
// is present and asked for, the NCCL communicator on the task's own GPU.
#include <memory>
#include <string>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

enum class DeviceComm { Auto, Off, Required };  // Auto: NCCL when a GPU is present

struct InitOptions {
  DeviceComm nccl = DeviceComm::Auto;
  CommOptions comm;
  bootstrap::SessionOptions bootstrap;
};

struct Runtime {
  std::unique_ptr<bootstrap::Session> session;
  std::unique_ptr<Communicator> host;    // CPU memory
  std::unique_ptr<Communicator> device;  // GPU memory; null without NCCL/GPU
  unsigned rank = 0, size = 1, local_rank = 0, local_size = 1;
  int cuda_device = -1;          // TRAINRT_CUDA_DEVICE, -1 when the plugin set none
  std::string placement_cpus;    // TRAINRT_CPUS, "" outside the plugin
  std::string placement_nics;    // TRAINRT_NICS
  unsigned restart_count = 0;    // SLURM_RESTART_COUNT

  std::string describe() const;  // one line for logs
};

std::unique_ptr<Runtime> init(const InitOptions& options = {});

}  // namespace trainrt
