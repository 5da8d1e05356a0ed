#pragma once
// Everything the plugin decides for one step on one node, as a pure function of the topology, the
// facts Slurm gives (StepFacts) and the options. user_init computes it before tasks fork;
// task_init only applies it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  std::string step_gpus;                  // SLURM_STEP_GPUS (gres indexes), may be empty
  std::string cuda_visible_devices;       // CUDA_VISIBLE_DEVICES as Slurm set it, may be empty
};

struct TaskPlan {
  std::vector<topo::EnvVar> env;
  topo::CpuSet cpus;
  std::vector<unsigned> mems;
  bool bind = false;  // apply cpus/mems in task_init
};

struct StepPlan {
  std::vector<TaskPlan> tasks;  // per local task id
  std::string table;            // the `show` rendering
};

// `topology_is_live`: the Node describes this machine (binding is possible); false for a cached XML
// of another box, which forces bind=dry. Throws trainrt::Error with a user-facing message.
StepPlan plan_step(const topo::Node& node, bool topology_is_live, const StepFacts& facts, const UserOptions& user,
                   const AdminConfig& admin);

// The first host of a Slurm hostlist: "gpu[003-010,12],login1" -> "gpu003".
std::string first_host(std::string_view hostlist);
// Distinct for concurrent steps of one job (step id) and for jobs sharing a node (job id):
// 20000 + (job_id % 1000) * 20 + step_id % 20.
unsigned master_port(std::uint32_t job_id, std::uint32_t step_id);

}  // namespace trainrt::spank
