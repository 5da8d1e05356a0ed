// Uses the installed runtime: a one-process world (no PMIx server), a host allreduce and the
// checkpoint manager's save and restore. It includes every header the install calls public, so
// each one builds against the installed tree alone (consumer_test.sh checks nothing else is there).
#include <cstdio>
#include <filesystem>
#include <type_traits>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/checkpoint/stop_signals.hpp"
#include "trainrt/dtype.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/memory.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/communicator.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"
#include "trainrt/runtime/observability.hpp"

static_assert(std::is_same_v<trainrt::checkpoint::Location, trainrt::Memory>, "one Host/Device enum");

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  trainrt::InitOptions options;
  options.nccl = trainrt::DeviceComm::Off;
  auto rt = trainrt::init(options);
  std::vector<float> in = {1, 2, 3}, out(3);
  rt->host->allreduce(in.data(), out.data(), in.size(), trainrt::DType::F32, trainrt::ReduceOp::Sum);
  std::vector<float> weights = {0.5f, 0.25f};
  {
    trainrt::checkpoint::Manager manager(*rt->session, {argv[1]});
    manager.register_buffer("w", weights.data(), weights.size() * sizeof(float), trainrt::DType::F32, {2});
    manager.save(7).get();
    weights = {0, 0};
    if (manager.restore() != 7) return 1;
  }
  bool ok = out[2] == 3 && weights[0] == 0.5f && rt->size == 1;
  std::printf("trainrt consumer: world %u, allreduce %g, restored %g: %s\n", rt->size, out[2], weights[0],
              ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
}
