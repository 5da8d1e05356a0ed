#include "task_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

std::string value_of(const TaskFacts& f, const std::string& name) {
  auto it = f.env.find(name);
  return it == f.env.end() ? std::string() : it->second;
}

void put(std::vector<topo::EnvVar>& env, const std::string& name, const std::string& value) {
  for (auto& v : env)
    if (v.name == name) {
      v.value = value;
      return;
    }
  env.push_back({name, value});
}

void drop(std::vector<topo::EnvVar>& env, const std::string& name) {
  env.erase(std::remove_if(env.begin(), env.end(), [&](const topo::EnvVar& v) { return v.name == name; }), env.end());
}

// The GPUs Slurm bound this task to, as Node indexes; empty when Slurm left it every step GPU.
std::vector<unsigned> slurm_task_gpus(const StepPlan& plan, const TaskFacts& f) {
  std::vector<unsigned> out;
  auto map_all = [&](const std::string& list, const char* prefix) {
    out.clear();
    for (auto part : split(list, ',')) {
      if (part.empty()) continue;
      auto it = plan.gpu_of_slurm_id.find(prefix + std::string(part));
      if (it == plan.gpu_of_slurm_id.end()) return false;
      out.push_back(it->second);
    }
    return !out.empty();
  };
  const std::string gres = value_of(f, "SLURM_STEP_GPUS"), cuda = value_of(f, "CUDA_VISIBLE_DEVICES");
  bool known = (!gres.empty() && map_all(gres, "")) || (!cuda.empty() && map_all(cuda, plan.slurm_local_ids ? "cuda:" : ""));
  if (!known || out.size() >= plan.step_gpus.size()) return {};
  return out;
}

// Re-places task `local_id` on the GPUs Slurm chose. The task that was planned on them is assumed
// to have got this task's planned GPUs (Slurm's order is a permutation of ours); the others keep theirs.
topo::TaskPlacement place_around(const StepPlan& plan, unsigned local_id, const std::vector<unsigned>& gpus,
                                 topo::Placement& placement) {
  topo::PlacementRequest req = plan.request;
  req.task_gpus.clear();
  for (const auto& t : plan.tasks) req.task_gpus.push_back(t.gpus);
  for (auto& other : req.task_gpus)
    if (other == gpus) other = plan.tasks[local_id].gpus;
  req.task_gpus[local_id] = gpus;
  placement = topo::place(plan.node, req);
  return placement.tasks[local_id];
}

std::vector<unsigned> numa_of(const topo::Node& node, const topo::CpuSet& cpus) {
  std::vector<unsigned> out;
  for (const auto& n : node.numa_nodes)
    if (n.cpus.intersects(cpus)) out.push_back(n.os_index);
  return out;
}

// Where Slurm bound the task to its own GPU(s) (--gpus-per-task implies per-task binding), Slurm's
// choice is the task's GPU: the NIC, cores and memory follow it. When the task may still open the
// step's other GPUs (devices not confined), it sees them all with its own at position LOCAL_RANK,
// as with --gpus-per-node; when Slurm confines devices (it then renumbers CUDA_VISIBLE_DEVICES from
// 0), its one GPU is all it can use.
void follow_slurm_gpu(const StepPlan& plan, unsigned local_id, const TaskFacts& f, TaskPlan& t, FinalTask& out) {
  std::vector<unsigned> bound = slurm_task_gpus(plan, f);
  if (bound.empty() || t.gpus.empty()) return;
  if (bound != t.gpus) {
    topo::Placement placement;
    topo::TaskPlacement task = place_around(plan, local_id, bound, placement);
    topo::EnvOptions options = plan.env_options;
    options.step = t.identity;
    t.env = topo::render_env(plan.node, placement, task, options);
    t.cpus = task.cpus;
    t.mems = task.mems;
    t.gpus = bound;
    out.notes.push_back(fmt::format("task {}: placed around GPU {} that Slurm bound it to", local_id,
                                    plan.node.gpus[bound.front()].busid));
  }
  const std::string gres = value_of(f, "SLURM_STEP_GPUS"), cuda = value_of(f, "CUDA_VISIBLE_DEVICES");
  const bool confined = plan.slurm_local_ids || (!gres.empty() && !cuda.empty() && gres != cuda);
  if (!confined && plan.env_options.gpu_view == topo::GpuView::Node) {
    std::vector<unsigned> order;
    for (unsigned g : plan.step_gpus)
      if (std::find(bound.begin(), bound.end(), g) == bound.end()) order.push_back(g);
    const auto at = static_cast<std::ptrdiff_t>(std::min<std::size_t>(local_id, order.size()));
    order.insert(order.begin() + at, bound.begin(), bound.end());
    std::vector<std::string> ids;
    for (unsigned g : order) ids.push_back(plan.env_options.cuda_ids[g]);
    put(t.env, "CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(ids, ",")));
    put(t.env, "TRAINRT_CUDA_DEVICE", fmt::format("{}", at));
    return;
  }
  out.warnings.push_back(
      "Slurm confines each task to its own GPU here (--gpus-per-task with ConstrainDevices): "
      "torch.cuda.set_device(LOCAL_RANK) fails beyond local rank 0 and CUDA IPC/NVLink between the ranks is lost; "
      "train-runtime places each task around Slurm's GPU (TRAINRT_CUDA_DEVICE=0). Request --gpus-per-node=N "
      "instead to give every task the node's GPUs");
  // Slurm's choice stands: the same device(s), by UUID where the driver tells it, else by Slurm's name.
  std::vector<std::string> ids;
  for (unsigned g : bound) ids.push_back(plan.env_options.cuda_ids[g]);
  bool uuids = std::all_of(ids.begin(), ids.end(), [](const std::string& s) { return s.rfind("GPU-", 0) == 0; });
  if (uuids) put(t.env, "CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(ids, ",")));
  else drop(t.env, "CUDA_VISIBLE_DEVICES");
  put(t.env, "TRAINRT_CUDA_DEVICE", "0");
}

void follow_slurm_cpus(const StepPlan& plan, unsigned local_id, const TaskFacts& f, TaskPlan& t, FinalTask& out) {
  const topo::CpuSet& now = f.affinity;
  const bool slurm_bound = plan.stepd_affinity && now != *plan.stepd_affinity && now.is_subset_of(*plan.stepd_affinity);
  topo::CpuSet final_cpus;
  if (plan.request.policy == topo::Policy::None) {
    // Nothing is bound; the node's tasks share its cores instead of each counting all of them.
    unsigned cores = topo::whole_cores(plan.node, now);
    unsigned share = slurm_bound ? cores : std::max(1u, cores / static_cast<unsigned>(plan.tasks.size()));
    put(t.env, "OMP_NUM_THREADS", fmt::format("{}", share));
    put(t.env, "TRAINRT_CPUS", now.to_list());
    return;
  }
  if (!t.bind) return;  // bind=off|dry: the variables say what would have been bound
  topo::CpuSet target = t.cpus & now;
  if (target.empty()) {
    if (!slurm_bound)
      throw Error(fmt::format("the placement's CPUs {} lie outside the CPUs this task may use ({})", t.cpus.to_list(),
                              now.to_list()));
    out.notes.push_back(fmt::format(
        "task {}: Slurm bound it to CPUs {}, which hold none of the CPUs near its GPU ({}); Slurm's binding is kept. "
        "Run with --cpu-bind=none to let train-runtime place it, or bind=off to keep Slurm's without this note",
        local_id, now.to_list(), t.cpus.to_list()));
    final_cpus = now;
  } else {
    if (target != t.cpus)
      out.notes.push_back(fmt::format("task {}: CPUs {} narrowed to {} by the binding Slurm applied", local_id,
                                      t.cpus.to_list(), target.to_list()));
    final_cpus = target;
    out.cpus = target;
  }
  t.mems = numa_of(plan.node, final_cpus);
  put(t.env, "TRAINRT_CPUS", final_cpus.to_list());
  put(t.env, "OMP_NUM_THREADS", fmt::format("{}", std::max(1u, topo::whole_cores(plan.node, final_cpus))));
  put(t.env, "TRAINRT_MEMS", fmt::format("{}", fmt::join(t.mems, ",")));
  out.mems = t.mems;
  std::string mem_bind = value_of(f, "SLURM_MEM_BIND_TYPE");
  if (mem_bind.empty()) mem_bind = value_of(f, "SLURM_MEM_BIND");
  if (!mem_bind.empty()) {
    out.notes.push_back(fmt::format("task {}: --mem-bind={} given: the memory policy is Slurm's", local_id,
                                    printable(mem_bind)));
    out.mem = MemPolicy::Off;
  } else {
    out.mem = plan.mem;
  }
}

void respect_user_settings(const StepPlan& plan, unsigned local_id, const TaskFacts& f, TaskPlan& t, FinalTask& out) {
  std::vector<std::string> kept, replaced;
  for (const auto& name : tunable_variables()) {
    auto mine = std::find_if(t.env.begin(), t.env.end(), [&](const topo::EnvVar& v) { return v.name == name; });
    std::string theirs = value_of(f, name);
    if (mine == t.env.end() || theirs.empty() || theirs == mine->value) continue;
    if (plan.env_mode == EnvMode::Keep) {
      out.notes.push_back(fmt::format("task {}: keeps {}={} from its environment (train-runtime would set {}; "
                                      "env=override replaces it)",
                                      local_id, name, printable(theirs), printable(mine->value)));
      kept.push_back(name);
      t.env.erase(mine);
    } else {
      out.notes.push_back(fmt::format("task {}: {}={} from its environment replaced by {} (env=override)", local_id,
                                      name, printable(theirs), printable(mine->value)));
      replaced.push_back(name);
    }
  }
  if (!kept.empty()) put(t.env, "TRAINRT_ENV_KEPT", fmt::format("{}", fmt::join(kept, ",")));
  if (!replaced.empty()) put(t.env, "TRAINRT_ENV_OVERRIDDEN", fmt::format("{}", fmt::join(replaced, ",")));
}

}  // namespace

const std::vector<std::string>& tunable_variables() {
  static const std::vector<std::string> names = {"OMP_NUM_THREADS",    "NCCL_IB_HCA",        "UCX_NET_DEVICES",
                                                 "MASTER_ADDR",        "MASTER_PORT",        "NCCL_SOCKET_IFNAME",
                                                 "GLOO_SOCKET_IFNAME", "CUDA_DEVICE_ORDER"};
  return names;
}

std::vector<std::string> task_env_names(const StepPlan&) {
  std::vector<std::string> names = tunable_variables();
  for (const char* n : {"SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_MEM_BIND_TYPE", "SLURM_MEM_BIND"})
    names.emplace_back(n);
  return names;
}

FinalTask finalize_task(const StepPlan& plan, unsigned local_id, const TaskFacts& f) {
  if (local_id >= plan.tasks.size())
    throw Error(fmt::format("no placement for local task {} ({} planned)", local_id, plan.tasks.size()));
  FinalTask out;
  TaskPlan t = plan.tasks[local_id];
  if (!plan.launcher) {
    follow_slurm_gpu(plan, local_id, f, t, out);
    follow_slurm_cpus(plan, local_id, f, t, out);
  }
  respect_user_settings(plan, local_id, f, t, out);
  const bool has_master = std::any_of(t.env.begin(), t.env.end(), [](const topo::EnvVar& v) { return v.name == "MASTER_ADDR"; });
  if (!plan.master_error.empty() && has_master) throw Error(plan.master_error);
  out.env = std::move(t.env);
  return out;
}

}  // namespace trainrt::spank
