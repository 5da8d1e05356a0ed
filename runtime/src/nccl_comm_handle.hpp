#pragma once
// The NCCL communicator's shared handle and the device scope its calls run in. Internal to
// libtrainrt (nccl_communicator.cpp).
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "trainrt/error.hpp"

namespace trainrt::nccl_detail {

using Clock = std::chrono::steady_clock;

// Makes `device` current for a scope: NCCL and the stream/event calls below belong to the
// communicator's device, whatever the calling thread had current. Never throws (it runs in
// destructors and abort paths); a device that cannot be made current fails the next CUDA call.
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() {
    int now = -1;
    if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// A communicator handle shared by the communicator and its outstanding Work, so that waiting on
// Work after an abort or after the communicator is gone never touches a freed handle. Every use of
// `comm` holds `mutex`; abort and destroy each happen once.
struct CommHandle {
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  std::string failure;        // why it was aborted; "" while healthy
  CollectiveFailure cause;    // the same as data, for every later PeerError
  int device = 0;
  std::chrono::milliseconds timeout{};

  std::thread reaper;  // the one ncclCommAbort, run beside the caller (abort_locked)

  explicit CommHandle(ncclComm_t c, int dev, std::chrono::milliseconds t) : comm(c), device(dev), timeout(t) {}
  ~CommHandle() {
    destroy();
    if (reaper.joinable()) reaper.join();
  }

  // Holding `mutex`. The ranks are never known here: NCCL does not say which peer failed.
  // ncclCommAbort frees the communicator (also a stuck one) and its device memory, and freeing
  // waits for work already queued on the device that NCCL's abort flag cannot stop (the first GPU
  // run: a host callback holding the stream 4 s kept a 1 s timeout's abort, and its PeerError,
  // 4 s). So the abort runs on its own thread: the caller gets its PeerError at the timeout, and
  // the handle's end waits for the abort. `comm` is null from here on, so nothing else touches it.
  // Until then the failed collective's kernels may still touch its buffers: a caller that goes on
  // after the PeerError frees or reuses them only once the communicator is gone.
  void abort_locked(const std::string& why, CollectiveFailure what = {FailureKind::Aborted, {}}) noexcept {
    if (failure.empty()) {
      failure = why;
      cause = std::move(what);
    }
    if (!comm) return;
    ncclComm_t stuck = std::exchange(comm, nullptr);
    const int dev = device;
    try {
      reaper = std::thread([stuck, dev] {
        DeviceScope scope(dev);
        ncclCommAbort(stuck);
      });
    } catch (...) {  // no thread to be had: abort here, late rather than never
      DeviceScope scope(dev);
      ncclCommAbort(stuck);
    }
  }
  void abort(const std::string& why, CollectiveFailure what = {FailureKind::Aborted, {}}) noexcept {
    std::lock_guard lock(mutex);
    abort_locked(why, std::move(what));
  }
  // Holding `mutex`: throws PeerError once aborted.
  void throw_if_aborted() const {
    if (!failure.empty()) throw PeerError(cause, "communicator aborted: " + failure, "nccl");
    if (!comm) throw UsageError("the NCCL communicator was destroyed", "nccl");
  }
  // Holding `mutex`: an asynchronous error aborts the communicator and throws PeerError.
  void poll_async_error_locked(const std::string& what) {
    throw_if_aborted();
    ncclResult_t state = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) state = rc;
    if (state == ncclSuccess || state == ncclInProgress) return;
    const std::string why = fmt::format("{}: asynchronous NCCL error: {}", what, ncclGetErrorString(state));
    abort_locked(why, {FailureKind::Transport, {}});
    throw PeerError(cause, why + "; communicator aborted", "nccl");
  }
  // Holding `mutex` through `lock`: waits for a non-blocking call to leave ncclInProgress; aborts
  // on error or timeout. The lock is let go while sleeping, so abort() from another thread (a
  // watchdog) gets through; the next round then throws.
  void await_locked(std::unique_lock<std::mutex>& lock, std::chrono::milliseconds limit, const std::string& what) {
    const auto deadline = Clock::now() + limit;
    while (true) {
      throw_if_aborted();
      ncclResult_t state = ncclInProgress;
      ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
      if (rc != ncclSuccess) state = rc;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        const std::string why = fmt::format("{} failed: {}", what, ncclGetErrorString(state));
        abort_locked(why, {FailureKind::Transport, {}});
        throw PeerError(cause, why + "; communicator aborted", "nccl");
      }
      if (Clock::now() > deadline) {
        const std::string why = fmt::format("{} did not finish within {} ms", what, limit.count());
        abort_locked(why, {FailureKind::Timeout, {}, std::chrono::duration<double>(limit).count()});
        throw PeerError(cause, why + "; communicator aborted", "nccl");
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // init and connects take ms
      lock.lock();
    }
  }
  // Finalize (flushes outstanding work) then destroy; abort when finalize fails or hangs.
  void destroy() noexcept {
    std::unique_lock lock(mutex);
    if (!comm) return;
    DeviceScope scope(device);
    ncclResult_t rc = ncclCommFinalize(comm);
    if (rc == ncclSuccess || rc == ncclInProgress) {
      try {
        await_locked(lock, timeout, "ncclCommFinalize");  // aborts on failure
      } catch (...) {
        return;
      }
      ncclCommDestroy(comm);
    } else {
      ncclCommAbort(comm);
    }
    comm = nullptr;
    if (failure.empty()) {
      failure = "the communicator was destroyed";
      cause = {FailureKind::Aborted, {}};
    }
  }
};

}  // namespace trainrt::nccl_detail
