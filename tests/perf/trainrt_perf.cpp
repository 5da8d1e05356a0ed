// trainrt-perf: collective bandwidth in the manner of nccl-tests, with Open MPI measured in the
// same run, size by size, alternating (A B A B), so machine noise hits both alike.
//   mpirun -np 2 trainrt-perf -b 8 -e 128M -f 2 [-o sum] [-d f32] [-n 20] [-w 5] [-c 1] [-t allreduce]
// Columns: size (bytes), count, time (us) / algbw / busbw (GB/s) / #wrong for trainrt, then the same
// for MPI, then trainrt's busbw over MPI's. trainrt's #wrong counts elements that differ from the
// exact answer (f32 sum); MPI's #wrong counts bytes where trainrt's and MPI's results differ. algbw = size / time; busbw = algbw * 2(n-1)/n for
// allreduce, (n-1)/n for allgather and reduce_scatter, 1 for broadcast (nccl-tests' definitions).
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

using namespace trainrt;

namespace {

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mul = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : -1;
  if (mul < 0 || v < 0) throw Error(fmt::format("bad size '{}' (use e.g. 8, 4K, 128M, 1G)", s));
  return static_cast<std::size_t>(v * mul);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: throw Error(fmt::format("MPI has no {} reduction; use f32, f64, i32 or i64", to_string(t)));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Min: return MPI_MIN;
    case ReduceOp::Max: return MPI_MAX;
    default: throw Error("MPI has no avg reduction; use sum, min or max");
  }
}

double memcpy_gbs() {
  const std::size_t n = 256u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return n / best / 1e9;
}

struct Args {
  std::size_t begin = 8, end = 128u << 20;
  double factor = 2;
  int iters = 20, warmup = 5, check = 1;
  std::string collective = "allreduce";
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t slot = CommOptions{}.slot_bytes;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      fmt::print("usage: trainrt-perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [-t allreduce|allgather|broadcast|reduce_scatter] [-o sum|min|max] [-d f32|f64|i32|i64] [-s SHM_SLOT_BYTES]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw Error(fmt::format("option {} needs a value", k));
    std::string v = argv[++i];
    if (k == "-b") a.begin = parse_size(v);
    else if (k == "-e") a.end = parse_size(v);
    else if (k == "-f") a.factor = std::stod(v);
    else if (k == "-n") a.iters = std::stoi(v);
    else if (k == "-w") a.warmup = std::stoi(v);
    else if (k == "-c") a.check = std::stoi(v);
    else if (k == "-t") a.collective = v;
    else if (k == "-o") a.op = parse_op(v);
    else if (k == "-d") a.dtype = parse_dtype(v);
    else if (k == "-s") a.slot = parse_size(v);
    else throw Error(fmt::format("unknown option '{}' (see -h)", k));
  }
  if (a.factor <= 1 || a.iters < 1 || a.begin > a.end) throw Error("need -f > 1, -n >= 1 and -b <= -e");
  if (a.collective != "allreduce" && a.collective != "allgather" && a.collective != "broadcast" &&
      a.collective != "reduce_scatter")
    throw Error(fmt::format("unknown collective '{}'", a.collective));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    Args a = parse(argc, argv);
    auto session = bootstrap::Session::open({std::chrono::seconds(120), true});
    CommOptions copts;
    copts.slot_bytes = a.slot;
    auto comm = make_shm_communicator(*session, copts);
    const unsigned n = comm->size(), me = comm->rank();
    const std::size_t es = size_of(a.dtype);
    const bool ar = a.collective == "allreduce", ag = a.collective == "allgather", rs = a.collective == "reduce_scatter";
    const double bus = ar ? 2.0 * (n - 1) / n : (ag || rs) ? double(n - 1) / n : 1.0;
    MPI_Datatype mt = mpi_type(a.dtype);
    MPI_Op mo = mpi_op(a.op);
    double mem = memcpy_gbs();
    if (me == 0) {
      fmt::print("# trainrt-perf {} {} {} on {} ranks (shm backend, {} KiB slots) vs Open MPI, iters {} warmup {}\n",
                 a.collective, to_string(a.dtype), to_string(a.op), n, a.slot >> 10, a.iters, a.warmup);
      fmt::print("# memcpy bandwidth of one rank, measured now: {:.2f} GB/s (256 MiB, best of 5)\n", mem);
      fmt::print("# {:>10} {:>10}   {:>9} {:>7} {:>7} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:>7}\n", "size", "count",
                 "time(us)", "algbw", "busbw", "#wrong", "mpi(us)", "algbw", "busbw", "#wrong", "ratio");
    }
    for (std::size_t bytes = std::max(a.begin, es); bytes <= a.end;
         bytes = std::max(bytes + es, static_cast<std::size_t>(bytes * a.factor))) {
      // bytes = the per-rank buffer for allreduce/broadcast; the total gathered/scattered size otherwise.
      std::size_t count = (ag || rs) ? std::max<std::size_t>(1, bytes / es / n) : bytes / es;
      std::size_t in_count = rs ? count * n : count, out_count = ag ? count * n : count;
      std::vector<float> pattern;  // f32 inputs are small integers: every rank order sums exactly
      std::vector<std::byte> in(in_count * es), out(out_count * es), mpi_out(out_count * es);
      if (a.dtype == DType::F32) {
        auto* f = reinterpret_cast<float*>(in.data());
        for (std::size_t i = 0; i < in_count; ++i) f[i] = static_cast<float>((i + me) % 17);
      } else {
        std::memset(in.data(), static_cast<int>(me + 1), in.size());
      }
      auto run_trainrt = [&] {
        if (ar) comm->allreduce(in.data(), out.data(), count, a.dtype, a.op).wait();
        else if (ag) comm->allgather(in.data(), out.data(), count, a.dtype).wait();
        else if (rs) comm->reduce_scatter(in.data(), out.data(), count, a.dtype, a.op).wait();
        else comm->broadcast(out.data(), count, a.dtype, 0).wait();
      };
      auto run_mpi = [&] {
        if (ar) MPI_Allreduce(in.data(), mpi_out.data(), static_cast<int>(count), mt, mo, MPI_COMM_WORLD);
        else if (ag) MPI_Allgather(in.data(), static_cast<int>(count), mt, mpi_out.data(), static_cast<int>(count), mt, MPI_COMM_WORLD);
        else if (rs) MPI_Reduce_scatter_block(in.data(), mpi_out.data(), static_cast<int>(count), mt, mo, MPI_COMM_WORLD);
        else MPI_Bcast(mpi_out.data(), static_cast<int>(count), mt, 0, MPI_COMM_WORLD);
      };
      auto timed = [&](auto&& fn) {
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < a.iters; ++i) fn();
        double local = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / a.iters;
        double slowest = 0;
        MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        return slowest;
      };
      for (int i = 0; i < a.warmup; ++i) run_trainrt(), run_mpi();
      // Two alternating halves each: A B A B.
      int half = std::max(1, a.iters / 2);
      Args saved = a;
      a.iters = half;
      double t1 = timed(run_trainrt), m1 = timed(run_mpi), t2 = timed(run_trainrt), m2 = timed(run_mpi);
      a = saved;
      double t = (t1 + t2) / 2, m = (m1 + m2) / 2;
      long disagree = 0, ours_wrong = 0;  // bytes differing from MPI's result; elements differing from the exact sum
      if (a.check) {
        if (!ar && !ag && !rs && me == 0) {
          std::memcpy(out.data(), in.data(), out.size());
          std::memcpy(mpi_out.data(), in.data(), out.size());
        }
        run_trainrt();
        run_mpi();
        // Both must agree with each other; for f32 sums both are exact, so agreement is correctness.
        for (std::size_t i = 0; i < out.size(); ++i) disagree += out[i] != mpi_out[i];
        long total = 0;
        MPI_Allreduce(&disagree, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        disagree = total;
        if (a.dtype == DType::F32 && ar && a.op == ReduceOp::Sum) {
          const auto* f = reinterpret_cast<const float*>(out.data());
          for (std::size_t i = 0; i < count; ++i) {
            float want = 0;
            for (unsigned r = 0; r < n; ++r) want += static_cast<float>((i + r) % 17);
            ours_wrong += f[i] != want;
          }
          MPI_Allreduce(MPI_IN_PLACE, &ours_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
      }
      std::size_t size = (ag ? out_count : in_count) * es;
      double algbw = size / t / 1e3, mpi_algbw = size / m / 1e3;
      if (me == 0)
        fmt::print("  {:>10} {:>10}   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}   {:>6.2f}x\n", size,
                   count, t, algbw, algbw * bus, ours_wrong, m, mpi_algbw, mpi_algbw * bus, disagree, algbw / mpi_algbw);
      if (bytes >= a.end) break;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainrt-perf: {}\n", e.what());
    code = 2;
  }
  MPI_Finalize();
  return code;
}
