// Which engine and device communicator a run gets from --device (and --shard-optimizer), and
// --check-device's test of a usable GPU.
#include <fmt/format.h>

#include <chrono>

#include "mlp.hpp"
#include "options.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/runtime/init.hpp"

namespace train_mlp {

using trainrt::DeviceComm;
using trainrt::Error;
namespace kernels = trainrt::kernels;

// --device: cpu never opens NCCL; cuda requires it (every rank a GPU of its own); auto lets init
// decide the same way on every rank (it allgathers each rank's GPU) and falls back to the host.
trainrt::InitOptions init_options(const Options& o) {
  trainrt::InitOptions io;
  if (o.device == "cpu" || (o.device == "auto" && !cuda_engine_built()))
    io.nccl = DeviceComm::Off;
  else
    io.nccl = o.device == "cuda" ? DeviceComm::Required : DeviceComm::Auto;
  io.comm.timeout = std::chrono::milliseconds(static_cast<long>(o.watchdog_s * 1000));
  return io;
}

std::unique_ptr<Engine> make_engine(trainrt::Runtime& rt, const Options& o, const Shapes& shapes) {
  const bool cuda = o.device == "cuda" || (o.device == "auto" && rt.device && cuda_engine_built());
  if (o.shard_optimizer && cuda) throw Error("the sharded optimizer runs on the cpu engine: add --device cpu", "--shard-optimizer");
  if (o.shard_optimizer) return make_sharded_cpu_engine(rt, shapes, o.seed);
  return cuda ? make_cuda_engine(rt, shapes, o.seed) : make_cpu_engine(rt, shapes, o.seed);
}

// --check-device: the kernels' own test of a usable GPU (no device or no driver: 77; anything else
// that fails, a driver older than the runtime say, is an error).
int check_device() {
  if (!cuda_engine_built()) {
    fmt::print("train-mlp: built without the cuda engine: no GPU path\n");
    return 77;
  }
  if (!kernels::cuda::device_available()) {
    fmt::print("train-mlp: no CUDA device\n");
    return 77;
  }
  fmt::print("train-mlp: a CUDA device is usable\n");
  return 0;
}

}  // namespace train_mlp
