#include "trainrt/topology/env.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrt::topo {

std::string nic_port_list(const Node& node, const std::vector<unsigned>& nics, const std::vector<int>* rail_of_nic) {
  std::vector<std::string> items;
  for (unsigned n : nics) {
    const Nic& nic = node.nics[n];
    if (nic.rdma_name.empty()) return {};
    std::string rail = rail_of_nic ? fmt::format(":{}", (*rail_of_nic)[n]) : "";
    if (nic.ports.empty()) {
      items.push_back(rail_of_nic ? fmt::format("{}:1{}", nic.rdma_name, rail) : nic.rdma_name);
    } else {
      for (const auto& port : nic.ports) items.push_back(fmt::format("{}:{}{}", nic.rdma_name, port.number, rail));
    }
  }
  return fmt::format("{}", fmt::join(items, ","));
}

std::string nic_port_list(const Node& node, const TaskPlacement& task) { return nic_port_list(node, task.nics); }

std::vector<unsigned> node_rail_nics(const Placement& placement) {
  std::vector<unsigned> out;
  for (std::size_t n = 0; n < placement.rails.rail_of_nic.size(); ++n)
    if (placement.rails.rail_of_nic[n] >= 0) out.push_back(static_cast<unsigned>(n));
  return out;
}

std::vector<unsigned> node_gpu_order(const Placement& placement) {
  std::vector<unsigned> order;
  auto add = [&](unsigned g) {
    if (std::find(order.begin(), order.end(), g) == order.end()) order.push_back(g);
  };
  for (const auto& t : placement.tasks)
    for (unsigned g : t.gpus) add(g);
  for (unsigned g : placement.allowed_gpus) add(g);
  return order;
}

unsigned whole_cores(const Node& node, const CpuSet& cpus) {
  unsigned n = 0;
  for (const auto& core : node.cores) n += core.pus.intersects(cpus) ? 1 : 0;
  return n;
}

namespace {

std::string cuda_id(const EnvOptions& options, unsigned gpu) {
  return gpu < options.cuda_ids.size() && !options.cuda_ids[gpu].empty() ? options.cuda_ids[gpu]
                                                                         : fmt::format("{}", gpu);
}

bool any_efa(const Node& node, const std::vector<unsigned>& nics) {
  return std::any_of(nics.begin(), nics.end(), [&](unsigned n) { return node.nics[n].link == LinkLayer::Efa; });
}

// The step's place in the job, the same for every task of a node: in the node's and each task's set.
void step_vars(const StepIdentity& s, std::vector<EnvVar>& env) {
  env.push_back({"GROUP_RANK", fmt::format("{}", s.node_id)});
  env.push_back({"GROUP_WORLD_SIZE", fmt::format("{}", s.nnodes)});
  env.push_back({"MASTER_ADDR", s.master_addr});
  env.push_back({"MASTER_PORT", fmt::format("{}", s.master_port)});
  env.push_back({"TRAINRT_NODE_ID", fmt::format("{}", s.node_id)});
  env.push_back({"TRAINRT_NNODES", fmt::format("{}", s.nnodes)});
  env.push_back({"TRAINRT_JOB_ID", fmt::format("{}", s.job_id)});
  env.push_back({"TRAINRT_STEP_ID", fmt::format("{}", s.step_id)});
}

void gpu_vars(const Placement& placement, const TaskPlacement& task, const EnvOptions& options,
              std::vector<EnvVar>& env) {
  if (task.gpus.empty()) return;
  // Our GPU indexes are PCI bus order; CUDA numbers devices that way only when told to.
  env.push_back({"CUDA_DEVICE_ORDER", "PCI_BUS_ID"});
  std::vector<unsigned> visible = options.gpu_view == GpuView::Node     ? node_gpu_order(placement)
                                  : options.gpu_view == GpuView::Listed ? options.listed_gpus
                                                                        : task.gpus;
  std::size_t own = static_cast<std::size_t>(std::find(visible.begin(), visible.end(), task.gpus.front()) -
                                             visible.begin());
  std::vector<std::string> ids;
  for (unsigned g : visible) ids.push_back(cuda_id(options, g));
  const bool named = options.gpu_view != GpuView::Confined ||
                     std::all_of(ids.begin(), ids.end(), [](const std::string& id) { return id.starts_with("GPU-"); });
  if (named) env.push_back({"CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(ids, ","))});
  env.push_back({"TRAINRT_CUDA_DEVICE", fmt::format("{}", own)});
}

void nic_vars(const Node& node, const Placement& placement, const TaskPlacement& task, const EnvOptions& options,
              std::vector<EnvVar>& env) {
  if (task.nics.empty() || any_efa(node, task.nics)) return;  // EFA is reached through libfabric, not verbs
  std::string own = nic_port_list(node, task.nics);
  if (own.empty()) return;  // NICs without recorded device names (vendor NCCL files)
  std::vector<unsigned> hca_nics = options.hca_scope == HcaScope::Node ? node_rail_nics(placement) : task.nics;
  std::string hca = nic_port_list(node, hca_nics, options.rail_ids ? &placement.rails.rail_of_nic : nullptr);
  // A leading '=' makes NCCL match names exactly, so mlx5_1 does not also select mlx5_10.
  if (!hca.empty()) env.push_back({"NCCL_IB_HCA", "=" + hca});
  env.push_back({"UCX_NET_DEVICES", own});
}

// What a launcher step's one task gets: the node's rails and where the ranks it starts meet.
void launcher_vars(const Node& node, const Placement& placement, const EnvOptions& options,
                   std::vector<EnvVar>& env) {
  if (placement.policy == Policy::Rail) {
    std::string hca = nic_port_list(node, node_rail_nics(placement), options.rail_ids ? &placement.rails.rail_of_nic : nullptr);
    if (!hca.empty()) env.push_back({"NCCL_IB_HCA", "=" + hca});
  }
  env.push_back({"TRAINRT_LAUNCHER", "1"});
  env.push_back({"TRAINRT_POLICY", to_string(placement.policy)});
  if (const auto& s = options.step) {
    step_vars(*s, env);
  }
}

void task_vars(const Node& node, const Placement& placement, const TaskPlacement& task, const EnvOptions& options,
               std::vector<EnvVar>& env) {
  std::vector<std::string> busids, nics, rails;
  for (unsigned g : task.gpus) busids.push_back(node.gpus[g].busid);
  for (unsigned n : task.nics) {
    const Nic& nic = node.nics[n];
    nics.push_back(nic.rdma_name.empty() ? nic.busid : nic.rdma_name);
    rails.push_back(fmt::format("{}", placement.rails.rail_of_nic[n]));
  }
  gpu_vars(placement, task, options, env);
  nic_vars(node, placement, task, options, env);
  env.push_back({"OMP_NUM_THREADS", fmt::format("{}", std::max(1u, task.cores))});
  env.push_back({"TRAINRT_POLICY", to_string(placement.policy)});
  env.push_back({"TRAINRT_LOCAL_RANK", fmt::format("{}", task.local_rank)});
  env.push_back({"TRAINRT_GPU_BUSIDS", fmt::format("{}", fmt::join(busids, ","))});
  env.push_back({"TRAINRT_NICS", fmt::format("{}", fmt::join(nics, ","))});
  env.push_back({"TRAINRT_RAILS", fmt::format("{}", fmt::join(rails, ","))});
  env.push_back({"TRAINRT_CPUS", task.cpus.to_list()});
  env.push_back({"TRAINRT_MEMS", fmt::format("{}", fmt::join(task.mems, ","))});
  env.push_back({"TRAINRT_BIND", task.bind && options.bound ? "1" : "0"});
  if (const auto& s = options.step) {
    // What torch.distributed's env:// rendezvous, torchrun-style scripts and most launchers read.
    env.push_back({"RANK", fmt::format("{}", s->rank)});
    env.push_back({"LOCAL_RANK", fmt::format("{}", task.local_rank)});
    env.push_back({"WORLD_SIZE", fmt::format("{}", s->world_size)});
    env.push_back({"LOCAL_WORLD_SIZE", fmt::format("{}", s->local_world_size)});
    step_vars(*s, env);
  }
}

// A tunable the task already has with another value: kept (ours left out) or overridden.
void respect_existing(const EnvOptions& options, std::vector<EnvVar>& env) {
  std::vector<std::string> kept, replaced;
  for (const auto& name : tunable_variables()) {
    auto theirs = options.existing.find(name);
    auto mine = std::find_if(env.begin(), env.end(), [&](const EnvVar& v) { return v.name == name; });
    if (mine == env.end() || theirs == options.existing.end() || theirs->second.empty() || theirs->second == mine->value)
      continue;
    if (options.override_existing) {
      replaced.push_back(name);
    } else {
      kept.push_back(name);
      env.erase(mine);
    }
  }
  if (!kept.empty()) env.push_back({"TRAINRT_ENV_KEPT", fmt::format("{}", fmt::join(kept, ","))});
  if (!replaced.empty()) env.push_back({"TRAINRT_ENV_OVERRIDDEN", fmt::format("{}", fmt::join(replaced, ","))});
}

}  // namespace

const std::vector<std::string>& tunable_variables() {
  static const std::vector<std::string> names = {"OMP_NUM_THREADS",    "NCCL_IB_HCA",        "UCX_NET_DEVICES",
                                                 "MASTER_ADDR",        "MASTER_PORT",        "NCCL_SOCKET_IFNAME",
                                                 "GLOO_SOCKET_IFNAME", "CUDA_DEVICE_ORDER"};
  return names;
}

std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task,
                               const EnvOptions& options) {
  std::vector<EnvVar> env;
  if (options.launcher) launcher_vars(node, placement, options, env);
  else task_vars(node, placement, task, options, env);
  if (!options.ifname.empty()) {
    // NCCL's bootstrap, Gloo and our runtime all open sockets: on the data network, not the first
    // interface that happens to be up.
    for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TRAINRT_IFNAME"})
      env.push_back({name, options.ifname});
  }
  if (!options.nccl_topo_file.empty()) env.push_back({"NCCL_TOPO_FILE", options.nccl_topo_file});
  respect_existing(options, env);
  return env;
}

}  // namespace trainrt::topo
