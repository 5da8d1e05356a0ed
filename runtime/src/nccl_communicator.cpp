#include "trainrt/runtime/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "trainrt/error.hpp"

namespace trainrt {
namespace {

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("{} failed: {}", what, ncclGetErrorString(rc)), "nccl");
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)), "cuda");
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

// Waits for a non-blocking NCCL call; aborts the communicator when it does not finish in time.
void await_comm(ncclComm_t comm, std::chrono::milliseconds timeout, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ncclResult_t state = ncclInProgress;
  while (true) {
    check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state != ncclInProgress) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      throw Error(fmt::format("{} did not finish within {} ms; communicator aborted", what, timeout.count()), "nccl");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (state != ncclSuccess) throw Error(fmt::format("{} failed: {}", what, ncclGetErrorString(state)), "nccl");
}

class EventState final : public WorkState {
 public:
  EventState(cudaStream_t stream, ncclComm_t comm) : comm_(comm) {
    check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(event_, stream), "cudaEventRecord");
  }
  ~EventState() override { cudaEventDestroy(event_); }
  bool ready() override { return cudaEventQuery(event_) == cudaSuccess; }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      cudaError_t rc = cudaEventQuery(event_);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady) check_cuda(rc, "cudaEventQuery");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        throw Error(fmt::format("collective failed: {}", ncclGetErrorString(async)), "nccl");
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
  }

 private:
  cudaEvent_t event_{};
  ncclComm_t comm_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::chrono::milliseconds timeout)
      : comm_(comm), device_(device), timeout_(timeout) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    int r = 0, n = 0;
    check_nccl(ncclCommUserRank(comm_, &r), "ncclCommUserRank");
    check_nccl(ncclCommCount(comm_, &n), "ncclCommCount");
    rank_ = static_cast<unsigned>(r);
    size_ = static_cast<unsigned>(n);
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }

  unsigned rank() const override { return rank_; }
  unsigned size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  ncclComm_t handle() const { return comm_; }
  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  Work allreduce(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return issue(ncclAllReduce(in, out, count, nccl_type(t), nccl_op(op), comm_, stream_), "ncclAllReduce", mode);
  }
  Work reduce_scatter(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return issue(ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), comm_, stream_), "ncclReduceScatter",
                 mode);
  }
  Work allgather(const void* in, void* out, std::size_t count, DType t, Mode mode) override {
    return issue(ncclAllGather(in, out, count, nccl_type(t), comm_, stream_), "ncclAllGather", mode);
  }
  Work broadcast(void* buf, std::size_t count, DType t, unsigned root, Mode mode) override {
    return issue(ncclBroadcast(buf, buf, count, nccl_type(t), static_cast<int>(root), comm_, stream_), "ncclBroadcast",
                 mode);
  }
  Work barrier(Mode mode) override {
    // NCCL has no barrier: a one-element allreduce on a private device word is one.
    if (!barrier_word_) check_cuda(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
    return allreduce(barrier_word_, barrier_word_, 1, DType::F32, ReduceOp::Sum, mode);
  }

 private:
  Work issue(ncclResult_t rc, const char* what, Mode mode) {
    if (rc == ncclInProgress) await_comm(comm_, timeout_, what);
    check_nccl(rc, what);
    Work w(std::make_shared<EventState>(stream_, comm_));
    if (mode == Mode::Blocking && !w.wait_for(timeout_)) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw Error(fmt::format("{} did not complete within {} ms; communicator aborted", what, timeout_.count()), "nccl");
    }
    return w;
  }

  ncclComm_t comm_;
  int device_;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_{};
  void* barrier_word_ = nullptr;
  unsigned rank_ = 0, size_ = 1;
};

int pick_device(const NcclOptions& o) {
  if (o.device >= 0) return o.device;
  const char* env = std::getenv("TRAINRT_CUDA_DEVICE");
  return env && *env ? std::atoi(env) : 0;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

bool nccl_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

bootstrap::Blob exchange_nccl_unique_id(bootstrap::Session& session) {
  bootstrap::Blob id;
  if (session.rank() == 0) {
    ncclUniqueId uid;
    check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
    id.assign(reinterpret_cast<const std::uint8_t*>(uid.internal),
              reinterpret_cast<const std::uint8_t*>(uid.internal) + sizeof uid.internal);
  }
  id = bootstrap::exchange_unique_id(session, id, 0);
  if (id.size() != sizeof(ncclUniqueId))
    throw Error(fmt::format("received a {}-byte unique id, NCCL's is {}", id.size(), sizeof(ncclUniqueId)), "nccl");
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(bootstrap::Session& session, const NcclOptions& options) {
  const int device = pick_device(options);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const unsigned n = session.size(), me = session.rank();
  if (options.ranks_per_root > 0 && options.ranks_per_root < n) {
    // One root per `ranks_per_root` ranks creates an id; everyone gets all of them.
    bootstrap::Blob mine;
    if (me % options.ranks_per_root == 0) {
      ncclUniqueId uid;
      check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
      mine.assign(reinterpret_cast<const std::uint8_t*>(uid.internal),
                  reinterpret_cast<const std::uint8_t*>(uid.internal) + sizeof uid.internal);
    }
    std::vector<ncclUniqueId> ids;
    for (const auto& blob : session.allgather(mine)) {
      if (blob.empty()) continue;
      ncclUniqueId uid;
      std::memcpy(uid.internal, blob.data(), sizeof uid.internal);
      ids.push_back(uid);
    }
    check_nccl(ncclCommInitRankScalable(&comm, static_cast<int>(n), static_cast<int>(me), static_cast<int>(ids.size()),
                                        ids.data(), &config),
               "ncclCommInitRankScalable");
  } else {
    bootstrap::Blob id = exchange_nccl_unique_id(session);
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    check_nccl(ncclCommInitRankConfig(&comm, static_cast<int>(n), uid, static_cast<int>(me), &config),
               "ncclCommInitRankConfig");
  }
  await_comm(comm, options.init_timeout, fmt::format("NCCL init of rank {} of {}", me, n));
  return std::make_unique<NcclCommunicator>(comm, device, options.init_timeout);
}

std::unique_ptr<Communicator> split_nccl_communicator(Communicator& parent, int color, int key) {
  auto* p = dynamic_cast<NcclCommunicator*>(&parent);
  if (!p) throw Error("ncclCommSplit needs an NCCL communicator", "nccl");
  ncclConfig_t config = nonblocking_config();
  ncclComm_t child = nullptr;
  check_nccl(ncclCommSplit(p->handle(), color, key, &child, &config), "ncclCommSplit");
  await_comm(p->handle(), p->timeout(), "ncclCommSplit");
  if (!child) throw Error(fmt::format("ncclCommSplit gave no communicator for color {}", color), "nccl");
  return std::make_unique<NcclCommunicator>(child, p->device(), p->timeout());
}

}  // namespace trainrt
