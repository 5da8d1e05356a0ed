#pragma once
// The second half of a task's placement, done in task_init against what Slurm already did to that
// task: the GPU Slurm bound it to (--gpus-per-task), the CPUs Slurm bound it to (--cpu-bind, site
// defaults), a --mem-bind of the user's, and the variables the user or the site exported. Pure:
// the plugin gathers TaskFacts and applies FinalTask. It decides; the variables themselves come
// from topo::render_env (trainrt/topology/env.hpp), their one writer.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "step_plan.hpp"

namespace trainrt::spank {

struct TaskFacts {
  topo::CpuSet affinity;                   // the task's CPUs when task_init runs
  std::map<std::string, std::string> env;  // the task's values of task_env_names(), where set
};

struct FinalTask {
  std::vector<topo::EnvVar> env;           // to set
  std::optional<topo::CpuSet> cpus;        // bind to these; nullopt: leave the affinity alone
  std::vector<unsigned> mems;              // NUMA nodes of the final CPUs
  MemPolicy mem = MemPolicy::Off;          // how to apply `mems`
  std::vector<std::string> notes;          // what was kept, narrowed or overridden, and why
  std::vector<std::string> warnings;       // pitfalls the user should hear about once per step
};

// What finalize_task reads from the task's environment: topo::tunable_variables() (a value the task
// already has wins unless env=override) and what Slurm says it bound.
std::vector<std::string> task_env_names(const StepPlan& plan);

// Throws trainrt::Error with a user-facing message when the task cannot run as planned.
FinalTask finalize_task(const StepPlan& plan, unsigned local_id, const TaskFacts& facts);

}  // namespace trainrt::spank
