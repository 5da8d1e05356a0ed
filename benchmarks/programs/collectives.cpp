#include "collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "trainrt/kernels/half.hpp"
#include "common/typed_buffer.hpp"

namespace trainrt::perf {
namespace {

namespace k = trainrt::kernels;

// Rank r's value at element i: an integer in [-4, 4], exact in every dtype; sums of up to 64 ranks
// stay exact in bf16 (8 significant bits), 512 in f16.
double value(unsigned r, std::size_t i) { return static_cast<double>((i * 7 + r * 3) % 9) - 4.0; }

using trainrt::testing::load;
using trainrt::testing::store;

// The reduction of every rank's element i, as the dtype holds it.
double reduced(const Case& c, std::size_t i) {
  double acc = value(0, i);
  for (unsigned r = 1; r < c.n; ++r) {
    const double v = value(r, i);
    acc = c.op == ReduceOp::Min ? std::min(acc, v) : c.op == ReduceOp::Max ? std::max(acc, v) : acc + v;
  }
  if (c.op == ReduceOp::Avg) {
    switch (c.dtype) {
      case DType::I32: case DType::I64: acc = std::trunc(acc / c.n); break;
      case DType::F64: acc = acc / c.n; break;
      default: acc = static_cast<float>(acc) / static_cast<float>(c.n); break;  // f32, f16, bf16: in f32
    }
  }
  std::uint8_t tmp[8];
  store(tmp, 0, c.dtype, acc);
  return load(tmp, 0, c.dtype);
}

int mpi_count(std::size_t n) { return static_cast<int>(n); }  // sizes are bounded by -e (< 2^31 elements)

const Collective kTable[] = {
    {"allreduce", true, [](unsigned n) { return 2.0 * (n - 1) / n; },
     [](const Case& c) { return c.count; }, [](const Case& c) { return c.count; },
     [](const Case& c) { return c.count; },
     [](Communicator& comm, const Case& c, void* in, void* out) { comm.allreduce(in, out, c.count, c.dtype, c.op); },
     [](const Case& c, const void* in, void* out, MPI_Datatype t, MPI_Op op) {
       return MPI_Allreduce(in, out, mpi_count(c.count), t, op, MPI_COMM_WORLD);
     },
     [](const Case& c, std::size_t i) { return reduced(c, i); }, false},
    {"reduce_scatter", true, [](unsigned n) { return double(n - 1) / n; },
     [](const Case& c) { return c.count * c.n; }, [](const Case& c) { return c.count; },
     [](const Case& c) { return c.count * c.n; },
     [](Communicator& comm, const Case& c, void* in, void* out) {
       comm.reduce_scatter(in, out, c.count, c.dtype, c.op);
     },
     [](const Case& c, const void* in, void* out, MPI_Datatype t, MPI_Op op) {
       return MPI_Reduce_scatter_block(in, out, mpi_count(c.count), t, op, MPI_COMM_WORLD);
     },
     [](const Case& c, std::size_t i) { return reduced(c, c.rank * c.count + i); }, false},
    {"allgather", false, [](unsigned n) { return double(n - 1) / n; },
     [](const Case& c) { return c.count; }, [](const Case& c) { return c.count * c.n; },
     [](const Case& c) { return c.count * c.n; },
     [](Communicator& comm, const Case& c, void* in, void* out) { comm.allgather(in, out, c.count, c.dtype); },
     [](const Case& c, const void* in, void* out, MPI_Datatype t, MPI_Op) {
       return MPI_Allgather(in, mpi_count(c.count), t, out, mpi_count(c.count), t, MPI_COMM_WORLD);
     },
     // Block r is rank r's input, which is value(r, j) at its element j.
     [](const Case& c, std::size_t i) {
       std::uint8_t tmp[8];
       store(tmp, 0, c.dtype, value(static_cast<unsigned>(i / c.count), i % c.count));
       return load(tmp, 0, c.dtype);
     },
     false},
    {"broadcast", false, [](unsigned) { return 1.0; },
     [](const Case& c) { return c.count; }, [](const Case& c) { return c.count; },
     [](const Case& c) { return c.count; },
     [](Communicator& comm, const Case& c, void*, void* out) { comm.broadcast(out, c.count, c.dtype, c.root); },
     [](const Case& c, const void*, void* out, MPI_Datatype t, MPI_Op) {
       return MPI_Bcast(out, mpi_count(c.count), t, static_cast<int>(c.root), MPI_COMM_WORLD);
     },
     [](const Case& c, std::size_t i) {
       std::uint8_t tmp[8];
       store(tmp, 0, c.dtype, value(c.root, i));
       return load(tmp, 0, c.dtype);
     },
     true},
};

}  // namespace

std::span<const Collective> collectives() { return kTable; }

const Collective* find_collective(std::string_view name) {
  for (const auto& c : kTable)
    if (name == c.name) return &c;
  return nullptr;
}

void fill_input(const Collective& coll, const Case& c, void* in, void* out) {
  const std::size_t n_in = coll.in_elems(c);
  for (std::size_t i = 0; i < n_in; ++i) store(in, i, c.dtype, value(c.rank, i));
  // Outputs start as something no collective produces (inputs are within [-4, 4]), so an element
  // left unwritten is counted wrong. Broadcast's buffer holds the root's data on the root only.
  const std::size_t n_out = coll.out_elems(c);
  for (std::size_t i = 0; i < n_out; ++i) store(out, i, c.dtype, 99.0);
  if (coll.in_place && c.rank == c.root) std::memcpy(out, in, n_out * size_of(c.dtype));
}

std::size_t count_wrong(const Collective& coll, const Case& c, const void* out) {
  std::size_t wrong = 0;
  const std::size_t n_out = coll.out_elems(c);
  for (std::size_t i = 0; i < n_out; ++i) wrong += load(out, i, c.dtype) != coll.expected(c, i);
  return wrong;
}

std::optional<MPI_Datatype> mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: return std::nullopt;
  }
}

std::optional<MPI_Op> mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    default: return std::nullopt;
  }
}

}  // namespace trainrt::perf
