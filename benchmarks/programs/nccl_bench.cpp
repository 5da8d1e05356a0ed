// nccl-bench: NCCL through the runtime on the GPU(s) at hand; benchmarks/nccl_torch.py measures
// torch.distributed the same way and prints the ratios (docs/benchmarks-gpu.md: commands, columns).
//   nccl-bench [-b 8] [-e 1G] [-f 8] [-n 20] [-w 5] [-r 5] [-t allreduce,reduce_scatter,allgather,
//              broadcast,barrier] [-d f32,bf16] [-m blocking,async] [--init-only] [--corrupt]
// One process needs no launcher (the one-process bootstrap); under mpirun/srun --mpi=pmix each rank
// uses device local_rank % device count (NCCL refuses two ranks on one GPU).
// (a) Time to a ready communicator, host wall clock, slowest rank: the CUDA context alone first
//     (cudaSetDevice + cudaFree(0)); trainrt::init(DeviceComm::Required), the process's first NCCL
//     init; its first 1-element allreduce + stream sync. Then -r times make_nccl_communicator over
//     the same Session + first allreduce (medians). Lines "init <key> <ms>".
// (b) Collectives, nccl-tests style: size (B) = count x element (allreduce, broadcast), ranks x
//     count x element (reduce_scatter's input, allgather's output); time per op = host wall clock
//     from a synced stream over `iters` ops to the stream synced again (blocking: every call waits
//     on the host, as the runtime's blocking calls do; async: all issued, then every Work waited),
//     slowest rank. algbw = size / time; busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n
//     (reduce_scatter, allgather), 1 (broadcast), as nccl-tests. allreduce and broadcast run in
//     place (torch's all_reduce can only). Iterations fall to 4 GiB / size (at least 5), warm-up to
//     2 from 256 MiB. Every result is checked after timing, every element bit for bit against a
//     host reference (inputs are integers in [-4, 4]: exact in f32 and bf16 in any order); an
//     in-place allreduce at world > 1 grows each iteration, so it is refilled and run once more.
// Exit status (as nccl-tests): 0 all right; 1 a wrong element or any CUDA/NCCL/runtime error; 2 bad
// arguments; 77 no CUDA driver or device ("# no CUDA device: ... not measured").
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu_presence.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

using namespace trainrt;
using Clock = std::chrono::steady_clock;

namespace {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw CudaError(fmt::format("{}: {} ({})", what, cudaGetErrorName(rc), cudaGetErrorString(rc)));
}
#define CK(call) ck((call), #call)

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast, Barrier };
constexpr const char* kCollNames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "barrier"};

struct Args {
  std::size_t begin = 8, end = std::size_t{1} << 30;
  double factor = 8;
  int iters = 20, warmup = 5, repeats = 5;
  std::vector<Coll> colls{Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast, Coll::Barrier};
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  std::vector<bool> async{false, true};
  bool init_only = false, corrupt = false;
};

struct BadArgs : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw BadArgs(fmt::format("bad size '{}' (use e.g. 8, 4K, 128M, 1G)", s));
  }
  const std::string unit = s.substr(pos);
  const double mul = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : -1;
  if (mul < 0 || v < 1 || v * mul > 16.0 * (1 << 30)) throw BadArgs(fmt::format("bad size '{}' (1 B .. 16G)", s));
  return static_cast<std::size_t>(v * mul);
}

int parse_int(const std::string& k, const std::string& v, int lo, int hi) {
  std::size_t pos = 0;
  int x = 0;
  try {
    x = std::stoi(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size() || x < lo || x > hi) throw BadArgs(fmt::format("{} wants an integer in {}..{}, not '{}'", k, lo, hi, v));
  return x;
}

// A comma-separated list of names, each looked up in `table`.
template <typename T>
std::vector<T> pick(const std::string& v, const char* opt, std::initializer_list<std::pair<const char*, T>> table) {
  std::vector<T> out;
  for (std::size_t at = 0; at <= v.size();) {
    const std::size_t end = std::min(v.find(',', at), v.size());
    const std::string name = v.substr(at, end - at);
    auto it = std::find_if(table.begin(), table.end(), [&](const auto& e) { return name == e.first; });
    if (it == table.end()) throw BadArgs(fmt::format("{}: unknown value '{}'", opt, name));
    out.push_back(it->second);
    at = end + 1;
  }
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--init-only") { a.init_only = true; continue; }
    if (k == "--corrupt") { a.corrupt = true; continue; }  // flips one element read back: must exit 1
    if (k == "-h" || k == "--help") throw BadArgs("usage: see the comment at the top of benchmarks/programs/nccl_bench.cpp");
    if (i + 1 >= argc) throw BadArgs(fmt::format("option {} needs a value", k));
    const std::string v = argv[++i];
    if (k == "-b") a.begin = parse_size(v);
    else if (k == "-e") a.end = parse_size(v);
    else if (k == "-f") a.factor = parse_int(k, v, 2, 1024);
    else if (k == "-n") a.iters = parse_int(k, v, 1, 100000);
    else if (k == "-w") a.warmup = parse_int(k, v, 0, 100000);
    else if (k == "-r") a.repeats = parse_int(k, v, 0, 1000);
    else if (k == "-t")
      a.colls = pick<Coll>(v, "-t", {{"allreduce", Coll::AllReduce}, {"reduce_scatter", Coll::ReduceScatter},
                                     {"allgather", Coll::AllGather}, {"broadcast", Coll::Broadcast}, {"barrier", Coll::Barrier}});
    else if (k == "-d") a.dtypes = pick<DType>(v, "-d", {{"f32", DType::F32}, {"bf16", DType::BF16}});
    else if (k == "-m") a.async = pick<bool>(v, "-m", {{"blocking", false}, {"async", true}});
else throw BadArgs(fmt::format("unknown option '{}'", k));
  }
  if (a.begin > a.end) throw BadArgs("-b is larger than -e");
  return a;
}

// The launcher's local rank, read before the bootstrap so the CUDA context can be timed first.
unsigned env_local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char* v = std::getenv(name); v && *v) return static_cast<unsigned>(std::strtoul(v, nullptr, 10) % 4096);
  return 0;
}

// Rank r's input at global element g: an integer in [-4, 4], so every sum of up to 64 ranks is
// exact in f32 and bf16 and every summation order gives the same bits.
float value(unsigned r, std::size_t g) { return static_cast<float>(static_cast<int>((g + 3 * std::size_t{r}) % 9) - 4); }

void put(void* p, std::size_t i, DType t, float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if (t == DType::F32) std::memcpy(static_cast<unsigned char*>(p) + 4 * i, &bits, 4);
  else {  // bf16: the top half of an f32 that is a small integer, exactly
    const auto h = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(static_cast<unsigned char*>(p) + 2 * i, &h, 2);
  }
}

using Period = std::vector<float>;  // 9 values: element i is period[(phase + i) % 9]
Period rank_period(unsigned r) {
  Period p(9);
  for (std::size_t j = 0; j < 9; ++j) p[j] = value(r, j);
  return p;
}
Period sum_period(unsigned n) {
  Period p(9, 0.f);
  for (unsigned r = 0; r < n; ++r)
    for (std::size_t j = 0; j < 9; ++j) p[j] += value(r, j);
  return p;
}

// Nine elements by hand, then doubling copies: each copy lands at a multiple of 9 elements, where
// the pattern starts over, so a 1 GiB buffer fills at memcpy speed.
void fill(void* dst, std::size_t count, DType t, const Period& period, std::size_t phase) {
  const std::size_t es = size_of(t);
  std::size_t done = std::min<std::size_t>(count, 9);
  for (std::size_t i = 0; i < done; ++i) put(dst, i, t, period[(phase + i) % 9]);
  auto* b = static_cast<unsigned char*>(dst);
  while (done < count) {
    const std::size_t len = std::min(done, count - done);
    std::memcpy(b + done * es, b, len * es);
    done += len;
  }
}

std::size_t count_wrong(const void* got, const void* want, std::size_t count, DType t) {
  const std::size_t es = size_of(t);
  if (std::memcmp(got, want, count * es) == 0) return 0;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i)
    bad += std::memcmp(static_cast<const char*>(got) + i * es, static_cast<const char*>(want) + i * es, es) != 0;
  return bad;
}

// cudaMalloc'd (device) or cudaMallocHost'd (pinned host) bytes, freed by the matching call.
template <cudaError_t (*Alloc)(void**, std::size_t), cudaError_t (*Free)(void*)>
struct CudaBuf {
  void* p = nullptr;
  explicit CudaBuf(std::size_t bytes) { ck(Alloc(&p, std::max<std::size_t>(bytes, 16)), "cudaMalloc/cudaMallocHost"); }
  ~CudaBuf() { (void)Free(p); }
  CudaBuf(const CudaBuf&) = delete; void operator=(const CudaBuf&) = delete;
};
cudaError_t device_alloc(void** p, std::size_t n) { return cudaMalloc(p, n); }
cudaError_t host_alloc(void** p, std::size_t n) { return cudaMallocHost(p, n); }
using DeviceBuf = CudaBuf<device_alloc, cudaFree>;
using PinnedBuf = CudaBuf<host_alloc, cudaFreeHost>;

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
  Stream(const Stream&) = delete; void operator=(const Stream&) = delete;
};

// The slowest rank's time, the sum of every rank's wrong elements (host communicator).
double slowest(Runtime& rt, double mine) {
  if (rt.size > 1) rt.host->allreduce(&mine, &mine, 1, DType::F64, ReduceOp::Max);
  return mine;
}
std::size_t summed(Runtime& rt, std::size_t mine) {
  auto v = static_cast<std::int64_t>(mine);
  if (rt.size > 1) rt.host->allreduce(&v, &v, 1, DType::I64, ReduceOp::Sum);
  return static_cast<std::size_t>(v);
}

struct Bench {
  Runtime& rt;
  Communicator& comm;
  cudaStream_t s;
  const Args& args;
  DeviceBuf in, out;
  PinnedBuf host;
  std::unique_ptr<unsigned char[]> want;
  std::size_t results = 0, wrong_total = 0;
  bool corrupted = false;

  Bench(Runtime& r, cudaStream_t stream, const Args& a, std::size_t max_bytes)
      : rt(r), comm(*r.device), s(stream), args(a), in(max_bytes), out(max_bytes), host(max_bytes),
        want(new unsigned char[std::max<std::size_t>(max_bytes, 16)]) {}

  void upload(void* dev, std::size_t bytes) {
    CK(cudaMemcpyAsync(dev, host.p, bytes, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));  // the host buffer is refilled next
  }

  // Fills this rank's input and poisons the output (0xff: NaN in both dtypes, never a result).
  // Broadcast from root 0: the other ranks start from 100, which no result holds.
  void prepare(Coll c, std::size_t count, DType t) {
    if (c == Coll::Barrier) return;
    const std::size_t es = size_of(t), n = rt.size, elems = c == Coll::ReduceScatter ? n * count : count;
    const bool out_of_place = c == Coll::ReduceScatter || c == Coll::AllGather;
    const unsigned whose = c == Coll::Broadcast ? 0 : rt.rank;
    fill(host.p, elems, t, c == Coll::Broadcast && rt.rank != 0 ? Period(9, 100.f) : rank_period(whose), 0);
    upload(out_of_place ? in.p : out.p, elems * es);
    if (out_of_place) CK(cudaMemsetAsync(out.p, 0xff, (c == Coll::AllGather ? n * count : count) * es, s));
    CK(cudaStreamSynchronize(s));
  }

  Work issue(Coll c, std::size_t count, DType t, bool async) {
    constexpr ReduceOp sum = ReduceOp::Sum;
    switch (c) {
      case Coll::AllReduce:
        if (async) return comm.allreduce_async(out.p, out.p, count, t, sum);
        comm.allreduce(out.p, out.p, count, t, sum);
        break;
      case Coll::ReduceScatter:
        if (async) return comm.reduce_scatter_async(in.p, out.p, count, t, sum);
        comm.reduce_scatter(in.p, out.p, count, t, sum);
        break;
      case Coll::AllGather:
        if (async) return comm.allgather_async(in.p, out.p, count, t);
        comm.allgather(in.p, out.p, count, t);
        break;
      case Coll::Broadcast:
        if (async) return comm.broadcast_async(out.p, count, t, 0);
        comm.broadcast(out.p, count, t, 0);
        break;
      case Coll::Barrier:
        if (async) return comm.barrier_async();
        comm.barrier();
        break;
    }
    return Work{};  // a blocking call is done when it returns
  }

  // Seconds per operation: `iters` operations between two stream syncs, host clock.
  double timed(Coll c, std::size_t count, DType t, bool async, int iters, int warmup) {
    for (int i = 0; i < warmup; ++i) issue(c, count, t, async).wait();
    CK(cudaStreamSynchronize(s));
    const auto t0 = Clock::now();
    if (!async) {
      for (int i = 0; i < iters; ++i) issue(c, count, t, false).wait();
    } else {
      std::vector<Work> works;
      works.reserve(static_cast<std::size_t>(iters));
      for (int i = 0; i < iters; ++i) works.push_back(issue(c, count, t, true));
      for (const Work& w : works) w.wait();
    }
    CK(cudaStreamSynchronize(s));
    return ms_since(t0) / 1e3 / iters;
  }

  // Wrong elements of this rank's output against the host reference.
  std::size_t check(Coll c, std::size_t count, DType t) {
    const std::size_t es = size_of(t), n = rt.size;
    if (c == Coll::Barrier) return 0;
    if (c == Coll::AllReduce && n > 1) {  // in place: the timed loop summed sums; one fresh run
      prepare(c, count, t);
      issue(c, count, t, false).wait();
    }
    const std::size_t elems = c == Coll::AllGather ? n * count : count;
    CK(cudaMemcpyAsync(host.p, out.p, elems * es, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    if (args.corrupt && !corrupted && elems > 0) {
      static_cast<unsigned char*>(host.p)[0] ^= 0x40;
      corrupted = true;
    }
    switch (c) {
      case Coll::AllReduce: fill(want.get(), count, t, sum_period(rt.size), 0); break;
      case Coll::ReduceScatter: fill(want.get(), count, t, sum_period(rt.size), (rt.rank * count) % 9); break;
      case Coll::AllGather:
        for (unsigned r = 0; r < n; ++r) fill(want.get() + r * count * es, count, t, rank_period(r), 0);
        break;
      case Coll::Broadcast: fill(want.get(), count, t, rank_period(0), 0); break;
      case Coll::Barrier: break;
    }
    return count_wrong(host.p, want.get(), elems, t);
  }

  void row(Coll c, DType t, bool async, std::size_t size) {
    const std::size_t es = size_of(t), n = rt.size;
    const bool per_rank_block = c == Coll::ReduceScatter || c == Coll::AllGather;
    const std::size_t count = c == Coll::Barrier ? 0 : per_rank_block ? size / (es * n) : size / es;
    if (c != Coll::Barrier && count == 0) return;  // nccl-tests skips sizes below one element per rank
    const std::size_t bytes = count * es * (per_rank_block ? n : 1);
    const std::size_t by_budget = std::max<std::size_t>((std::size_t{4} << 30) / std::max<std::size_t>(bytes, 1), 5);
    const int iters = static_cast<int>(std::min<std::size_t>(by_budget, static_cast<std::size_t>(args.iters)));
    const int warmup = bytes >= (std::size_t{256} << 20) ? std::min(args.warmup, 2) : args.warmup;
    prepare(c, count, t);
    const double sec = slowest(rt, timed(c, count, t, async, iters, warmup));
    const std::size_t bad = summed(rt, check(c, count, t));
    ++results;
    wrong_total += bad;
    const double algbw = bytes / sec / 1e9;
    const double factor = c == Coll::AllReduce ? 2.0 * (n - 1) / n
                          : per_rank_block     ? double(n - 1) / n
                                               : 1.0;
    if (rt.rank != 0) return;
    const bool bar = c == Coll::Barrier;
    fmt::print("{:<15} {:<5} {:<8} {:>11} {:>11} {:>11.2f} {:>11} {:>11} {:>7}\n", kCollNames[int(c)],
               bar ? "-" : t == DType::F32 ? "f32" : "bf16", async ? "async" : "blocking", bytes, count, sec * 1e6,
               bar ? "-" : fmt::format("{:.2f}", algbw), bar ? "-" : fmt::format("{:.2f}", algbw * factor), bad);
  }
};

std::string nccl_version() {
  using Fn = int (*)(int*);  // ncclResult_t ncclGetVersion(int*), from the NCCL libtrainrt loaded
  auto fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  int v = 0;
  if (!fn || fn(&v) != 0) return "unknown";
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(const Args& args) {
  if (const int rc = testing::bench_gpu_presence_exit_code("NCCL init and collectives"); rc >= 0) return rc;
  // (a) The CUDA context first and alone, so that what follows is the runtime's and NCCL's.
  int devices = 0;
  CK(cudaGetDeviceCount(&devices));
  const int dev = static_cast<int>(env_local_rank() % static_cast<unsigned>(devices));
  auto t0 = Clock::now();
  CK(cudaSetDevice(dev));
  CK(cudaFree(nullptr));
  const double ctx_ms = ms_since(t0);
  Stream stream;  // outlives the runtime, whose communicators order after it
  cudaStream_t s = stream.s;
  DeviceBuf one(sizeof(float));
  CK(cudaMemsetAsync(one.p, 0, sizeof(float), s));
  CK(cudaStreamSynchronize(s));

  InitOptions opts;
  opts.nccl = DeviceComm::Required, opts.bootstrap.quiet = true;
  t0 = Clock::now();
  auto rt = trainrt::init(opts);
  double init_ms = ms_since(t0);
  set_nccl_stream(*rt->device, s);
  t0 = Clock::now();
  rt->device->allreduce(one.p, one.p, 1, DType::F32, ReduceOp::Sum);
  CK(cudaStreamSynchronize(s));
  double first_ms = ms_since(t0);

  std::vector<double> warm_init, warm_first, warm_total;
  for (int k = 0; k < args.repeats; ++k) {
    NcclOptions no{.device = rt->cuda_device, .stream = s};
    t0 = Clock::now();
    auto c = make_nccl_communicator(*rt->session, no);
    const double a = ms_since(t0);
    t0 = Clock::now();
    c->allreduce(one.p, one.p, 1, DType::F32, ReduceOp::Sum);
    CK(cudaStreamSynchronize(s));
    const double b = ms_since(t0);
    c.reset();  // finalize + destroy: not part of the time to a ready communicator
    warm_init.push_back(a), warm_first.push_back(b), warm_total.push_back(a + b);
  }
  const double ctx = slowest(*rt, ctx_ms), ini = slowest(*rt, init_ms), first = slowest(*rt, first_ms);
  const double w_init = slowest(*rt, median(warm_init)), w_first = slowest(*rt, median(warm_first)),
               w_total = slowest(*rt, median(warm_total));
  if (rt->rank == 0) {
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, rt->cuda_device));
    int driver = 0, runtime = 0;
    CK(cudaDriverGetVersion(&driver));
    CK(cudaRuntimeGetVersion(&runtime));
    fmt::print("# nccl-bench: trainrt over NCCL {} on {} ({} ranks, rank 0 on device {} of {}; CUDA driver {}, runtime {})\n",
               nccl_version(), prop.name, rt->size, rt->cuda_device, devices, driver, runtime);
    if (rt->size == 1)
      fmt::print("# world 1: NCCL's collectives are local copies on one GPU (nothing crosses NVLink or a network);\n"
                 "# busbw is 0 by definition for allreduce/reduce_scatter/allgather at world 1: read algbw.\n"
                 "# In-place ops (allreduce, broadcast) may move no data at all at world 1: their time is the call's.\n");
    if (rt->cuda_device != dev)
      fmt::print("# note: the context was made on device {} but trainrt::init chose {}: cold_init includes a context\n", dev,
                 rt->cuda_device);
    fmt::print("# (a) time to a ready NCCL communicator, host wall clock, ms (slowest rank)\n");
    fmt::print("init cuda_context_ms {:.3f}  # cudaSetDevice + cudaFree(0), first thing in the process\n", ctx);
    fmt::print("init cold_init_ms {:.3f}  # trainrt::init(DeviceComm::Required), first NCCL init of the process\n", ini);
    fmt::print("init cold_first_op_ms {:.3f}  # first 1-element f32 allreduce + cudaStreamSynchronize\n", first);
    fmt::print("init cold_total_ms {:.3f}  # cold_init + cold_first_op\n", ini + first);
    if (args.repeats > 0) {
      fmt::print("init warm_init_ms {:.3f}  # make_nccl_communicator over the same Session, median of {}\n", w_init, args.repeats);
      fmt::print("init warm_first_op_ms {:.3f}  # its first allreduce, median\n", w_first);
      fmt::print("init warm_total_ms {:.3f}  # median of init + first op\n", w_total);
    }
  }
  if (args.init_only) return 0;

  // (b) The collectives, sizes -b .. -e by factor -f.
  std::vector<std::size_t> sizes;
  for (double z = static_cast<double>(args.begin); z <= static_cast<double>(args.end) * 1.0000001; z *= args.factor)
    sizes.push_back(static_cast<std::size_t>(z));
  Bench bench{*rt, s, args, sizes.back()};
  if (rt->rank == 0)
    fmt::print("# (b) collectives through trainrt (sum; broadcast root 0); time per op: host wall clock between stream syncs\n"
               "{:<15} {:<5} {:<8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>7}\n", "# collective", "dtype", "mode", "size(B)",
               "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  for (Coll c : args.colls)
    for (bool async : args.async) {
      if (c == Coll::Barrier) {
        bench.row(c, DType::F32, async, 0);
        continue;
      }
      for (DType t : args.dtypes)
        for (std::size_t z : sizes) bench.row(c, t, async, z);
    }
  const bool ok = bench.wrong_total == 0;
  if (rt->rank == 0)
    fmt::print("# checked: {} results, {} wrong elements: {}\n", bench.results, bench.wrong_total, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const BadArgs& e) {
    fmt::print(stderr, "nccl-bench: {}\n", e.what());
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "nccl-bench: error: {}\n", e.what());
    return 1;
  }
}
