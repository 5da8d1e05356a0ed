#pragma once
// One interface for every backend: the shared-memory host backend inside a node, Gloo across
// nodes, NCCL for device memory. Collectives return a Work handle; every rank must issue the same
// collectives in the same order. Mismatched counts, dtypes or ops are detected and reported.
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <string>

#include "trainrt/runtime/dtype.hpp"

namespace trainrt {

// How a backend reports completion (a future for host threads, a CUDA event for NCCL).
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual bool ready() = 0;
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;  // throws the collective's error
};

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_future<void> f);
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  // Blocks until done; rethrows the collective's trainrt::Error.
  void wait() const;
  // True when done (without rethrowing).
  bool test() const;
  // True when done within `timeout` (rethrows on failure); false on timeout.
  bool wait_for(std::chrono::milliseconds timeout) const;

 private:
  std::shared_ptr<WorkState> state_;
};

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // a peer silent this long is an error
  // Shared-memory staging per rank: 1 MiB keeps the staged chunks in cache (measured best of
  // 128 KiB..4 MiB with trainrt-perf on a 2-core EPYC VM).
  std::size_t slot_bytes = std::size_t{1} << 20;
};

// Blocking: the call returns a finished Work. Async: the collective runs on the communicator's
// progress thread (host backends) or is enqueued on its stream (NCCL); Work tells when it is done.
// Both keep issue order.
enum class Mode { Blocking, Async };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual unsigned rank() const = 0;
  virtual unsigned size() const = 0;
  virtual std::string backend() const = 0;

  virtual Work allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                         Mode mode = Mode::Blocking) = 0;
  // `in` holds size() * count elements; rank r receives the reduction of block r in `out`.
  virtual Work reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                              Mode mode = Mode::Blocking) = 0;
  // `out` receives size() * count elements, rank r's contribution at block r.
  virtual Work allgather(const void* in, void* out, std::size_t count, DType dtype, Mode mode = Mode::Blocking) = 0;
  virtual Work broadcast(void* buf, std::size_t count, DType dtype, unsigned root, Mode mode = Mode::Blocking) = 0;
  virtual Work barrier(Mode mode = Mode::Blocking) = 0;
};

}  // namespace trainrt
