#pragma once
// The one place that turns a task's placement into environment variables: the contract between
// the SPANK plugin (which sets them) and the runtime, NCCL, UCX, PyTorch and OpenMP (which read
// them). The plugin writes no variable of its own: it decides (which GPUs Slurm bound, which CPUs
// the task really has, what the user exported) and hands the decision to render_env().
// docs/environment.md documents every variable produced here and the evidence for its rule.
#include <cstdint>
#include <map>
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

// Which GPUs CUDA_VISIBLE_DEVICES lists.
//   Node:     every GPU of the step on this node, the same list for every task, ordered so that
//             position LOCAL_RANK is the task's own GPU (torchrun's `set_device(LOCAL_RANK)` idiom),
//             and NCCL keeps NVLink/P2P and CUDA IPC between the ranks' GPUs.
//   Own:      only the task's own GPU(s) (TRAINRT_CUDA_DEVICE=0).
//   Listed:   exactly EnvOptions::listed_gpus, in that order (the launcher bound the task to a GPU
//             and chose the order); TRAINRT_CUDA_DEVICE is the task's first GPU's position.
//   Confined: the launcher confined the task to its own GPU(s) and numbers them from 0: they are
//             named only where every name is a UUID (which means the same device inside the
//             confinement), else the launcher's CUDA_VISIBLE_DEVICES stands (none is set);
//             TRAINRT_CUDA_DEVICE=0.
enum class GpuView { Node, Own, Listed, Confined };

// Which NIC ports NCCL_IB_HCA lists.
//   Node: every rail port of the node, the same list on every rank of the node (NCCL picks each
//         GPU's nearest NIC itself and reaches others through PXN; lists that differ between the
//         ranks of a node break its ring building: NVIDIA/nccl#1478).
//   Task: only the task's own rail (on request).
enum class HcaScope { Node, Task };

struct EnvOptions {
  // How CUDA_VISIBLE_DEVICES names each GPU, by Node GPU index (ordinals or UUIDs); empty: the
  // PCI-order index itself.
  std::vector<std::string> cuda_ids;
  GpuView gpu_view = GpuView::Node;
  HcaScope hca_scope = HcaScope::Node;
  std::vector<unsigned> listed_gpus;  // GpuView::Listed, Node GPU indexes
  bool rail_ids = false;  // NCCL_IB_HCA entries as hca:port:rail (NCCL >= 2.30.7; the admin enables it)
  bool bound = true;      // false when the launcher does not apply the binding (bind=off|dry)
  std::optional<StepIdentity> step;
  // A launcher step's one task (torchrun, mpirun's daemons) starts the ranks itself: it gets only
  // what holds for the whole node (the node's rails, who the node is, where the ranks meet).
  bool launcher = false;
  std::string ifname;          // the data network's interface: NCCL's, Gloo's and our sockets go there
  std::string nccl_topo_file;  // NCCL_TOPO_FILE, where the launcher exports one
  // The task's own values of tunable_variables() (exported by the user or set by the site). One
  // that differs from ours wins, and is named in TRAINRT_ENV_KEPT, unless `override_existing`:
  // then ours is set and it is named in TRAINRT_ENV_OVERRIDDEN.
  std::map<std::string, std::string> existing;
  bool override_existing = false;
};

// Variables that tune a program rather than say who it is: what EnvOptions::existing may keep.
const std::vector<std::string>& tunable_variables();

// Every variable a task gets, in a stable order: the placement's, the step's (options.step), the
// data network's, NCCL_TOPO_FILE, then TRAINRT_ENV_KEPT/OVERRIDDEN.
std::vector<EnvVar> render_env(const Node& node, const Placement& placement, const TaskPlacement& task,
                               const EnvOptions& options = {});

// The node-wide GPU order of GpuView::Node: each task's GPUs in local-rank order, then the other
// allowed GPUs in PCI order, each once.
std::vector<unsigned> node_gpu_order(const Placement& placement);

// "mlx5_3:1,mlx5_4:1" for the given NICs (Node::nics indexes), with ":rail" appended per port when
// `rail_of_nic` is given; empty when a NIC has no recorded RDMA name.
std::string nic_port_list(const Node& node, const std::vector<unsigned>& nics,
                          const std::vector<int>* rail_of_nic = nullptr);
// The task's own rail ports (what UCX_NET_DEVICES and HcaScope::Task use).
std::string nic_port_list(const Node& node, const TaskPlacement& task);
// Every rail NIC of the node, PCI order.
std::vector<unsigned> node_rail_nics(const Placement& placement);

// Whole cores of `node` that hold at least one PU of `cpus`.
unsigned whole_cores(const Node& node, const CpuSet& cpus);

}  // namespace trainrt::topo
