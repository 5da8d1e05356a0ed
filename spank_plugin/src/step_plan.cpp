#include "step_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::spank {
namespace {

// Slurm's lists: "" is no item, a trailing comma adds none.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (auto part : split(text, ','))
    if (!part.empty()) out.emplace_back(part);
  return out;
}

topo::CpuSet allowed_cpus(const topo::Node& node, const StepFacts& f) {
  topo::CpuSet allowed;
  if (f.alloc_cores.empty()) {
    allowed = node.all_cpus;
  } else {
    topo::CpuSet cores;
    try {
      cores = topo::CpuSet::parse_list(f.alloc_cores);
    } catch (const Error& e) {
      throw Error(fmt::format("Slurm's step cores '{}' are unreadable: {}", printable(f.alloc_cores), e.what()));
    }
    for (unsigned k : cores.members()) {
      if (k >= node.cores.size())
        throw Error(fmt::format("Slurm allocated core {} but the topology has {} cores (slurm.conf and the topology "
                                "disagree)",
                                k, node.cores.size()));
      allowed |= node.cores[k].pus;
    }
  }
  if (f.stepd_affinity) {
    topo::CpuSet narrowed = allowed & *f.stepd_affinity;
    if (narrowed.empty())
      throw Error(fmt::format("the step's cores ({}) and the CPUs slurmstepd may use ({}) do not overlap",
                              allowed.to_list(), f.stepd_affinity->to_list()));
    allowed = narrowed;
  }
  return allowed;
}

// Node index of one of Slurm's GPU names. Slurm names a GPU by its gres.conf device number, which
// is the driver's minor number: with the driver's table (live nodes) that gives the PCI bus id;
// without it (a cached topology) the number is taken as the PCI-order index, which is what
// gres.conf in PCI bus order (AutoDetect=nvml) gives.
unsigned gpu_index(const topo::Node& node, const StepFacts& f, const std::string& id) {
  auto by_busid = [&](const std::string& busid) -> std::optional<unsigned> {
    for (const auto& g : node.gpus)
      if (g.busid == busid) return g.index;
    return std::nullopt;
  };
  // A gres device number (a device minor, at most 7 digits); anything else is a UUID, or an error below.
  if (const auto number = to_number(id, 0u, 9999999u)) {
    const unsigned n = *number;
    if (!f.driver_gpus.empty()) {
      for (const auto& d : f.driver_gpus)
        if (d.minor == static_cast<int>(n)) {
          if (auto i = by_busid(d.busid)) return *i;
          throw Error(fmt::format("SLURM_STEP_GPUS names GPU {} (the driver's {}), which the topology does not hold", n,
                                  d.busid));
        }
      throw Error(fmt::format("SLURM_STEP_GPUS names GPU {}, but no NVIDIA GPU has device minor {} (gres.conf and the "
                              "driver disagree)",
                              n, n));
    }
    if (n >= node.gpus.size())
      throw Error(fmt::format("SLURM_STEP_GPUS names GPU {} but the topology has {} GPUs (gres.conf and the topology "
                              "disagree)",
                              n, node.gpus.size()));
    return n;
  }
  for (const auto& g : node.gpus)
    if (!g.uuid.empty() && g.uuid == id) return g.index;
  for (const auto& d : f.driver_gpus)
    if (d.uuid == id)
      if (auto i = by_busid(d.busid)) return *i;
  throw Error(fmt::format("SLURM_STEP_GPUS entry '{}' is neither a GPU device number nor a known GPU UUID", printable(id)));
}

// The step's GPUs on this node in Slurm's order, how Slurm names each, and how our
// CUDA_VISIBLE_DEVICES names each (UUIDs where the driver tells them: they mean the same device
// whatever the device order or cgroup; otherwise Slurm's own names).
void map_step_gpus(const topo::Node& node, const StepFacts& f, StepPlan& plan) {
  std::vector<std::string> gres = split_list(f.step_gpus), cuda = split_list(f.cuda_visible_devices);
  for (const auto& c : cuda)
    if (c.rfind("MIG-", 0) == 0)
      throw Error(fmt::format("the step's GPUs are MIG slices ({}): train-runtime places whole GPUs; run without "
                              "--train-runtime, or with policy=none",
                              printable(c)));
  const bool aligned = cuda.size() == gres.size();
  plan.slurm_local_ids = aligned && cuda != gres;
  plan.env_options.cuda_ids.assign(node.gpus.size(), "");
  for (std::size_t i = 0; i < gres.size(); ++i) {
    unsigned index = gpu_index(node, f, gres[i]);
    if (std::find(plan.step_gpus.begin(), plan.step_gpus.end(), index) != plan.step_gpus.end())
      throw Error(fmt::format("SLURM_STEP_GPUS names GPU {} twice", printable(gres[i])));
    plan.step_gpus.push_back(index);
    plan.gpu_of_slurm_id[gres[i]] = index;
    if (aligned) plan.gpu_of_slurm_id["cuda:" + cuda[i]] = index;
    std::string uuid;
    for (const auto& d : f.driver_gpus)
      if (d.busid == node.gpus[index].busid) uuid = d.uuid;
    plan.env_options.cuda_ids[index] = !uuid.empty() ? uuid : aligned ? cuda[i] : gres[i];
  }
}

// Slurm binds GPUs per task when --gpus-per-task is given (it implies per_task binding) unless
// --gpu-bind says otherwise: task i gets the step's GPUs i*k .. i*k+k-1 in Slurm's order.
bool slurm_binds_per_task(const StepFacts& f) {
  if (f.gpus_per_task == 0) return false;
  return f.gpu_bind.empty() || f.gpu_bind.find("per_task") != std::string::npos;
}

topo::Policy choose_policy(const StepPlan& plan, const StepFacts& f, const UserOptions& user, const AdminConfig& admin) {
  topo::Policy policy = user.policy.value_or(admin.policy);
  if (policy == topo::Policy::Rail && plan.step_gpus.empty()) {
    if (user.policy)
      throw Error(fmt::format("policy=rail needs GPUs, but no GPU is allocated to this step on {} (request them with "
                              "--gpus-per-node/--gres=gpu:N, or use policy=numa)",
                              f.hostname));
    return topo::Policy::Numa;  // the default policy meets a CPU-only step: place by NUMA instead
  }
  return policy;
}

bool is_launcher(const StepPlan& plan, const StepFacts& f, const UserOptions& user) {
  LauncherMode mode = user.launcher.value_or(LauncherMode::Auto);
  if (mode != LauncherMode::Auto) return mode == LauncherMode::On;
  // One task holding several GPUs starts the ranks itself (torchrun --nproc-per-node, mpirun's
  // daemons): binding it to one GPU's cores would squeeze every worker it spawns.
  return f.global_ids.size() == 1 && plan.step_gpus.size() > 1;
}

// torchrun's algebra RANK = GROUP_RANK x LOCAL_WORLD_SIZE + LOCAL_RANK holds for block distribution
// with the same task count on every node; scripts that derive ranks from node ranks assume it.
void check_rank_algebra(const StepFacts& f, StepPlan& plan) {
  const auto local = static_cast<unsigned>(f.global_ids.size());
  bool ok = f.total_tasks == f.nnodes * local;
  for (unsigned i = 0; ok && i < local; ++i) ok = f.global_ids[i] == f.node_id * local + i;
  if (!ok)
    plan.warnings.push_back(fmt::format(
        "RANK is not GROUP_RANK*LOCAL_WORLD_SIZE+LOCAL_RANK on {} (tasks {} of {} over {} nodes): scripts that "
        "compute ranks the torchrun way disagree with RANK; use --ntasks-per-node and --distribution=block",
        f.hostname, fmt::join(f.global_ids, ","), f.total_tasks, f.nnodes));
}

}  // namespace

std::string first_host(std::string_view list) {
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == ',') break;
    if (c == '[') {
      std::size_t end = list.find_first_of(",-]", i + 1);
      if (end == std::string_view::npos) throw Error(fmt::format("unbalanced '[' in hostlist '{}'", printable(list)));
      out += list.substr(i + 1, end - i - 1);
      std::size_t close = list.find(']', i);
      if (close == std::string_view::npos) throw Error(fmt::format("unbalanced '[' in hostlist '{}'", printable(list)));
      i = close;
      continue;
    }
    out += c;
  }
  return out;
}

StepPlan plan_step(const topo::Node& node, bool topology_is_live, const StepFacts& f, const UserOptions& user,
                   const AdminConfig& admin) {
  if (f.global_ids.empty()) throw Error("the step has no tasks on this node");
  StepPlan plan;
  plan.live = topology_is_live;
  plan.mem = user.mem.value_or(MemPolicy::Prefer);
  plan.env_mode = user.env.value_or(EnvMode::Keep);
  plan.master_error = f.master_error;
  plan.stepd_affinity = f.stepd_affinity;
  map_step_gpus(node, f, plan);

  topo::PlacementRequest& req = plan.request;
  req.policy = choose_policy(plan, f, user, admin);
  if (req.policy != user.policy.value_or(admin.policy))
    plan.notes.push_back(fmt::format("no GPU in this step on {}: policy numa instead of rail", f.hostname));
  plan.launcher = is_launcher(plan, f, user);
  req.tasks = plan.launcher ? 1 : static_cast<unsigned>(f.global_ids.size());
  req.tasks_per_gpu = user.tasks_per_gpu.value_or(1);
  req.rails.nic_include = admin.nic_include;
  req.allowed_cpus = allowed_cpus(node, f);
  req.allowed_gpus = plan.step_gpus;
  if (plan.launcher) {
    if (!plan.step_gpus.empty()) req.task_gpus = {plan.step_gpus};
  } else if (slurm_binds_per_task(f) && !plan.step_gpus.empty()) {
    const unsigned k = f.gpus_per_task;
    req.task_gpus.resize(req.tasks);
    for (unsigned i = 0; i < req.tasks; ++i)
      for (unsigned g = 0; g < k; ++g) req.task_gpus[i].push_back(plan.step_gpus[(i * k + g) % plan.step_gpus.size()]);
  }

  plan.bind = plan.launcher ? BindMode::Off : user.bind.value_or(BindMode::On);
  if (!topology_is_live && plan.bind == BindMode::On) plan.bind = BindMode::Dry;  // another box's cores are not ours
  topo::Placement placement = topo::place(node, req);

  topo::EnvOptions& env = plan.env_options;
  env.gpu_view = user.gpus == GpuVisibility::Own ? topo::GpuView::Own : topo::GpuView::Node;
  env.hca_scope = user.nics == NicScope::Own ? topo::HcaScope::Task : topo::HcaScope::Node;
  env.rail_ids = admin.rail_ids;
  env.bound = plan.bind == BindMode::On;
  env.launcher = plan.launcher;
  env.ifname = f.ifname;
  env.nccl_topo_file = f.nccl_topo_file;
  const topo::StepIdentity base{0, f.total_tasks, static_cast<unsigned>(f.global_ids.size()), f.node_id, f.nnodes,
                                f.master_addr, master_port(f.job_id, f.step_id, f.ports), f.job_id, f.step_id};
  if (plan.launcher) {
    TaskPlan t;
    env.step = base;
    t.env = topo::render_env(node, placement, placement.tasks.front(), env);
    t.gpus = plan.step_gpus;
    t.identity = base;
    plan.tasks.push_back(std::move(t));
    plan.notes.push_back(fmt::format("launcher step on {}: one task holds GPUs {}; nothing is bound and no per-rank "
                                     "variable is set (launcher=off places it like any task)",
                                     f.hostname, fmt::join(plan.step_gpus, ",")));
  } else {
    check_rank_algebra(f, plan);
    for (const auto& task : placement.tasks) {
      topo::StepIdentity id = base;
      id.rank = f.global_ids[task.local_rank];
      env.step = id;
      TaskPlan t;
      t.env = topo::render_env(node, placement, task, env);
      t.cpus = task.cpus;
      t.mems = task.mems;
      t.gpus = task.gpus;
      t.bind = plan.bind == BindMode::On && task.bind;
      t.identity = id;
      plan.tasks.push_back(std::move(t));
    }
  }
  env.step.reset();  // each task's own is its TaskPlan::identity
  if (!f.ifname.empty()) plan.notes.push_back(fmt::format("data network: {} (MASTER_ADDR {})", f.ifname, f.master_addr));
  plan.table = fmt::format("train-runtime: {} (node {} of {}), step {}.{}, bind={}{}{}\n{}", f.hostname, f.node_id,
                           f.nnodes, f.job_id, f.step_id, to_string(plan.bind),
                           topology_is_live ? "" : " (cached topology of another machine)",
                           plan.launcher ? ", launcher step" : "", topo::render_table(node, placement));
  plan.node = node;
  plan.placement = std::move(placement);
  return plan;
}

}  // namespace trainrt::spank
