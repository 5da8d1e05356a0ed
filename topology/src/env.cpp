#include "trainrt/topology/env.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace trainrt::topo {

std::string nic_port_list(const Node& node, const TaskPlacement& task) {
  std::vector<std::string> items;
  for (unsigned n : task.nics) {
    const Nic& nic = node.nics[n];
    if (nic.rdma_name.empty()) return {};
    if (nic.ports.empty()) {
      items.push_back(nic.rdma_name);
    } else {
      for (const auto& port : nic.ports) items.push_back(fmt::format("{}:{}", nic.rdma_name, port.number));
    }
  }
  return fmt::format("{}", fmt::join(items, ","));
}

namespace {

std::string cuda_id(const EnvOptions& options, unsigned gpu) {
  return gpu < options.cuda_ids.size() ? options.cuda_ids[gpu] : fmt::format("{}", gpu);
}

}  // namespace

std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task,
                               const EnvOptions& options) {
  std::vector<EnvVar> env;
  std::vector<std::string> busids, nics, rails;
  for (unsigned g : task.gpus) busids.push_back(node.gpus[g].busid);
  for (unsigned n : task.nics) {
    const Nic& nic = node.nics[n];
    nics.push_back(nic.rdma_name.empty() ? nic.busid : nic.rdma_name);
    rails.push_back(fmt::format("{}", placement.rails.rail_of_nic[n]));
  }

  if (!task.gpus.empty()) {
    // Our GPU indexes are PCI bus order; CUDA numbers devices that way only when told to.
    env.push_back({"CUDA_DEVICE_ORDER", "PCI_BUS_ID"});
    std::vector<std::string> visible;
    std::size_t own = 0;
    if (options.visible_all) {
      for (unsigned g : placement.allowed_gpus) visible.push_back(cuda_id(options, g));
      auto it = std::find(placement.allowed_gpus.begin(), placement.allowed_gpus.end(), task.gpus.front());
      own = static_cast<std::size_t>(it - placement.allowed_gpus.begin());
    } else {
      for (unsigned g : task.gpus) visible.push_back(cuda_id(options, g));
    }
    env.push_back({"CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(visible, ","))});
    env.push_back({"TRAINRT_CUDA_DEVICE", fmt::format("{}", own)});
  }
  if (std::string ports = nic_port_list(node, task); !ports.empty()) {
    bool efa = false;
    for (unsigned n : task.nics) efa |= node.nics[n].link == LinkLayer::Efa;
    if (!efa) {
      // A leading '=' makes NCCL match names exactly, so mlx5_1 does not also select mlx5_10.
      env.push_back({"NCCL_IB_HCA", "=" + ports});
      env.push_back({"UCX_NET_DEVICES", ports});
    }
  }
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
    // What torch.distributed's env:// rendezvous and most launchers read.
    env.push_back({"RANK", fmt::format("{}", s->rank)});
    env.push_back({"LOCAL_RANK", fmt::format("{}", task.local_rank)});
    env.push_back({"WORLD_SIZE", fmt::format("{}", s->world_size)});
    env.push_back({"LOCAL_WORLD_SIZE", fmt::format("{}", s->local_world_size)});
    env.push_back({"GROUP_RANK", fmt::format("{}", s->node_id)});
    env.push_back({"MASTER_ADDR", s->master_addr});
    env.push_back({"MASTER_PORT", fmt::format("{}", s->master_port)});
    env.push_back({"TRAINRT_NODE_ID", fmt::format("{}", s->node_id)});
    env.push_back({"TRAINRT_NNODES", fmt::format("{}", s->nnodes)});
    env.push_back({"TRAINRT_JOB_ID", fmt::format("{}", s->job_id)});
    env.push_back({"TRAINRT_STEP_ID", fmt::format("{}", s->step_id)});
  }
  return env;
}

}  // namespace trainrt::topo
