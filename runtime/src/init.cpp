#include "trainrt/runtime/init.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>

#include "trainrt/error.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"
#include "trainrt/runtime/hierarchical_communicator.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

namespace trainrt {
namespace {

std::string env_or(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int env_int(const char* name, int fallback) {
  std::string v = env_or(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (*end || n < 0) throw Error(fmt::format("{}='{}' is not a non-negative integer", name, v), "init");
  return static_cast<int>(n);
}

}  // namespace

std::string Runtime::describe() const {
  return fmt::format("rank {}/{} (local {}/{}), host backend {}, device backend {}, cpus {}, nics {}, restart {}", rank,
                     size, local_rank, local_size, host ? host->backend() : "none",
                     device ? device->backend() : "none", placement_cpus.empty() ? "-" : placement_cpus,
                     placement_nics.empty() ? "-" : placement_nics, restart_count);
}

std::unique_ptr<Runtime> init(const InitOptions& options) {
  auto rt = std::make_unique<Runtime>();
  rt->session = bootstrap::Session::open(options.bootstrap);
  rt->rank = rt->session->rank();
  rt->size = rt->session->size();
  rt->local_rank = rt->session->local_rank();
  rt->local_size = rt->session->local_size();
  rt->cuda_device = env_int("TRAINRT_CUDA_DEVICE", -1);
  rt->placement_cpus = env_or("TRAINRT_CPUS");
  rt->placement_nics = env_or("TRAINRT_NICS");
  rt->restart_count = static_cast<unsigned>(env_int("SLURM_RESTART_COUNT", 0));
  // The plugin's LOCAL_RANK and PMIx's must agree, or placement and communicators disagree.
  if (std::string lr = env_or("TRAINRT_LOCAL_RANK"); !lr.empty() && std::stoul(lr) != rt->local_rank)
    throw Error(fmt::format("TRAINRT_LOCAL_RANK={} but PMIx says local rank {}", lr, rt->local_rank), "init");

  // TRAINRT_HOST_BACKEND=shm|gloo|hierarchical overrides the choice (shm needs a single-node world).
  std::string host = env_or("TRAINRT_HOST_BACKEND", rt->size == rt->local_size ? "shm" : "hierarchical");
  // A peer that dies closes its sockets: let Gloo see EPIPE and report it, not SIGPIPE kill us.
  if (host != "shm") std::signal(SIGPIPE, SIG_IGN);
  if (host == "shm")
    rt->host = make_shm_communicator(*rt->session, options.comm);
  else if (host == "gloo")
    rt->host = make_gloo_communicator(*rt->session, options.comm);
  else if (host == "hierarchical")
    rt->host = make_hierarchical_communicator(*rt->session, options.comm);
  else
    throw Error(fmt::format("TRAINRT_HOST_BACKEND='{}'; valid: shm, gloo, hierarchical", host), "init");

  const bool want = options.nccl == DeviceComm::Required || (options.nccl == DeviceComm::Auto && nccl_available());
  if (options.nccl == DeviceComm::Required && !nccl_available())
    throw Error("NCCL was required but this build or machine has no NCCL/GPU", "init");
  if (want) {
    NcclOptions nccl;
    nccl.device = rt->cuda_device >= 0 ? rt->cuda_device : -1;
    nccl.init_timeout = options.comm.timeout;
    rt->device = make_nccl_communicator(*rt->session, nccl);
  }
  return rt;
}

}  // namespace trainrt
