#include "trainrt/topology/env.hpp"

#include <fmt/format.h>

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

std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task) {
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
    env.push_back({"CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(task.gpus, ","))});
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
  env.push_back({"TRAINRT_BIND", task.bind ? "1" : "0"});
  return env;
}

}  // namespace trainrt::topo
