#pragma once
// The one place that turns a task's placement into environment variables: the contract between
// the SPANK plugin (which sets them) and the runtime, NCCL, UCX and OpenMP (which read them).
// docs/environment.md documents every variable produced here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/topology/placement.hpp"

namespace trainrt::topo {

struct EnvVar {
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

// Who the task is within its Slurm step; the launcher (the SPANK plugin) knows it, placement does not.
struct StepIdentity {
  unsigned rank = 0;              // global task id
  unsigned world_size = 1;
  unsigned local_world_size = 1;  // tasks on this node
  unsigned node_id = 0;
  unsigned nnodes = 1;
  std::string master_addr;
  unsigned master_port = 0;
  std::uint32_t job_id = 0;
  std::uint32_t step_id = 0;
};

struct EnvOptions {
  // How CUDA_VISIBLE_DEVICES names each GPU, by Node GPU index (Slurm may number them its own
  // way); empty: the PCI-order index itself.
  std::vector<std::string> cuda_ids;
  bool visible_all = false;  // list every allowed GPU; TRAINRT_CUDA_DEVICE points at the task's own
  bool bound = true;         // false when the launcher does not apply the binding (bind=off|dry)
  std::optional<StepIdentity> step;
};

std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task,
                               const EnvOptions& options = {});

// "mlx5_3:1,mlx5_4:1" for the task's NICs; empty when a NIC has no recorded RDMA name.
std::string nic_port_list(const Node& node, const TaskPlacement& task);

}  // namespace trainrt::topo
