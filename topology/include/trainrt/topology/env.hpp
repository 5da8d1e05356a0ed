#pragma once
// The one place that turns a task's placement into environment variables: the contract between
// the SPANK plugin (which sets them) and the runtime, NCCL, UCX and OpenMP (which read them).
// docs/environment.md documents every variable produced here.
#include <string>
#include <vector>

#include "trainrt/topology/placement.hpp"

namespace trainrt::topo {

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task);

// "mlx5_3:1,mlx5_4:1" for the task's NICs; empty when a NIC has no recorded RDMA name.
std::string nic_port_list(const Node& node, const TaskPlacement& task);

}  // namespace trainrt::topo
