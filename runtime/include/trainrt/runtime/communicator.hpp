#pragma once
// One interface for every backend: the shared-memory host backend inside a node, Gloo across
// nodes, NCCL for device memory. Every rank must issue the same collectives in the same order.
//
// One failure policy for every backend:
//  - A blocking call (allreduce, ...) returns when the collective is done on this rank, or throws.
//  - An asynchronous call (allreduce_async, ...) returns a [[nodiscard]] Work; its wait() or
//    wait_for() throws the collective's error.
//  - Errors are typed (trainrt/error.hpp): a UsageError for a call this program got wrong (a bad
//    dtype, op, root or pointer, checked before anything starts; ranks that issued mismatched
//    collectives, detected where the backend can), a PeerError for a rank or transport that failed
//    (a dead peer, a timeout, a lost connection, an NCCL asynchronous error).
//  - A collective that failed once it had started leaves the communicator unusable: every later
//    call throws the same kind of error, naming the first failure, and the peers' waits end with a
//    PeerError (at once on shared memory; when connections close or time out on Gloo; NCCL aborts
//    its communicator). A UsageError caught before the start leaves the communicator usable.
//
// Device memory (the NCCL backend and device buckets) is stream-ordered: see nccl_communicator.hpp.
#include <chrono>
#include <cstddef>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainrt/dtype.hpp"

namespace trainrt {

// How a backend reports completion (a future for host threads, a CUDA event for NCCL).
class WorkState {
 public:
  virtual ~WorkState() = default;
  virtual bool ready() = 0;
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;  // throws the collective's error
};

// A collective in flight. Dropping one unwaited would drop its error with it, hence [[nodiscard]].
class [[nodiscard]] Work {
 public:
  Work() = default;  // already done
  explicit Work(std::shared_future<void> f);
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  // Blocks until done; rethrows the collective's error (PeerError, UsageError or Error).
  void wait() const;
  // True when done, without rethrowing: call wait() to learn whether it succeeded.
  bool test() const;
  // True when done within `timeout` (rethrows on failure); false on timeout.
  bool wait_for(std::chrono::milliseconds timeout) const;

 private:
  std::shared_ptr<WorkState> state_;
};

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // a peer silent this long is a PeerError
  // Shared-memory staging per rank: 1 MiB keeps the staged chunks in cache (measured best of
  // 128 KiB..4 MiB with trainrt-perf on a 2-core EPYC VM).
  std::size_t slot_bytes = std::size_t{1} << 20;
};

// For backends: Blocking runs the collective before returning (host backends on the caller's
// thread once earlier asynchronous work has drained; NCCL waits for its completion event); Async
// runs it on the communicator's progress thread (host) or leaves it enqueued on the stream (NCCL).
// Both keep issue order.
enum class Mode { Blocking, Async };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual unsigned rank() const = 0;
  virtual unsigned size() const = 0;
  virtual std::string backend() const = 0;

  // Blocking collectives. out may equal in (in place).
  void allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op);
  // `in` holds size() * count elements; rank r receives the reduction of block r in `out`.
  void reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op);
  // `out` receives size() * count elements, rank r's contribution at block r.
  void allgather(const void* in, void* out, std::size_t count, DType dtype);
  void broadcast(void* buf, std::size_t count, DType dtype, unsigned root);
  void barrier();
  // A personalised exchange of bytes in host memory (blocking only): this rank sends send_bytes[d]
  // bytes to each rank d, the pieces packed in rank order in `send`, and receives recv_bytes[s]
  // bytes from each rank s, packed in rank order in `recv` (its own piece included). Both spans
  // hold size() counts. Every rank checks every pair's sizes before any byte moves (shm, or the
  // transport where it can): a mismatch is a UsageError. The NCCL backend has no alltoallv (a
  // UsageError): it is for host-side data such as checkpoint restores.
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes);

  // The same, asynchronous: the buffers must stay untouched until the Work is done.
  [[nodiscard]] Work allreduce_async(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op);
  [[nodiscard]] Work reduce_scatter_async(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op);
  [[nodiscard]] Work allgather_async(const void* in, void* out, std::size_t count, DType dtype);
  [[nodiscard]] Work broadcast_async(void* buf, std::size_t count, DType dtype, unsigned root);
  [[nodiscard]] Work barrier_async();

  // Marks the communicator failed (a watchdog, a trainer giving up): later calls throw PeerError
  // naming `why`, and the peers' collectives end with a PeerError as after any failure.
  virtual void abort(const std::string& why) noexcept = 0;

 protected:
  // What each backend implements; arguments are already checked (UsageError otherwise).
  virtual Work start_allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op, Mode mode) = 0;
  virtual Work start_reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                                    Mode mode) = 0;
  virtual Work start_allgather(const void* in, void* out, std::size_t count, DType dtype, Mode mode) = 0;
  virtual Work start_broadcast(void* buf, std::size_t count, DType dtype, unsigned root, Mode mode) = 0;
  virtual Work start_barrier(Mode mode) = 0;
  virtual Work start_alltoallv(const void* send, std::vector<std::size_t> send_bytes, void* recv,
                               std::vector<std::size_t> recv_bytes, Mode mode) = 0;
};

}  // namespace trainrt
