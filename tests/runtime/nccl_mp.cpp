// The NCCL communicator.
//   nccl_mp uid   the unique-id exchange under a PMIx server (no GPU needed): every rank holds rank 0's id
//   nccl_mp uids  the ids of one root per 2 ranks (ncclCommInitRankScalable's), the same on every rank
//   nccl_mp gpu   any world, one process per GPU (one process and one GPU is enough): every collective,
//                 dtype and op against a host reference, blocking and async, stream-ordered after the
//                 caller's stream, device buckets, split, abort.
//   nccl_mp timeout   a collective held past the communicator's timeout is aborted with an error
//                 naming it, and the process still exits cleanly.
// The GPU modes exit 77 (skipped) only when the machine has no GPU; any other CUDA or NCCL error fails.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/half.hpp"
#include "../common/gpu_presence.hpp"
#include "../common/typed_buffer.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

using namespace trainrt;
namespace k = trainrt::kernels;

namespace {

unsigned me = 0, n = 1, failures = 0, checks = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok && failures++ < 30) fmt::print(stderr, "rank {}: FAIL {}\n", me, what);
}

void cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(rc)), "test");
}

// Rank r's value at i: varied signs and magnitudes, exact in every dtype and in any sum of 8 ranks.
double value(unsigned r, std::size_t i, DType t) {
  std::uint64_t h = (r + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
  h ^= h >> 29;
  double v = static_cast<double>(static_cast<std::int64_t>(h % 255) - 127);
  if (t == DType::I32 || t == DType::I64) return v * 1000003.0;  // beyond 16 bits: a narrowed type shows
  if (t == DType::BF16) return v / 8.0;
  return v / 64.0;
}

using trainrt::testing::load;
using trainrt::testing::store;

// The host reference: ranks in order, rounded through the dtype; NCCL's avg of integers truncates.
double reference(std::size_t i, DType t, ReduceOp op) {
  double acc = value(0, i, t);
  for (unsigned r = 1; r < n; ++r) {
    double v = value(r, i, t);
    acc = op == ReduceOp::Min ? std::min(acc, v) : op == ReduceOp::Max ? std::max(acc, v) : acc + v;
  }
  if (op == ReduceOp::Avg) acc = (t == DType::I32 || t == DType::I64) ? std::trunc(acc / n) : acc / n;
  std::uint8_t tmp[8];
  store(tmp, 0, t, acc);
  return load(tmp, 0, t);
}

// Half types reduced by NCCL across several ranks may round per step: one ulp per rank.
bool close(double got, double want, DType t) {
  if (got == want) return true;
  if (n == 1 || (t != DType::F16 && t != DType::BF16)) return false;
  const double eps = t == DType::F16 ? 1.0 / 1024 : 1.0 / 128;
  return std::fabs(got - want) <= eps * n * std::max(1.0, std::fabs(want));
}

// Device buffer + pinned host mirror, moved on the caller's stream only.
struct Buffers {
  std::size_t bytes;
  void* dev = nullptr;
  void* host = nullptr;
  explicit Buffers(std::size_t b) : bytes(b ? b : 1) {
    cuda(cudaMalloc(&dev, bytes), "cudaMalloc");
    cuda(cudaMallocHost(&host, bytes), "cudaMallocHost");
  }
  ~Buffers() {
    cudaFree(dev);
    cudaFreeHost(host);
  }
  void upload(cudaStream_t s) { cuda(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "upload"); }
  void download(cudaStream_t s) { cuda(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s), "download"); }
  void poison(cudaStream_t s) { cuda(cudaMemsetAsync(dev, 0xff, bytes, s), "memset"); }
};

// Uploads on the caller's stream are not waited for on the host: the collective must order after
// them by itself; downloads on that stream must order after the collective.
void collectives(Communicator& comm, cudaStream_t s) {
  const std::vector<std::size_t> counts = {1, 1000, 1 << 20};  // 1M elements: uploads take a while
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    const std::size_t es = size_of(t);
    for (std::size_t count : counts) {
      Buffers in(count * es), out(count * es);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
        for (int variant = 0; variant < 3; ++variant) {  // blocking, async, blocking in place
          for (std::size_t i = 0; i < count; ++i) store(in.host, i, t, value(me, i, t));
          out.poison(s);
          in.upload(s);
          void* dst = variant == 2 ? in.dev : out.dev;
          if (variant == 1) {
            Work w = comm.allreduce_async(in.dev, dst, count, t, op);
            (variant == 2 ? in : out).download(s);
            w.wait();
          } else {
            comm.allreduce(in.dev, dst, count, t, op);
            (variant == 2 ? in : out).download(s);
          }
          cuda(cudaStreamSynchronize(s), "sync");
          const void* got = variant == 2 ? in.host : out.host;
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i) bad += !close(load(got, i, t), reference(i, t, op), t);
          check(bad == 0, fmt::format("allreduce {} {} count {} {}: {} wrong", to_string(t), to_string(op), count,
                                      variant == 0 ? "blocking" : variant == 1 ? "async" : "in place", bad));
        }
      }
      // The other collectives, each blocking and async (the download is enqueued before the
      // async wait: it must order after the collective on the caller's stream by itself).
      for (const bool async : {false, true}) {
        const char* mode = async ? "async" : "blocking";
        // reduce_scatter: rank r gets block r of the reduction of everyone's n*count inputs.
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
          Buffers big(count * n * es), mine(count * es);
          for (std::size_t i = 0; i < count * n; ++i) store(big.host, i, t, value(me, i, t));
          mine.poison(s);
          big.upload(s);
          if (async) {
            Work w = comm.reduce_scatter_async(big.dev, mine.dev, count, t, op);
            mine.download(s);
            w.wait();
          } else {
            comm.reduce_scatter(big.dev, mine.dev, count, t, op);
            mine.download(s);
          }
          cuda(cudaStreamSynchronize(s), "sync");
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i)
            bad += !close(load(mine.host, i, t), reference(me * count + i, t, op), t);
          check(bad == 0, fmt::format("reduce_scatter {} {} count {} {}: {} wrong", to_string(t), to_string(op),
                                      count, mode, bad));
        }
        {
          Buffers all(count * n * es);
          for (std::size_t i = 0; i < count; ++i) store(in.host, i, t, value(me, i, t));
          all.poison(s);
          in.upload(s);
          if (async) {
            Work w = comm.allgather_async(in.dev, all.dev, count, t);
            all.download(s);
            w.wait();
          } else {
            comm.allgather(in.dev, all.dev, count, t);
            all.download(s);
          }
          cuda(cudaStreamSynchronize(s), "sync");
          std::size_t bad = 0;
          for (unsigned r = 0; r < n; ++r)
            for (std::size_t i = 0; i < count; ++i) bad += load(all.host, r * count + i, t) != value(r, i, t);
          check(bad == 0, fmt::format("allgather {} count {} {}: {} wrong", to_string(t), count, mode, bad));
        }
        for (unsigned root = 0; root < n; ++root) {  // broadcast from every root
          for (std::size_t i = 0; i < count; ++i) store(in.host, i, t, me == root ? value(root, i, t) : -1.0);
          in.upload(s);
          if (async) {
            Work w = comm.broadcast_async(in.dev, count, t, root);
            in.download(s);
            w.wait();
          } else {
            comm.broadcast(in.dev, count, t, root);
            in.download(s);
          }
          cuda(cudaStreamSynchronize(s), "sync");
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i) bad += load(in.host, i, t) != value(root, i, t);
          check(bad == 0, fmt::format("broadcast {} count {} root {} {}: {} wrong", to_string(t), count, root, mode, bad));
        }
      }
    }
  }
  comm.barrier();
  comm.barrier_async().wait();
}

// Device buckets: 300 gradients uploaded on the caller's stream, averaged, read back there.
void buckets(Communicator& comm, cudaStream_t s) {
  std::vector<std::size_t> sizes;
  std::size_t total = 0;
  for (std::size_t g = 0; g < 300; ++g) total += sizes.emplace_back(1 + (g * 53) % 5000);
  Buffers all(total * 4);
  std::vector<kernels::TensorRef> refs;
  std::size_t off = 0;
  for (std::size_t g = 0; g < sizes.size(); ++g) {
    refs.push_back({static_cast<float*>(all.dev) + off, sizes[g]});
    off += sizes[g];
  }
  for (std::size_t i = 0; i < total; ++i) store(all.host, i, DType::F32, value(me, i, DType::F32));
  GradientBucketer bucketer(comm, refs, DType::F32, 64 << 10, Memory::Device, s);
  all.upload(s);
  bucketer.allreduce(ReduceOp::Avg);
  all.download(s);
  cuda(cudaStreamSynchronize(s), "sync");
  std::size_t bad = 0;
  for (std::size_t i = 0; i < total; ++i) bad += !close(load(all.host, i, DType::F32), reference(i, DType::F32, ReduceOp::Avg), DType::F32);
  check(bad == 0 && bucketer.bucket_count() > 1,
        fmt::format("device buckets: {} wrong in {} buckets", bad, bucketer.bucket_count()));
}

// Split, then abort the child: later calls throw PeerError; destroying it afterwards is safe.
void split_and_abort(Communicator& comm) {
  auto child = split_nccl_communicator(comm, 0, static_cast<int>(me));
  check(child->size() == n, fmt::format("split of everyone has {} ranks, not {}", child->size(), n));
  child->barrier();
  child->abort("test");
  bool peer = false;
  try {
    child->barrier();
  } catch (const PeerError&) {
    peer = true;
  }
  check(peer, "a barrier on an aborted communicator did not throw PeerError");
  child.reset();
  comm.barrier();  // the parent is unaffected
}

// A collective that never completes (its stream is held by a host callback longer than the
// communicator's timeout) ends with a PeerError naming it, well before the hold ends; every later
// call throws PeerError; the process still tears down and exits cleanly. On one GPU this is the way
// to make a collective hang: there is no peer to withhold.
void timeout_abort(bootstrap::Session& session, cudaStream_t s) {
  NcclOptions o;
  o.timeout = std::chrono::seconds(1);
  auto comm = make_nccl_communicator(session, o);
  set_nccl_stream(*comm, s);
  comm->barrier();  // connected and healthy first
  cuda(cudaLaunchHostFunc(
           s, [](void*) { std::this_thread::sleep_for(std::chrono::seconds(4)); }, nullptr),
       "cudaLaunchHostFunc");
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    comm->barrier();
  } catch (const PeerError& e) {
    message = e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("rank {}: the held barrier ended after {:.2f} s with: {}\n", me, took, message.empty() ? "(no error)" : message);
  check(message.find("barrier did not complete within 1000 ms") != std::string::npos,
        fmt::format("the held barrier's error does not name it and its timeout: '{}'", message));
  check(took < 3.5, fmt::format("the abort took {:.2f} s: it waited for the 4 s hold instead of the 1 s timeout", took));
  bool again = false;
  try {
    comm->barrier();
  } catch (const PeerError&) {
    again = true;
  }
  check(again, "a call after the timeout abort did not throw PeerError");
  comm.reset();
  cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize after the abort (the hold drains)");
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "uid";
  try {
    auto session = bootstrap::Session::open({std::chrono::seconds(60), true});
    me = session->rank();
    n = session->size();
    if (mode == "uid") {
      bootstrap::Blob id = exchange_nccl_unique_id(*session);
      auto all = session->allgather(id);
      bool same = true;
      for (const auto& b : all) same &= b == all[0];
      bool nonzero = false;
      for (auto byte : id) nonzero |= byte != 0;
      fmt::print("rank {} of {}: {} ({} bytes)\n", me, n, same && nonzero ? "UID-OK" : "UID-MISMATCH", id.size());
      return same && nonzero ? 0 : 1;
    }
    if (mode == "uids") {
      // One root per 2 ranks: ceil(n / 2) ids, the same list on every rank, all different.
      auto ids = exchange_nccl_unique_ids(*session, 2);
      bootstrap::Blob joined;
      for (const auto& id : ids) joined.insert(joined.end(), id.begin(), id.end());
      auto all = session->allgather(joined);
      bool ok = ids.size() == (n + 1) / 2;
      for (const auto& b : all) ok &= b == joined;
      for (std::size_t i = 0; i < ids.size(); ++i)
        for (std::size_t j = i + 1; j < ids.size(); ++j) ok &= ids[i] != ids[j];
      fmt::print("rank {} of {}: {} ({} ids)\n", me, n, ok ? "UIDS-OK" : "UIDS-MISMATCH", ids.size());
      return ok ? 0 : 1;
    }
    if (mode == "gpu" || mode == "timeout") {
      if (const int code = testing::gpu_presence_exit_code("NCCL init and collectives"); code >= 0) return code;
      cudaStream_t s = nullptr;
      if (mode == "timeout") {
        cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        timeout_abort(*session, s);
        cudaStreamDestroy(s);
        fmt::print("rank {}: {} checks, {} failed: {}\n", me, checks, failures, failures ? "TIMEOUT-FAIL" : "TIMEOUT-OK");
        return failures ? 1 : 0;
      }
      NcclOptions opts;
      opts.timeout = std::chrono::seconds(60);
      auto comm = make_nccl_communicator(*session, opts);
      cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      set_nccl_stream(*comm, s);
      collectives(*comm, s);
      buckets(*comm, s);
      split_and_abort(*comm);
      comm.reset();
      cudaStreamDestroy(s);
      fmt::print("rank {} of {}: {} checks, {} failed: {}\n", me, n, checks, failures, failures ? "GPU-FAIL" : "GPU-OK");
      return failures ? 1 : 0;
    }
    fmt::print(stderr, "unknown mode '{}'; valid: uid, uids, gpu, timeout\n", mode);
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", me, e.what());
    return 1;
  }
}
