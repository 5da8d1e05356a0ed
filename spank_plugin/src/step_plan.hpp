#pragma once
// Everything the plugin decides for one step on one node, as a pure function of the topology, the
// facts Slurm and the node give (StepFacts) and the options. user_init computes it before tasks
// fork; task_init finishes each task against what Slurm did to it (task_plan.hpp) and applies it.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gpu_identity.hpp"
#include "launch_net.hpp"
#include "options.hpp"
#include "trainrt/topology/env.hpp"
#include "trainrt/topology/node.hpp"

namespace trainrt::spank {

struct StepFacts {
  std::uint32_t job_id = 0;
  std::uint32_t step_id = 0;
  std::uint32_t node_id = 0;
  std::uint32_t nnodes = 1;
  std::uint32_t total_tasks = 1;
  std::vector<std::uint32_t> global_ids;  // per local task id
  std::string hostname;
  std::string step_nodelist;              // SLURM_STEP_NODELIST, e.g. "node[01-04]"
  std::string alloc_cores;                // S_STEP_ALLOC_CORES: Slurm core indexes, list syntax
  std::optional<topo::CpuSet> stepd_affinity;  // the stepd's CPUs (live topology only)
  std::string step_gpus;                  // SLURM_STEP_GPUS: gres device numbers, may be empty
  std::string cuda_visible_devices;       // CUDA_VISIBLE_DEVICES as Slurm set it for the step
  unsigned gpus_per_task = 0;             // SLURM_GPUS_PER_TASK (0: not given)
  std::string gpu_bind;                   // SLURM_GPU_BIND / --gpu-bind as the step received it
  std::vector<DriverGpu> driver_gpus;     // /proc/driver/nvidia: empty without a driver or live topology
  PortBand ports;
  std::string master_addr;                // chosen by choose_master_addr(); empty when master_error says why
  std::string master_error;
  std::string ifname;                     // the data network's interface, or ""
  std::string nccl_topo_file;             // NCCL_TOPO_FILE to export, or "" (nccl_topo.hpp decides)
  bool user_asked = true;                 // --train-runtime given (false: plugstack enable=always)
};

struct TaskPlan {
  std::vector<topo::EnvVar> env;  // topo::render_env's, before task_init sees what Slurm did
  topo::CpuSet cpus;
  std::vector<unsigned> mems;
  std::vector<unsigned> gpus;  // Node GPU indexes
  bool bind = false;           // apply cpus/mems in task_init
  topo::StepIdentity identity;
};

struct StepPlan {
  std::vector<TaskPlan> tasks;    // per local task id
  std::string table;              // the `show` rendering
  std::vector<std::string> notes;     // decisions worth knowing: printed with show, always logged
  std::vector<std::string> warnings;  // pitfalls: printed once per step (node 0, local task 0)
  bool launcher = false;          // a launcher step: unbound, node-level variables only
  bool live = false;              // the topology is this machine's
  BindMode bind = BindMode::On;
  MemPolicy mem = MemPolicy::Prefer;
  EnvMode env_mode = EnvMode::Keep;
  std::string master_error;       // no MASTER_ADDR could be chosen: tasks fail unless the user set one
  std::map<std::string, unsigned> gpu_of_slurm_id;  // Slurm's GPU names (device numbers, UUIDs) -> Node index
  std::vector<unsigned> step_gpus;                  // the step's GPUs on this node, Node indexes
  bool slurm_local_ids = false;   // Slurm's CUDA_VISIBLE_DEVICES counts from 0 (ConstrainDevices)
  std::optional<topo::CpuSet> stepd_affinity;  // a task with fewer CPUs was bound by Slurm
  // What the task stage needs to place a task around a GPU Slurm bound it to, and to render its
  // variables again from what it decided.
  topo::Node node;
  topo::PlacementRequest request;
  topo::Placement placement;
  topo::EnvOptions env_options;  // without `step`: each task's is its TaskPlan::identity
};

// `topology_is_live`: the Node describes this machine (binding is possible); false for a cached XML
// of another box, which forces bind=dry. Throws trainrt::Error with a user-facing message.
StepPlan plan_step(const topo::Node& node, bool topology_is_live, const StepFacts& facts, const UserOptions& user,
                   const AdminConfig& admin);

// The first host of a Slurm hostlist: "gpu[003-010,12],login1" -> "gpu003".
std::string first_host(std::string_view hostlist);

}  // namespace trainrt::spank
