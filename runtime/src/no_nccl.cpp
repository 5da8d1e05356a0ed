// Built without CUDA/NCCL: the device backend reports itself unavailable.
#include "trainrt/error.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

namespace trainrt {

bool nccl_built() { return false; }
bool nccl_available() { return false; }
std::string gpu_bus_id(int) { return {}; }
int pick_cuda_device(unsigned) { return -1; }

std::unique_ptr<Communicator> make_nccl_communicator(bootstrap::Session&, const NcclOptions&) {
  throw Error("this build has no NCCL support (configure with CUDA and NCCL present)", "nccl");
}

std::unique_ptr<Communicator> split_nccl_communicator(Communicator&, int, int) {
  throw Error("this build has no NCCL support", "nccl");
}

void set_nccl_stream(Communicator& comm, void*) {
  throw UsageError("an NCCL communicator was needed, this one is '" + comm.backend() + "'", "nccl");
}

void* nccl_stream(Communicator& comm) {
  throw UsageError("an NCCL communicator was needed, this one is '" + comm.backend() + "'", "nccl");
}

bootstrap::Blob exchange_nccl_unique_id(bootstrap::Session&) {
  throw Error("this build has no NCCL support", "nccl");
}

std::vector<bootstrap::Blob> exchange_nccl_unique_ids(bootstrap::Session&, unsigned) {
  throw Error("this build has no NCCL support", "nccl");
}

}  // namespace trainrt
