#pragma once
// trainrt-perf's table of collectives, in the manner of nccl-tests' one file per collective: each
// row says how its buffers are sized, how busbw is derived from algbw, how inputs are filled, how
// trainrt and MPI run it, and what every output element must be. Inputs are small integers, so
// every summation order is exact and the expected value is exact for every dtype (avg: the sum
// divided once, in f32 for f16/bf16 as the host backends do; integers truncate).
#include <mpi.h>

#include <cstddef>
#include <optional>
#include <span>

#include "trainrt/runtime/communicator.hpp"

namespace trainrt::perf {

struct Case {
  std::size_t count = 0;  // elements per rank block (nccl-tests' count)
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  unsigned rank = 0, n = 1, root = 0;
};

struct Collective {
  const char* name;
  bool reduces;                                       // takes a ReduceOp
  double (*bus_factor)(unsigned n);                   // busbw = algbw * bus_factor (nccl-tests)
  std::size_t (*in_elems)(const Case&);               // this rank's input buffer
  std::size_t (*out_elems)(const Case&);              // this rank's output buffer
  std::size_t (*size_elems)(const Case&);             // nccl-tests' "size" column, in elements
  void (*run)(Communicator&, const Case&, void* in, void* out);
  int (*run_mpi)(const Case&, const void* in, void* out, MPI_Datatype, MPI_Op);
  double (*expected)(const Case&, std::size_t i);     // what out[i] must hold on this rank
  bool in_place;                                      // broadcast: `out` is the buffer, `in` its source
};

std::span<const Collective> collectives();
const Collective* find_collective(std::string_view name);

// Fills this rank's input (and, in place, the output) for `c`.
void fill_input(const Collective& coll, const Case& c, void* in, void* out);
// Elements of `out` that differ from the expected values.
std::size_t count_wrong(const Collective& coll, const Case& c, const void* out);

// MPI's type and op for a case; nullopt where MPI has none (f16, bf16, avg).
std::optional<MPI_Datatype> mpi_type(DType t);
std::optional<MPI_Op> mpi_op(ReduceOp op);

}  // namespace trainrt::perf
