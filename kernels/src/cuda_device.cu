// The per-device context shared by the kernel files: error checks, SM count and occupancy (queried
// once per device, cached), a scratch memory pool, and the stream-ordered Scratch buffers.
#include <fmt/format.h>

#include <map>
#include <mutex>
#include <utility>

#include "cuda_common.cuh"

namespace trainrt::kernels::cuda {
namespace detail {
namespace {

struct DeviceContext {
  int sms = 0;
  cudaMemPool_t pool = nullptr;
};

std::mutex g_mutex;
std::map<int, DeviceContext> g_devices;                      // by device ordinal
std::map<std::pair<int, const void*>, int> g_blocks_per_sm;  // by (device, kernel)

int current_device() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  return dev;
}

// Called with g_mutex held. The pool lives as long as the process: destroying it from a static
// destructor could run after the CUDA runtime has shut down.
DeviceContext& context_locked(int dev) {
  auto it = g_devices.find(dev);
  if (it != g_devices.end()) return it->second;
  DeviceContext c;
  check(cudaDeviceGetAttribute(&c.sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute(SM count)");
  int pools = 0;
  check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev), "cudaDeviceGetAttribute(pools)");
  if (!pools) throw Error(fmt::format("CUDA device {} has no stream-ordered memory pools", dev), "cuda kernels");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  check(cudaMemPoolCreate(&c.pool, &props), "cudaMemPoolCreate");
  // Keep up to 64 MiB cached across synchronisations: scratch (tensor tables, norm partials) is
  // small and requested on every call, and returning it to the driver each time costs a remap.
  std::uint64_t keep = 64ull << 20;
  check(cudaMemPoolSetAttribute(c.pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  return g_devices.emplace(dev, c).first->second;
}

}  // namespace

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw Error(fmt::format("{}: {}: {}", what, cudaGetErrorName(rc), cudaGetErrorString(rc)), "cuda kernels");
}

namespace {
struct LaunchEvents {
  cudaEvent_t before = nullptr, after = nullptr;
};
thread_local LaunchEvents t_probe;
}  // namespace

void probe_before(cudaStream_t stream) {
  if (t_probe.before) check(cudaEventRecord(t_probe.before, stream), "cudaEventRecord (launch probe, before)");
}
void probe_after(cudaStream_t stream) {
  if (t_probe.after) check(cudaEventRecord(t_probe.after, stream), "cudaEventRecord (launch probe, after)");
}

unsigned grid_size(const void* kernel, std::size_t units) {
  const int dev = current_device();
  int sms = 0, per_sm = 0;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    sms = context_locked(dev).sms;
    auto key = std::make_pair(dev, kernel);
    auto it = g_blocks_per_sm.find(key);
    if (it == g_blocks_per_sm.end()) {
      check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0),
            "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      g_blocks_per_sm.emplace(key, per_sm);
    } else {
      per_sm = it->second;
    }
  }
  const std::size_t full = kWaves * static_cast<std::size_t>(sms) * static_cast<std::size_t>(std::max(1, per_sm));
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min(full, units)));
}

Scratch::Scratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
  const int dev = current_device();
  cudaMemPool_t pool;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    pool = context_locked(dev).pool;
  }
  check(cudaMallocFromPoolAsync(&ptr_, std::max<std::size_t>(bytes, 16), pool, stream_), "cudaMallocFromPoolAsync");
}

Scratch::~Scratch() {
  if (ptr_) (void)cudaFreeAsync(ptr_, stream_);  // only after an earlier error, which was thrown
}

void Scratch::release() {
  void* p = std::exchange(ptr_, nullptr);
  if (p) check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
}

void Scratch::upload(std::size_t offset, const void* src, std::size_t n) {
  if (n) check(cudaMemcpyAsync(bytes() + offset, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (table upload)");
}

}  // namespace detail

void set_launch_events(void* before, void* after) {
  detail::t_probe = {static_cast<cudaEvent_t>(before), static_cast<cudaEvent_t>(after)};
}

bool device_available() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc == cudaErrorNoDevice) return false;
  if (rc == cudaErrorInsufficientDriver) {
    // No driver at all (libcuda absent: version 0) is a machine without a GPU; an installed driver
    // older than this runtime is a broken installation and must not look like "no GPU".
    int driver = 0;
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) return false;
  }
  detail::check(rc, "cudaGetDeviceCount");
  return n > 0;
}

}  // namespace trainrt::kernels::cuda
