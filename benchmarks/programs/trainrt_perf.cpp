// trainrt-perf: collective bandwidth in the manner of nccl-tests, with Open MPI measured in the
// same run, size by size, alternating (A B A B), so machine noise hits both alike.
//   mpirun -np 2 trainrt-perf -b 8 -e 128M -f 2 [-t allreduce|...|all] [-d f32|...|all] [-o sum|...|all]
//                             [-n 20] [-w 5] [-c 1] [-m 1] [-r 0] [-s SLOT]
// The collectives are a table (collectives.hpp): name, bus factor, buffer sizes, trainrt and MPI
// runs, and the exact value every output element must hold. Columns: size (bytes), count, time
// (us) / algbw / busbw (GB/s) / #wrong for trainrt, then the same for MPI (where MPI has the dtype
// and op; f16, bf16 and avg are trainrt's only), then trainrt's busbw over MPI's. #wrong counts
// output elements, summed over ranks, that differ from the exact expected value. algbw = size /
// time; busbw = algbw * 2(n-1)/n for allreduce, (n-1)/n for allgather and reduce_scatter, 1 for
// broadcast (nccl-tests' definitions).
// Exit status, as nccl-tests: 0 when every checked element of every case was right, 1 when any was
// wrong (trainrt's or MPI's), 2 for bad arguments or a failed collective.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

using namespace trainrt;
using namespace trainrt::perf;

namespace {

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mul = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : -1;
  if (mul < 0 || v < 0) throw Error(fmt::format("bad size '{}' (use e.g. 8, 4K, 128M, 1G)", s));
  return static_cast<std::size_t>(v * mul);
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
  int iters = 20, warmup = 5, check = 1, mpi = 1, corrupt = 0;
  unsigned root = 0;
  std::vector<const Collective*> colls{find_collective("allreduce")};
  std::vector<DType> dtypes{DType::F32};
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  std::size_t slot = CommOptions{}.slot_bytes;
};

int parse_int(const std::string& k, const std::string& v) {
  std::size_t pos = 0;
  int x = std::stoi(v, &pos);
  if (pos != v.size()) throw Error(fmt::format("option {} wants an integer, not '{}'", k, v));
  return x;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "-h" || k == "--help") {
      fmt::print(
          "usage: trainrt-perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1 check] [-m 0|1 compare MPI]\n"
          "                    [-t allreduce|reduce_scatter|allgather|broadcast|all] [-d f32|f64|f16|bf16|i32|i64|all]\n"
          "                    [-o sum|avg|min|max|all] [-r ROOT] [-s SHM_SLOT_BYTES]\n"
          "exit status: 0 every checked element right, 1 some wrong, 2 bad arguments or a failed collective\n");
      std::exit(0);
    }
    if (k == "--corrupt") {  // self-test of the exit status: rank 0 spoils one checked element
      a.corrupt = 1;
      continue;
    }
    if (i + 1 >= argc) throw Error(fmt::format("option {} needs a value", k));
    std::string v = argv[++i];
    if (k == "-b") a.begin = parse_size(v);
    else if (k == "-e") a.end = parse_size(v);
    else if (k == "-f") a.factor = std::stod(v);
    else if (k == "-n") a.iters = parse_int(k, v);
    else if (k == "-w") a.warmup = parse_int(k, v);
    else if (k == "-c") a.check = parse_int(k, v);
    else if (k == "-m") a.mpi = parse_int(k, v);
    else if (k == "-r") a.root = static_cast<unsigned>(parse_int(k, v));
    else if (k == "-s") a.slot = parse_size(v);
    else if (k == "-t") {
      a.colls.clear();
      for (const auto& c : collectives())
        if (v == "all" || v == c.name) a.colls.push_back(&c);
      if (a.colls.empty()) throw Error(fmt::format("unknown collective '{}'", v));
    } else if (k == "-d") {
      a.dtypes = v == "all" ? std::vector<DType>{DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}
                            : std::vector<DType>{parse_dtype(v)};
    } else if (k == "-o") {
      a.ops = v == "all" ? std::vector<ReduceOp>{ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}
                         : std::vector<ReduceOp>{parse_op(v)};
    } else
      throw Error(fmt::format("unknown option '{}' (see -h)", k));
  }
  if (a.factor <= 1 || a.iters < 1 || a.warmup < 0 || a.begin > a.end) throw Error("need -f > 1, -n >= 1, -w >= 0 and -b <= -e");
  if (a.end > (std::size_t{1} << 34)) throw Error("-e above 16G is more than one rank's buffers can hold here");
  return a;
}

long sum_over_ranks(long v) {
  long total = 0;
  MPI_Allreduce(&v, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

struct Totals {
  long wrong = 0, cases = 0;
  double busbw_sum = 0;
  long busbw_n = 0;
};

// One collective x dtype x op, every size: time trainrt and MPI alternately, then check both.
void run_case(Communicator& comm, const Args& a, const Collective& coll, DType dtype, ReduceOp op, Totals& totals) {
  const unsigned n = comm.size(), me = comm.rank();
  const std::size_t es = size_of(dtype);
  const auto mt = mpi_type(dtype);
  const auto mo = coll.reduces ? mpi_op(op) : std::optional<MPI_Op>(MPI_OP_NULL);
  const bool with_mpi = a.mpi && mt && mo;
  if (me == 0)
    fmt::print("# {} {}{}{}\n", coll.name, to_string(dtype), coll.reduces ? " " : "", coll.reduces ? to_string(op) : "");
  for (std::size_t bytes = std::max(a.begin, es); bytes <= a.end;
       bytes = std::max(bytes + es, static_cast<std::size_t>(bytes * a.factor))) {
    Case c;
    c.dtype = dtype;
    c.op = op;
    c.rank = me;
    c.n = n;
    c.root = a.root;
    // bytes = the per-rank buffer for allreduce/broadcast; the total gathered/scattered size otherwise.
    const std::size_t per_count = coll.size_elems(Case{1, dtype, op, me, n, a.root});  // 1, or n
    c.count = std::max<std::size_t>(1, bytes / es / per_count);
    std::vector<std::byte> in(coll.in_elems(c) * es + es), out(coll.out_elems(c) * es + es),
        mpi_out(coll.out_elems(c) * es + es);
    fill_input(coll, c, in.data(), out.data());
    fill_input(coll, c, in.data(), mpi_out.data());
    auto run_trainrt = [&] { coll.run(comm, c, in.data(), out.data()); };
    auto run_mpi = [&] {
      if (coll.run_mpi(c, in.data(), mpi_out.data(), *mt, *mo) != MPI_SUCCESS) throw Error("an MPI call failed");
    };
    auto timed = [&](auto&& fn, int iters) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) fn();
      double local = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      double slowest = 0;
      MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return slowest;
    };
    for (int i = 0; i < a.warmup; ++i) {
      run_trainrt();
      if (with_mpi) run_mpi();
    }
    // Two alternating halves each: A B A B.
    const int half = std::max(1, a.iters / 2);
    double t = 0, m = 0;
    if (with_mpi) {
      double t1 = timed(run_trainrt, half), m1 = timed(run_mpi, half), t2 = timed(run_trainrt, half),
             m2 = timed(run_mpi, half);
      t = (t1 + t2) / 2;
      m = (m1 + m2) / 2;
    } else {
      t = timed(run_trainrt, a.iters);
    }
    long wrong = -1, mpi_wrong = -1;
    if (a.check) {
      // Fresh buffers (outputs hold a value no collective produces), one more run each, every
      // element compared with the exact answer.
      fill_input(coll, c, in.data(), out.data());
      run_trainrt();
      if (a.corrupt && me == 0 && coll.out_elems(c) > 0) out[0] = static_cast<std::byte>(~static_cast<unsigned>(out[0]));
      wrong = sum_over_ranks(static_cast<long>(count_wrong(coll, c, out.data())));
      if (with_mpi) {
        fill_input(coll, c, in.data(), mpi_out.data());
        run_mpi();
        mpi_wrong = sum_over_ranks(static_cast<long>(count_wrong(coll, c, mpi_out.data())));
      }
      totals.wrong += wrong + std::max(0L, mpi_wrong);
    }
    ++totals.cases;
    const std::size_t size = coll.size_elems(c) * es;
    const double bus = coll.bus_factor(n);
    const double algbw = size / t / 1e3, mpi_algbw = with_mpi ? size / m / 1e3 : 0;
    totals.busbw_sum += algbw * bus;
    ++totals.busbw_n;
    auto num = [](long v) { return v < 0 ? std::string("-") : std::to_string(v); };
    if (me == 0) {
      if (with_mpi)
        fmt::print("  {:>10} {:>10}   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}   {:>6.2f}x\n",
                   size, c.count, t, algbw, algbw * bus, num(wrong), m, mpi_algbw, mpi_algbw * bus, num(mpi_wrong),
                   algbw / mpi_algbw);
      else
        fmt::print("  {:>10} {:>10}   {:>9.2f} {:>7.2f} {:>7.2f} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:>7}\n", size, c.count,
                   t, algbw, algbw * bus, num(wrong), "n/a", "", "", "", "");
    }
    if (bytes >= a.end) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  bool started = false;  // past argument parsing: ranks may be inside collectives
  try {
    Args a = parse(argc, argv);
    started = true;
    auto session = bootstrap::Session::open({std::chrono::seconds(120), true});
    CommOptions copts;
    copts.slot_bytes = a.slot;
    auto comm = make_shm_communicator(*session, copts);
    const unsigned n = comm->size(), me = comm->rank();
    if (a.root >= n) throw Error(fmt::format("-r {} outside a world of {}", a.root, n));
    const double mem = memcpy_gbs();
    if (me == 0) {
      fmt::print("# trainrt-perf on {} ranks (shm backend, {} KiB slots) vs Open MPI, iters {} warmup {} check {}\n", n,
                 a.slot >> 10, a.iters, a.warmup, a.check);
      fmt::print("# memcpy bandwidth of one rank, measured now: {:.2f} GB/s (256 MiB, best of 5)\n", mem);
      fmt::print("# {:>10} {:>10}   {:>9} {:>7} {:>7} {:>6}   {:>9} {:>7} {:>7} {:>6}   {:>7}\n", "size", "count",
                 "time(us)", "algbw", "busbw", "#wrong", "mpi(us)", "algbw", "busbw", "#wrong", "ratio");
    }
    Totals totals;
    for (const Collective* coll : a.colls)
      for (DType d : a.dtypes)
        for (ReduceOp op : coll->reduces ? a.ops : std::vector<ReduceOp>{ReduceOp::Sum}) run_case(*comm, a, *coll, d, op, totals);
    if (me == 0) {
      fmt::print("# Out of bounds values : {} {}\n", totals.wrong, totals.wrong ? "FAILED" : "OK");
      fmt::print("# Avg bus bandwidth    : {:.4f} GB/s over {} sizes\n",
                 totals.busbw_n ? totals.busbw_sum / totals.busbw_n : 0.0, totals.cases);
    }
    code = totals.wrong ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainrt-perf: {}\n", e.what());
    code = 2;
    // A rank that failed mid-run would leave the others waiting in MPI: end the job.
    if (started) MPI_Abort(MPI_COMM_WORLD, code);
  }
  MPI_Finalize();
  return code;
}
