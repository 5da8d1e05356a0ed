// NCCL wiring under a real PMIx server.
//   nccl_mp uid   the unique-id exchange (no GPU needed): every rank holds rank 0's id
//   nccl_mp gpu   full init + collectives + split on GPUs; exits 77 (skipped) without a device
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

using namespace trainrt;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "uid";
  try {
    auto session = bootstrap::Session::open({std::chrono::seconds(60), true});
    const unsigned me = session->rank(), n = session->size();
    if (mode == "uid") {
      bootstrap::Blob id = exchange_nccl_unique_id(*session);
      auto all = session->allgather(id);
      bool same = true;
      for (const auto& b : all) same &= b == all[0];
      bool nonzero = false;
      for (auto byte : id) nonzero |= byte != 0;
      fmt::print("rank {} of {}: {} ({} bytes)\n", me, n, same && nonzero ? "UID-OK" : "UID-MISMATCH", id.size());
      return same && nonzero ? 0 : 1;
    }
    if (mode == "gpu") {
      if (!nccl_available()) {
        fmt::print("rank {}: SKIPPED: no CUDA device on this machine; NCCL init and collectives not run\n", me);
        return 77;
      }
      int devices = 0;
      cudaGetDeviceCount(&devices);
      NcclOptions opts;
      opts.device = static_cast<int>(session->local_rank() % devices);
      auto comm = make_nccl_communicator(*session, opts);
      const std::size_t count = 1 << 20;
      std::vector<float> host(count);
      for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>((i + me) % 13);
      float* dev = nullptr;
      cudaMalloc(&dev, count * sizeof(float));
      cudaMemcpy(dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      comm->allreduce(dev, dev, count, DType::F32, ReduceOp::Sum).wait();
      cudaMemcpy(host.data(), dev, count * sizeof(float), cudaMemcpyDeviceToHost);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (unsigned r = 0; r < n; ++r) want += static_cast<float>((i + r) % 13);
        wrong += host[i] != want;
      }
      auto half = split_nccl_communicator(*comm, static_cast<int>(me % 2), static_cast<int>(me));
      half->barrier().wait();
      fmt::print("rank {} of {}: allreduce {} wrong; split size {}; {}\n", me, n, wrong, half->size(),
                 wrong == 0 ? "GPU-OK" : "GPU-FAIL");
      cudaFree(dev);
      return wrong == 0 ? 0 : 1;
    }
    fmt::print(stderr, "unknown mode '{}'; valid: uid, gpu\n", mode);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
