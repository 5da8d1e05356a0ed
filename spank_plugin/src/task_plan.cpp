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

// What task_init decides; topo::render_env writes the task's variables from it.
struct Draft {
  topo::Placement placement;
  topo::TaskPlacement task;
  topo::EnvOptions options;
};

// Re-places task `local_id` on the GPUs Slurm chose. The task that was planned on them is assumed
// to have got this task's planned GPUs (Slurm's order is a permutation of ours); the others keep theirs.
void place_around(const StepPlan& plan, unsigned local_id, const std::vector<unsigned>& gpus, Draft& d) {
  topo::PlacementRequest req = plan.request;
  req.task_gpus.clear();
  for (const auto& t : plan.tasks) req.task_gpus.push_back(t.gpus);
  for (auto& other : req.task_gpus)
    if (other == gpus) other = plan.tasks[local_id].gpus;
  req.task_gpus[local_id] = gpus;
  d.placement = topo::place(plan.node, req);
  d.task = d.placement.tasks[local_id];
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
void follow_slurm_gpu(const StepPlan& plan, unsigned local_id, const TaskFacts& f, Draft& d, FinalTask& out) {
  std::vector<unsigned> bound = slurm_task_gpus(plan, f);
  if (bound.empty() || d.task.gpus.empty()) return;
  if (bound != d.task.gpus) {
    place_around(plan, local_id, bound, d);
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
    d.options.gpu_view = topo::GpuView::Listed;
    d.options.listed_gpus = std::move(order);
    return;
  }
  out.warnings.push_back(
      "Slurm confines each task to its own GPU here (--gpus-per-task with ConstrainDevices): "
      "torch.cuda.set_device(LOCAL_RANK) fails beyond local rank 0 and CUDA IPC/NVLink between the ranks is lost; "
      "train-runtime places each task around Slurm's GPU (TRAINRT_CUDA_DEVICE=0). Request --gpus-per-node=N "
      "instead to give every task the node's GPUs");
  d.options.gpu_view = topo::GpuView::Confined;  // Slurm's choice stands: the same device(s)
}

void follow_slurm_cpus(const StepPlan& plan, unsigned local_id, const TaskFacts& f, Draft& d, FinalTask& out) {
  const topo::CpuSet& now = f.affinity;
  const bool slurm_bound = plan.stepd_affinity && now != *plan.stepd_affinity && now.is_subset_of(*plan.stepd_affinity);
  topo::TaskPlacement& task = d.task;
  if (plan.request.policy == topo::Policy::None) {
    // Nothing is bound; the node's tasks share its cores instead of each counting all of them.
    unsigned cores = topo::whole_cores(plan.node, now);
    task.cores = slurm_bound ? cores : std::max(1u, cores / static_cast<unsigned>(plan.tasks.size()));
    task.cpus = now;
    return;
  }
  if (!plan.tasks[local_id].bind) return;  // bind=off|dry: the variables say what would have been bound
  topo::CpuSet final_cpus;
  topo::CpuSet target = task.cpus & now;
  if (target.empty()) {
    if (!slurm_bound)
      throw Error(fmt::format("the placement's CPUs {} lie outside the CPUs this task may use ({})", task.cpus.to_list(),
                              now.to_list()));
    out.notes.push_back(fmt::format(
        "task {}: Slurm bound it to CPUs {}, which hold none of the CPUs near its GPU ({}); Slurm's binding is kept. "
        "Run with --cpu-bind=none to let train-runtime place it, or bind=off to keep Slurm's without this note",
        local_id, now.to_list(), task.cpus.to_list()));
    final_cpus = now;
  } else {
    if (target != task.cpus)
      out.notes.push_back(fmt::format("task {}: CPUs {} narrowed to {} by the binding Slurm applied", local_id,
                                      task.cpus.to_list(), target.to_list()));
    final_cpus = target;
    out.cpus = target;
  }
  task.cpus = final_cpus;
  task.cores = topo::whole_cores(plan.node, final_cpus);
  task.mems = numa_of(plan.node, final_cpus);
  out.mems = task.mems;
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

std::string env_value(const std::vector<topo::EnvVar>& env, const std::string& name) {
  for (const auto& v : env)
    if (v.name == name) return v.value;
  return {};
}

// The tunables the task already had, said once each: kept, or replaced with env=override.
void say_user_settings(unsigned local_id, const TaskFacts& f, const std::vector<topo::EnvVar>& planned,
                       const std::vector<topo::EnvVar>& env, FinalTask& out) {
  for (const char* list : {"TRAINRT_ENV_KEPT", "TRAINRT_ENV_OVERRIDDEN"})
    for (auto name : split(env_value(env, list), ',')) {
      if (name.empty()) continue;
      const std::string n(name), theirs = value_of(f, n), mine = env_value(planned, n);
      out.notes.push_back(list == std::string_view("TRAINRT_ENV_KEPT")
                              ? fmt::format("task {}: keeps {}={} from its environment (train-runtime would set {}; "
                                            "env=override replaces it)",
                                            local_id, n, printable(theirs), printable(mine))
                              : fmt::format("task {}: {}={} from its environment replaced by {} (env=override)",
                                            local_id, n, printable(theirs), printable(mine)));
    }
}

}  // namespace

std::vector<std::string> task_env_names(const StepPlan&) {
  std::vector<std::string> names = topo::tunable_variables();
  for (const char* n : {"SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_MEM_BIND_TYPE", "SLURM_MEM_BIND"})
    names.emplace_back(n);
  return names;
}

FinalTask finalize_task(const StepPlan& plan, unsigned local_id, const TaskFacts& f) {
  if (local_id >= plan.tasks.size())
    throw Error(fmt::format("no placement for local task {} ({} planned)", local_id, plan.tasks.size()));
  FinalTask out;
  Draft d{plan.placement, plan.placement.tasks.at(plan.launcher ? 0 : local_id), plan.env_options};
  d.options.step = plan.tasks[local_id].identity;
  if (!plan.launcher) {
    follow_slurm_gpu(plan, local_id, f, d, out);
    follow_slurm_cpus(plan, local_id, f, d, out);
  }
  const std::vector<topo::EnvVar> planned = topo::render_env(plan.node, d.placement, d.task, d.options);
  for (const auto& name : topo::tunable_variables())
    if (auto it = f.env.find(name); it != f.env.end()) d.options.existing.insert(*it);
  d.options.override_existing = plan.env_mode == EnvMode::Override;
  out.env = topo::render_env(plan.node, d.placement, d.task, d.options);
  say_user_settings(local_id, f, planned, out.env, out);
  const bool has_master =
      std::any_of(out.env.begin(), out.env.end(), [](const topo::EnvVar& v) { return v.name == "MASTER_ADDR"; });
  if (!plan.master_error.empty() && has_master) throw Error(plan.master_error);
  return out;
}

}  // namespace trainrt::spank
