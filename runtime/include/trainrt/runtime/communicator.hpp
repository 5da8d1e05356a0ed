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

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_future<void> f) : future_(std::move(f)) {}
  // Blocks until done; rethrows the collective's trainrt::Error.
  void wait() const;
  // True when done (without rethrowing).
  bool test() const;
  // True when done within `timeout` (rethrows on failure); false on timeout.
  bool wait_for(std::chrono::milliseconds timeout) const;

 private:
  std::shared_future<void> future_;
};

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // a peer silent this long is an error
  std::size_t slot_bytes = std::size_t{4} << 20;                // shared-memory staging per rank
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
