#include "trainrt/runtime/init.hpp"

#include <fmt/format.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
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

// A non-negative integer from the environment; `fallback` when unset. Anything else is an Error
// naming the variable.
int env_int(const char* name, int fallback) {
  const std::string v = env_or(name);
  if (v.empty()) return fallback;
  return parse_number(v, "a non-negative integer", 0, std::numeric_limits<int>::max(), fmt::format("init: {}", name));
}

// Decides, the same way on every rank, whether NCCL can run: every rank names its GPU's PCI bus
// id, rank 0 reads them all (a gather through the node leaders: no rank reads N blobs, as an
// allgather would make every rank do) and tells everyone its verdict. Ranks without a GPU, or two
// ranks of a node on one GPU, rule NCCL out. Returns "" when it can, else why not. A collective
// call: every rank makes it, and a malformed identity fails every rank alike.
std::string device_placement(Runtime& rt, bootstrap::Session& session) {
  rt.cuda_device = pick_cuda_device(rt.local_rank);
  const std::string bus = gpu_bus_id(rt.cuda_device);
  const std::uint32_t node = session.node_id();
  std::vector<std::uint8_t> mine(sizeof node);
  std::memcpy(mine.data(), &node, sizeof node);
  mine.insert(mine.end(), bus.begin(), bus.end());
  const auto blobs = session.gather(mine, 0);
  std::string verdict;  // 'P' + why NCCL cannot run ("P" alone: it can), or 'E' + the error
  if (session.rank() == 0) {
    try {
      std::vector<RankGpu> all;
      for (unsigned r = 0; r < blobs.size(); ++r) {
        if (blobs[r].size() < sizeof node || blobs[r].size() > sizeof node + 64)
          throw Error(fmt::format("rank {} sent a {}-byte GPU identity", r, blobs[r].size()), "init");
        RankGpu g;
        g.rank = r;
        std::memcpy(&g.node, blobs[r].data(), sizeof node);
        g.bus_id.assign(blobs[r].begin() + sizeof node, blobs[r].end());
        all.push_back(std::move(g));
      }
      verdict = "P" + nccl_placement_problem(all).value_or("");
    } catch (const std::exception& e) {
      verdict = std::string("E") + e.what();
    }
  }
  const auto got = session.broadcast({reinterpret_cast<const std::uint8_t*>(verdict.data()), verdict.size()}, 0);
  verdict.assign(got.begin(), got.end());
  if (verdict.empty() || (verdict[0] != 'P' && verdict[0] != 'E'))
    throw Error(fmt::format("rank 0 sent a {}-byte GPU placement verdict", verdict.size()), "init");
  if (verdict[0] == 'E') throw Error("rank 0 could not read every rank's GPU: " + verdict.substr(1), "init");
  return verdict.substr(1);
}

}  // namespace

std::string Runtime::describe() const {
  return fmt::format("rank {}/{} (local {}/{}), host backend {}, device backend {}{}, cpus {}, nics {}, restart {}", rank,
                     size, local_rank, local_size, host ? host->backend() : "none",
                     device ? device->backend() : "none",
                     device ? fmt::format(" on GPU {}", cuda_device) : device_note.empty() ? "" : " (" + device_note + ")",
                     placement_cpus.empty() ? "-" : placement_cpus, placement_nics.empty() ? "-" : placement_nics,
                     restart_count);
}

std::unique_ptr<Communicator> make_host_communicator(bootstrap::Session& session, const CommOptions& options) {
  // TRAINRT_HOST_BACKEND=shm|gloo|hierarchical overrides the choice (shm needs a single-node world).
  std::string host = env_or("TRAINRT_HOST_BACKEND", session.size() == session.local_size() ? "shm" : "hierarchical");
  // A peer that dies closes its sockets: let Gloo see EPIPE and report it, not SIGPIPE kill us.
  if (host != "shm") std::signal(SIGPIPE, SIG_IGN);
  if (host == "shm") return make_shm_communicator(session, options);
  if (host == "gloo") return make_gloo_communicator(session, options);
  if (host == "hierarchical") return make_hierarchical_communicator(session, options);
  throw UsageError(fmt::format("TRAINRT_HOST_BACKEND='{}'; valid: shm, gloo, hierarchical", host), "init");
}

std::unique_ptr<Runtime> init(const InitOptions& options) {
  auto rt = std::make_unique<Runtime>();
  rt->session = bootstrap::Session::open(options.bootstrap);
  rt->rank = rt->session->rank();
  rt->size = rt->session->size();
  rt->local_rank = rt->session->local_rank();
  rt->local_size = rt->session->local_size();
  rt->placement_cpus = env_or("TRAINRT_CPUS");
  rt->placement_nics = env_or("TRAINRT_NICS");
  rt->restart_count = static_cast<unsigned>(env_int("SLURM_RESTART_COUNT", 0));
  // The plugin's LOCAL_RANK and PMIx's must agree, or placement and communicators disagree.
  if (int lr = env_int("TRAINRT_LOCAL_RANK", -1); lr >= 0 && static_cast<unsigned>(lr) != rt->local_rank)
    throw Error(fmt::format("TRAINRT_LOCAL_RANK={} but PMIx says local rank {}", lr, rt->local_rank), "init");

  rt->host = make_host_communicator(*rt->session, options.comm);

  if (options.nccl == DeviceComm::Off) {
    rt->device_note = "device communicator off";
    return rt;
  }
  if (!nccl_built()) {
    if (options.nccl == DeviceComm::Required)
      throw Error("NCCL was required but this build has no NCCL (configure with CUDA and NCCL present)", "init");
    rt->device_note = "built without NCCL";
    return rt;
  }
  // Every rank of a NCCL build takes part, GPU or not, so the decision is the same everywhere.
  if (std::string problem = device_placement(*rt, *rt->session); !problem.empty()) {
    if (options.nccl == DeviceComm::Required)
      throw Error("NCCL was required but cannot run here: " + problem, "init");
    rt->device_note = problem + "; device collectives are off, reduce through the host communicator";
    if (rt->rank == 0) fmt::print(stderr, "trainrt: {}\n", rt->device_note);
    return rt;
  }
  NcclOptions nccl;
  nccl.device = rt->cuda_device;
  nccl.init_timeout = options.comm.timeout;
  nccl.timeout = options.comm.timeout;
  rt->device = make_nccl_communicator(*rt->session, nccl);
  return rt;
}

}  // namespace trainrt
