#include "step_plan.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::spank {
namespace {

// Slurm's lists: "" is no item, a trailing comma adds none.
std::vector<std::string> split_list(const std::string& text) {
  auto parts = split(text, ',');
  if (parts.back().empty()) parts.pop_back();
  return {parts.begin(), parts.end()};
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
      throw Error(fmt::format("Slurm's step cores '{}' are unreadable: {}", f.alloc_cores, e.what()));
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

// The step's GPUs as Node indexes, with the name CUDA_VISIBLE_DEVICES gives each.
std::vector<unsigned> allowed_gpus(const topo::Node& node, const StepFacts& f, std::vector<std::string>& cuda_ids) {
  std::vector<std::string> gres = split_list(f.step_gpus), cuda = split_list(f.cuda_visible_devices);
  const std::vector<std::string>& source = !gres.empty() ? gres : cuda;
  const char* source_name = !gres.empty() ? "SLURM_STEP_GPUS" : "CUDA_VISIBLE_DEVICES";
  std::vector<unsigned> gpus;
  cuda_ids.assign(node.gpus.size(), "");
  for (std::size_t i = 0; i < source.size(); ++i) {
    const std::string& item = source[i];
    unsigned index = 0;
    bool numeric = !item.empty() && std::all_of(item.begin(), item.end(), ::isdigit) && item.size() < 6;
    if (numeric) {
      index = static_cast<unsigned>(std::stoul(item));
    } else {
      auto it = std::find_if(node.gpus.begin(), node.gpus.end(), [&](const topo::Gpu& g) { return g.uuid == item; });
      if (it == node.gpus.end())
        throw Error(fmt::format("{} entry '{}' is neither a GPU index nor a known GPU UUID", source_name, item));
      index = it->index;
    }
    if (index >= node.gpus.size())
      throw Error(fmt::format("{} names GPU {} but the topology has {} GPUs (gres.conf and the topology disagree)",
                              source_name, index, node.gpus.size()));
    gpus.push_back(index);
    cuda_ids[index] = (gres.size() == cuda.size() && !cuda.empty()) ? cuda[i] : item;
  }
  return gpus;
}

}  // namespace

std::string first_host(std::string_view list) {
  std::string out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == ',') break;
    if (c == '[') {
      std::size_t end = list.find_first_of(",-]", i + 1);
      if (end == std::string_view::npos) throw Error(fmt::format("unbalanced '[' in hostlist '{}'", list));
      out += list.substr(i + 1, end - i - 1);
      std::size_t close = list.find(']', i);
      if (close == std::string_view::npos) throw Error(fmt::format("unbalanced '[' in hostlist '{}'", list));
      i = close;
      continue;
    }
    out += c;
  }
  return out;
}

unsigned master_port(std::uint32_t job_id, std::uint32_t step_id) {
  return 20000 + (job_id % 1000) * 20 + step_id % 20;
}

StepPlan plan_step(const topo::Node& node, bool topology_is_live, const StepFacts& f, const UserOptions& user,
                   const AdminConfig& admin) {
  topo::PlacementRequest req;
  req.policy = user.policy.value_or(admin.policy);
  req.tasks = static_cast<unsigned>(f.global_ids.size());
  req.tasks_per_gpu = user.tasks_per_gpu.value_or(1);
  req.rails.nic_include = admin.nic_include;
  req.allowed_cpus = allowed_cpus(node, f);
  topo::EnvOptions env;
  req.allowed_gpus = allowed_gpus(node, f, env.cuda_ids);
  if (req.tasks == 0) throw Error("the step has no tasks on this node");
  if (req.policy == topo::Policy::Rail && req.allowed_gpus->empty())
    throw Error(fmt::format("policy=rail needs GPUs, but no GPU is allocated to this step on {} (request them with "
                            "--gpus-per-task/--gres=gpu:N, or use policy=numa)",
                            f.hostname));

  BindMode bind = user.bind.value_or(BindMode::On);
  if (!topology_is_live) bind = BindMode::Dry;  // a cached XML of another box: its cores are not ours
  topo::Placement placement = topo::place(node, req);

  env.visible_all = user.gpus == GpuVisibility::All;
  env.bound = bind == BindMode::On;
  StepPlan plan;
  const std::string master = first_host(f.step_nodelist.empty() ? f.hostname : f.step_nodelist);
  for (const auto& task : placement.tasks) {
    env.step = topo::StepIdentity{f.global_ids[task.local_rank], f.total_tasks,
                                  static_cast<unsigned>(f.global_ids.size()), f.node_id, f.nnodes, master,
                                  master_port(f.job_id, f.step_id), f.job_id, f.step_id};
    TaskPlan t;
    t.env = topo::render_env(node, placement, task, env);
    t.cpus = task.cpus;
    t.mems = task.mems;
    t.bind = bind == BindMode::On && task.bind;
    plan.tasks.push_back(std::move(t));
  }
  plan.table = fmt::format("train-runtime: {} (node {} of {}), step {}.{}, bind={}{}\n{}", f.hostname, f.node_id,
                           f.nnodes, f.job_id, f.step_id, to_string(bind),
                           topology_is_live ? "" : " (cached topology of another machine)",
                           topo::render_table(node, placement));
  return plan;
}

}  // namespace trainrt::spank
