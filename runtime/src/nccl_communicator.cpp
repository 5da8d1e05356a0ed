#include "trainrt/runtime/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "nccl_comm_handle.hpp"
#include "trainrt/error.hpp"

namespace trainrt {
namespace {

using nccl_detail::Clock;
using nccl_detail::CommHandle;
using nccl_detail::DeviceScope;

// An NCCL call that failed outright: the transport or a peer (PeerError) unless NCCL says the
// arguments were wrong (UsageError).
[[noreturn]] void throw_nccl(ncclResult_t rc, const std::string& what) {
  const std::string msg = fmt::format("{} failed: {} ({})", what, ncclGetErrorString(rc), ncclGetLastError(nullptr));
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) throw UsageError(msg, "nccl");
  throw PeerError(msg, "nccl");
}

void check_nccl(ncclResult_t rc, const std::string& what) {
  if (rc != ncclSuccess && rc != ncclInProgress) throw_nccl(rc, what);
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
  throw UsageError("unknown dtype", "nccl");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
  }
  throw UsageError("unknown reduction", "nccl");
}

// Completion of one collective: its event, the shared handle (for async errors and abort) and a
// deadline (the communicator's timeout from issue).
class EventState final : public WorkState {
 public:
  EventState(std::shared_ptr<CommHandle> handle, cudaEvent_t done, std::string what)
      : handle_(std::move(handle)), done_(done), what_(std::move(what)), deadline_(Clock::now() + handle_->timeout) {}
  ~EventState() override {
    DeviceScope scope(handle_->device);
    cudaEventDestroy(done_);
  }
  bool ready() override { return cudaEventQuery(done_) == cudaSuccess; }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    // Yield for the first 2 ms, as a CUDA stream synchronisation spins (PyTorch's): a collective of
    // up to a few ms is seen done within a microsecond or so. A sleep, even of 50 us, becomes 60-110 us
    // with the kernel's timer slack and would add that to every such wait. After that, 50 us naps, so
    // a long wait does not hold a core.
    const auto spin_until = Clock::now() + std::chrono::milliseconds(2);
    DeviceScope scope(handle_->device);
    while (true) {
      cudaError_t rc = cudaEventQuery(done_);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady) {
        handle_->abort(fmt::format("{}: {}", what_, cudaGetErrorString(rc)), {FailureKind::Transport, {}});
        throw PeerError({FailureKind::Transport, {}},
                        fmt::format("{}: CUDA error {}; communicator aborted", what_, cudaGetErrorString(rc)), "nccl");
      }
      {
        std::lock_guard lock(handle_->mutex);
        handle_->poll_async_error_locked(what_);
        if (Clock::now() > deadline_) {
          const std::string why = fmt::format("{} did not complete within {} ms", what_, handle_->timeout.count());
          const double waited = std::chrono::duration<double>(handle_->timeout).count();
          handle_->abort_locked(why, {FailureKind::Timeout, {}, waited});
          throw PeerError(handle_->cause, why + "; communicator aborted", "nccl");
        }
      }
      const auto now = Clock::now();
      if (now >= until) return false;
      if (now < spin_until) {
        std::this_thread::yield();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  std::shared_ptr<CommHandle> handle_;
  cudaEvent_t done_{};
  std::string what_;
  Clock::time_point deadline_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (already initialised) at once: any failure here frees it.
  NcclCommunicator(ncclComm_t comm, int device, std::chrono::milliseconds timeout, void* caller_stream)
      : handle_(std::make_shared<CommHandle>(comm, device, timeout)),
        caller_(static_cast<cudaStream_t>(caller_stream)) {
    try {
      DeviceScope scope(device);
      check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
      int r = 0, n = 0;
      check_nccl(ncclCommUserRank(comm, &r), "ncclCommUserRank");
      check_nccl(ncclCommCount(comm, &n), "ncclCommCount");
      rank_ = static_cast<unsigned>(r);
      size_ = static_cast<unsigned>(n);
    } catch (...) {
      release();  // the handle (member) frees the communicator itself
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }

  unsigned rank() const override { return rank_; }
  unsigned size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  void abort(const std::string& why) noexcept override { handle_->abort("aborted: " + why); }

  const std::shared_ptr<CommHandle>& handle() const { return handle_; }
  void* caller_stream() const { return caller_; }
  void set_caller_stream(void* s) { caller_ = static_cast<cudaStream_t>(s); }

 protected:
  Work start_allreduce(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return issue("ncclAllReduce", mode, [&](ncclComm_t c) {
      return ncclAllReduce(in, out, count, nccl_type(t), nccl_op(op), c, stream_);
    });
  }
  Work start_reduce_scatter(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return issue("ncclReduceScatter", mode, [&](ncclComm_t c) {
      return ncclReduceScatter(in, out, count, nccl_type(t), nccl_op(op), c, stream_);
    });
  }
  Work start_allgather(const void* in, void* out, std::size_t count, DType t, Mode mode) override {
    return issue("ncclAllGather", mode,
                 [&](ncclComm_t c) { return ncclAllGather(in, out, count, nccl_type(t), c, stream_); });
  }
  Work start_broadcast(void* buf, std::size_t count, DType t, unsigned root, Mode mode) override {
    return issue("ncclBroadcast", mode, [&](ncclComm_t c) {
      return ncclBroadcast(buf, buf, count, nccl_type(t), static_cast<int>(root), c, stream_);
    });
  }
  // Not offered: the exchange serves host-side work (checkpoint restores through the host
  // communicator); a device alltoallv would need NCCL's grouped send/recv, untested here.
  Work start_alltoallv(const void*, std::vector<std::size_t>, void*, std::vector<std::size_t>, Mode) override {
    throw UsageError("alltoallv is a host-memory collective: use the host communicator, not the nccl one", "nccl");
  }
  Work start_barrier(Mode mode) override {
    // NCCL has no barrier: a one-element allreduce on a private device word is one.
    if (!barrier_word_) {
      DeviceScope scope(handle_->device);
      check_cuda(cudaMalloc(&barrier_word_, sizeof(float)), "cudaMalloc");
      check_cuda(cudaMemsetAsync(barrier_word_, 0, sizeof(float), stream_), "cudaMemsetAsync");
    }
    return issue("barrier", mode, [&](ncclComm_t c) {
      return ncclAllReduce(barrier_word_, barrier_word_, 1, ncclFloat32, ncclSum, c, stream_);
    });
  }

 private:
  // Orders the call after the caller's stream, enqueues it, makes the caller's stream wait for it.
  template <typename Enqueue>
  Work issue(const char* what, Mode mode, Enqueue&& enqueue) {
    DeviceScope scope(handle_->device);
    cudaEvent_t done = nullptr;
    {
      std::unique_lock lock(handle_->mutex);
      // A non-blocking communicator takes no new call while an earlier one (a lazy connect started by
      // another thread, say) is still ncclInProgress: wait for it; throws once aborted.
      handle_->await_locked(lock, handle_->timeout, what);
      check_cuda(cudaEventRecord(ready_, caller_), "cudaEventRecord(caller stream)");
      check_cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
      ncclResult_t rc = enqueue(handle_->comm);
      if (rc == ncclInProgress) handle_->await_locked(lock, handle_->timeout, what);
      else if (rc != ncclSuccess) {
        const std::string why = fmt::format("{}: {}", what, ncclGetErrorString(rc));
        if (rc != ncclInvalidArgument && rc != ncclInvalidUsage)
          handle_->abort_locked(why, {FailureKind::Transport, {}});
        throw_nccl(rc, what);  // a usage error enqueued nothing: the communicator stays usable
      }
      check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
      if (cudaError_t rc2 = cudaEventRecord(done, stream_); rc2 != cudaSuccess) {
        cudaEventDestroy(done);
        check_cuda(rc2, "cudaEventRecord");
      }
      // The caller's later work orders after the collective.
      if (cudaError_t rc3 = cudaStreamWaitEvent(caller_, done, 0); rc3 != cudaSuccess) {
        cudaEventDestroy(done);
        check_cuda(rc3, "cudaStreamWaitEvent(caller stream)");
      }
    }
    Work w(std::make_shared<EventState>(handle_, done, what));
    if (mode == Mode::Blocking) w.wait();  // throws PeerError (aborting) on error or timeout
    return w;
  }

  void release() noexcept {
    handle_->destroy();  // outstanding Work keeps the handle, but never a live communicator
    DeviceScope scope(handle_->device);
    if (barrier_word_) cudaFree(barrier_word_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    barrier_word_ = nullptr;
    ready_ = nullptr;
    stream_ = nullptr;
  }

  std::shared_ptr<CommHandle> handle_;
  cudaStream_t caller_ = nullptr;  // the user's stream; nullptr: the legacy default stream
  cudaStream_t stream_{};          // NCCL's own, non-blocking
  cudaEvent_t ready_{};            // the caller's stream at the moment of a call
  void* barrier_word_ = nullptr;
  unsigned rank_ = 0, size_ = 1;
};

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Owns a communicator under construction: one that fails to initialise is aborted (freed).
struct PendingComm {
  ncclComm_t comm = nullptr;
  ~PendingComm() {
    if (comm) ncclCommAbort(comm);
  }
  ncclComm_t release() { return std::exchange(comm, nullptr); }
};

// Waits for a non-blocking init/split on `comm`; throws PeerError on failure or timeout (the
// caller's PendingComm then aborts it).
void await_init(ncclComm_t comm, std::chrono::milliseconds limit, const std::string& what) {
  const auto deadline = Clock::now() + limit;
  while (true) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) state = rc;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) throw_nccl(state, what);
    if (Clock::now() > deadline)
      throw PeerError({FailureKind::Timeout, {}, std::chrono::duration<double>(limit).count()},
                      fmt::format("{} did not finish within {} ms; communicator aborted", what, limit.count()), "nccl");
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // fine enough to time init by
  }
}

NcclCommunicator& as_nccl(Communicator& c) {
  auto* p = dynamic_cast<NcclCommunicator*>(&c);
  if (!p) throw UsageError(fmt::format("an NCCL communicator was needed, this one is '{}'", c.backend()), "nccl");
  return *p;
}

}  // namespace

bool nccl_built() { return true; }

bool nccl_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

int pick_cuda_device(unsigned local_rank) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) return -1;
  return choose_cuda_device(std::getenv("TRAINRT_CUDA_DEVICE"), local_rank, std::getenv("CUDA_VISIBLE_DEVICES"), n);
}

std::string gpu_bus_id(int device) {
  char id[64] = {};
  if (device < 0 || cudaDeviceGetPCIBusId(id, sizeof id - 1, device) != cudaSuccess) return {};
  return id;
}

void set_nccl_stream(Communicator& comm, void* stream) { as_nccl(comm).set_caller_stream(stream); }
void* nccl_stream(Communicator& comm) { return as_nccl(comm).caller_stream(); }

namespace {

bootstrap::Blob new_unique_id() {
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  return {reinterpret_cast<const std::uint8_t*>(uid.internal),
          reinterpret_cast<const std::uint8_t*>(uid.internal) + sizeof uid.internal};
}

ncclUniqueId to_unique_id(const bootstrap::Blob& blob) {
  if (blob.size() != sizeof(ncclUniqueId))
    throw Error(fmt::format("received a {}-byte unique id, NCCL's is {}", blob.size(), sizeof(ncclUniqueId)), "nccl");
  ncclUniqueId uid;
  std::memcpy(uid.internal, blob.data(), sizeof uid.internal);
  return uid;
}

}  // namespace

bootstrap::Blob exchange_nccl_unique_id(bootstrap::Session& session) {
  bootstrap::Blob id = bootstrap::exchange_unique_id(session, session.rank() == 0 ? new_unique_id() : bootstrap::Blob{}, 0);
  to_unique_id(id);  // checks the size
  return id;
}

std::vector<bootstrap::Blob> exchange_nccl_unique_ids(bootstrap::Session& session, unsigned ranks_per_root) {
  const unsigned n = session.size();
  if (ranks_per_root == 0 || ranks_per_root >= n) return {exchange_nccl_unique_id(session)};
  // One root per `ranks_per_root` ranks creates an id; everyone reads the roots' ids only.
  std::vector<unsigned> roots;
  for (unsigned r = 0; r < n; r += ranks_per_root) roots.push_back(r);
  bootstrap::Blob mine;
  if (session.rank() % ranks_per_root == 0) mine = new_unique_id();
  auto ids = session.gather_from(mine, roots);
  for (const auto& blob : ids) to_unique_id(blob);  // checks every size
  return ids;
}

std::unique_ptr<Communicator> make_nccl_communicator(bootstrap::Session& session, const NcclOptions& options) {
  const int device = options.device >= 0 ? options.device : pick_cuda_device(session.local_rank());
  if (device < 0) throw Error("no CUDA device for the NCCL communicator", "nccl");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclConfig_t config = nonblocking_config();
  PendingComm pending;
  const unsigned n = session.size(), me = session.rank();
  std::vector<ncclUniqueId> ids;
  for (const auto& blob : exchange_nccl_unique_ids(session, options.ranks_per_root)) ids.push_back(to_unique_id(blob));
  if (ids.size() > 1) {
    check_nccl(ncclCommInitRankScalable(&pending.comm, static_cast<int>(n), static_cast<int>(me),
                                        static_cast<int>(ids.size()), ids.data(), &config),
               "ncclCommInitRankScalable");
  } else {
    check_nccl(ncclCommInitRankConfig(&pending.comm, static_cast<int>(n), ids[0], static_cast<int>(me), &config),
               "ncclCommInitRankConfig");
  }
  if (!pending.comm) throw PeerError("NCCL init returned no communicator", "nccl");
  await_init(pending.comm, options.init_timeout, fmt::format("NCCL init of rank {} of {} on device {}", me, n, device));
  return std::make_unique<NcclCommunicator>(pending.release(), device, options.timeout, options.stream);
}

std::unique_ptr<Communicator> split_nccl_communicator(Communicator& parent, int color, int key) {
  NcclCommunicator& p = as_nccl(parent);
  const auto& h = p.handle();
  ncclConfig_t config = nonblocking_config();
  PendingComm pending;
  {
    std::unique_lock lock(h->mutex);
    h->throw_if_aborted();
    DeviceScope scope(h->device);
    ncclResult_t rc = ncclCommSplit(h->comm, color, key, &pending.comm, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) throw_nccl(rc, "ncclCommSplit");
    if (pending.comm) await_init(pending.comm, h->timeout, "ncclCommSplit (child)");
    h->await_locked(lock, h->timeout, "ncclCommSplit (parent)");
  }
  if (!pending.comm) throw UsageError(fmt::format("ncclCommSplit gave no communicator for color {}", color), "nccl");
  return std::make_unique<NcclCommunicator>(pending.release(), h->device, h->timeout, p.caller_stream());
}

}  // namespace trainrt
