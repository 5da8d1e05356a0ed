// The public collective calls: argument checks shared by every backend (a UsageError before
// anything starts, so the communicator stays usable), then the backend's start_*.
#include "trainrt/runtime/communicator.hpp"

#include <fmt/format.h>

#include <limits>

#include "trainrt/error.hpp"

namespace trainrt {
namespace {

// Bytes of `count` elements times `blocks`; a UsageError for an unknown dtype/op or an overflow.
std::size_t checked_bytes(const char* what, std::size_t count, std::size_t blocks, DType dtype) {
  const std::size_t es = size_of(dtype);
  if (es == 0) throw UsageError(fmt::format("{}: unknown dtype value {}", what, static_cast<int>(dtype)), "collective");
  if (blocks == 0 || count > std::numeric_limits<std::size_t>::max() / es / blocks)
    throw UsageError(fmt::format("{}: {} x {} elements of {} overflow the address space", what, blocks, count,
                                 to_string(dtype)),
                     "collective");
  return count * es * blocks;
}

void check_op(const char* what, ReduceOp op) {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::Max))
    throw UsageError(fmt::format("{}: unknown reduction value {}", what, static_cast<int>(op)), "collective");
}

void check_pointers(const char* what, std::size_t bytes, const void* in, const void* out) {
  if (bytes > 0 && (!in || !out))
    throw UsageError(fmt::format("{}: null {} buffer for {} bytes", what, in ? "output" : "input", bytes), "collective");
}

}  // namespace

Work Communicator::allreduce_async(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
  check_op("allreduce", op);
  check_pointers("allreduce", checked_bytes("allreduce", count, 1, dtype), in, out);
  return start_allreduce(in, out, count, dtype, op, Mode::Async);
}

Work Communicator::reduce_scatter_async(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
  check_op("reduce_scatter", op);
  check_pointers("reduce_scatter", checked_bytes("reduce_scatter", count, size(), dtype), in, out);
  return start_reduce_scatter(in, out, count, dtype, op, Mode::Async);
}

Work Communicator::allgather_async(const void* in, void* out, std::size_t count, DType dtype) {
  check_pointers("allgather", checked_bytes("allgather", count, size(), dtype), in, out);
  return start_allgather(in, out, count, dtype, Mode::Async);
}

Work Communicator::broadcast_async(void* buf, std::size_t count, DType dtype, unsigned root) {
  if (root >= size()) throw UsageError(fmt::format("broadcast root {} outside a world of {}", root, size()), "collective");
  check_pointers("broadcast", checked_bytes("broadcast", count, 1, dtype), buf, buf);
  return start_broadcast(buf, count, dtype, root, Mode::Async);
}

Work Communicator::barrier_async() { return start_barrier(Mode::Async); }

// Blocking calls: backends throw from start_* in Blocking mode; wait() is a second guarantee that
// no error can stay behind in a Work nobody looks at.
void Communicator::allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
  check_op("allreduce", op);
  check_pointers("allreduce", checked_bytes("allreduce", count, 1, dtype), in, out);
  start_allreduce(in, out, count, dtype, op, Mode::Blocking).wait();
}

void Communicator::reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op) {
  check_op("reduce_scatter", op);
  check_pointers("reduce_scatter", checked_bytes("reduce_scatter", count, size(), dtype), in, out);
  start_reduce_scatter(in, out, count, dtype, op, Mode::Blocking).wait();
}

void Communicator::allgather(const void* in, void* out, std::size_t count, DType dtype) {
  check_pointers("allgather", checked_bytes("allgather", count, size(), dtype), in, out);
  start_allgather(in, out, count, dtype, Mode::Blocking).wait();
}

void Communicator::broadcast(void* buf, std::size_t count, DType dtype, unsigned root) {
  if (root >= size()) throw UsageError(fmt::format("broadcast root {} outside a world of {}", root, size()), "collective");
  check_pointers("broadcast", checked_bytes("broadcast", count, 1, dtype), buf, buf);
  start_broadcast(buf, count, dtype, root, Mode::Blocking).wait();
}

void Communicator::barrier() { start_barrier(Mode::Blocking).wait(); }

void Communicator::alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                             std::span<const std::size_t> recv_bytes) {
  if (send_bytes.size() != size() || recv_bytes.size() != size())
    throw UsageError(fmt::format("alltoallv: {} send and {} receive sizes for a world of {}", send_bytes.size(),
                                 recv_bytes.size(), size()),
                     "collective");
  auto total = [](std::span<const std::size_t> sizes, const char* which) {
    std::size_t sum = 0;
    for (std::size_t n : sizes) {
      if (n > std::numeric_limits<std::size_t>::max() - sum)
        throw UsageError(fmt::format("alltoallv: the {} sizes overflow the address space", which), "collective");
      sum += n;
    }
    return sum;
  };
  check_pointers("alltoallv", total(send_bytes, "send"), send, send);
  check_pointers("alltoallv", total(recv_bytes, "receive"), recv, recv);
  start_alltoallv(send, {send_bytes.begin(), send_bytes.end()}, recv, {recv_bytes.begin(), recv_bytes.end()},
                  Mode::Blocking)
      .wait();
}

}  // namespace trainrt
