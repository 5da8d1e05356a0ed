// The SPANK callbacks: thin glue between Slurm and the pure logic in options/step_plan. No
// exception leaves this file; every callback catches and reports through slurm_error. Nothing here
// can drain a node: slurm_spank_init always succeeds (Slurm 22.05 has no per-plugin failure mode),
// and configuration errors fail only the steps that ask for the plugin.
extern "C" {
#include <slurm/slurm.h>
#include <slurm/spank.h>
}

#include <fmt/format.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "options.hpp"
#include "step_plan.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

// SPANK_PLUGIN(train_runtime, 1) spelled out: in C++ a const object in an extern "C" block still has
// internal linkage, and Slurm would find no plugin symbols.
extern "C" {
extern const char plugin_name[] = "train_runtime";
extern const char plugin_type[] = "spank";
extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
extern const unsigned int spank_plugin_version = 1;
}

namespace {

using trainrt::spank::AdminConfig;
using trainrt::spank::Enable;
using trainrt::spank::StepPlan;
using trainrt::spank::UserOptions;

constexpr int kMpolBind = 2;  // MPOL_BIND from <linux/mempolicy.h>, without a libnuma dependency

struct State {
  AdminConfig admin;
  std::string admin_error;
  bool option_given = false;
  std::string option_text;
  bool active = false;
  bool show = false;
  std::optional<StepPlan> plan;
  std::string plan_error;
};

State& state() {
  static State s;
  return s;
}

int option_callback(int, const char* optarg, int remote) noexcept {
  try {
    State& s = state();
    s.option_given = true;
    // An optional argument given without a value arrives twice in slurmstepd (NULL, then "").
    s.option_text = optarg ? optarg : "";
    UserOptions o = trainrt::spank::parse_user_options(s.option_text);
    if (o.help && !remote) {
      std::fputs(trainrt::spank::user_help().c_str(), stdout);
      std::exit(0);
    }
    return 0;
  } catch (const std::exception& e) {
    slurm_error("%s", e.what());
    return -1;
  } catch (...) {
    slurm_error("--train-runtime: internal error while parsing the option");
    return -1;
  }
}

struct spank_option train_runtime_option = {
    const_cast<char*>("train-runtime"), const_cast<char*>("[OPTS]"),
    const_cast<char*>("GPU-first, rail-aware placement and training environment. OPTS: policy=rail|numa|none, "
                      "show, bind=on|off|dry, gpus=visible-own|visible-all, tasks-per-gpu=N, help"),
    2, 0, option_callback};

std::string job_getenv(spank_t sp, const char* name) {
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return {};
  return buf;
}

UserOptions merged_options(const std::string& env_defaults) {
  return trainrt::spank::merge(trainrt::spank::parse_user_options(env_defaults),
                               trainrt::spank::parse_user_options(state().option_text));
}

bool wants_plugin() {
  const State& s = state();
  if (s.admin.enable == Enable::Never) return false;
  return s.option_given || s.admin.enable == Enable::Always;
}

uint32_t get_u32(spank_t sp, spank_item_t item) {
  uint32_t v = 0;
  if (spank_get_item(sp, item, &v) != ESPANK_SUCCESS)
    throw trainrt::Error(fmt::format("spank_get_item({}) failed", static_cast<int>(item)));
  return v;
}

trainrt::topo::CpuSet own_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) throw trainrt::Error("sched_getaffinity failed");
  trainrt::topo::CpuSet out;
  for (unsigned c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.set(c);
  return out;
}

trainrt::spank::StepFacts gather_facts(spank_t sp, bool live) {
  trainrt::spank::StepFacts f;
  f.job_id = get_u32(sp, S_JOB_ID);
  f.step_id = get_u32(sp, S_JOB_STEPID);
  f.node_id = get_u32(sp, S_JOB_NODEID);
  f.nnodes = get_u32(sp, S_JOB_NNODES);
  f.total_tasks = get_u32(sp, S_JOB_TOTAL_TASK_COUNT);
  uint32_t local = get_u32(sp, S_JOB_LOCAL_TASK_COUNT);
  for (uint32_t i = 0; i < local; ++i) {
    uint32_t global = 0;
    if (spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, i, &global) != ESPANK_SUCCESS)
      throw trainrt::Error(fmt::format("no global id for local task {}", i));
    f.global_ids.push_back(global);
  }
  char* cores = nullptr;
  if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) == ESPANK_SUCCESS && cores) f.alloc_cores = cores;
  f.hostname = job_getenv(sp, "SLURMD_NODENAME");
  if (f.hostname.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    f.hostname = host;
  }
  f.step_nodelist = job_getenv(sp, "SLURM_STEP_NODELIST");
  f.step_gpus = job_getenv(sp, "SLURM_STEP_GPUS");
  f.cuda_visible_devices = job_getenv(sp, "CUDA_VISIBLE_DEVICES");
  if (live) f.stepd_affinity = own_affinity();
  return f;
}

void apply_binding(const trainrt::spank::TaskPlan& t) {
  // Never widen: the task may only narrow what Slurm (cgroups, task/affinity) already allows it.
  trainrt::topo::CpuSet current = own_affinity();
  trainrt::topo::CpuSet target = t.cpus & current;
  if (target.empty())
    throw trainrt::Error(fmt::format("the placement's CPUs {} lie outside the CPUs Slurm gave this task ({}); run "
                                     "with --cpu-bind=none or bind=off",
                                     t.cpus.to_list(), current.to_list()));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : target.members())
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw trainrt::Error(fmt::format("sched_setaffinity({}) failed", target.to_list()));
  if (!t.mems.empty()) {
    unsigned long mask[16] = {};
    for (unsigned m : t.mems)
      if (m < 16 * 64) mask[m / 64] |= 1ul << (m % 64);
    if (syscall(SYS_set_mempolicy, kMpolBind, mask, 16 * 64 + 1) != 0)
      throw trainrt::Error(fmt::format("set_mempolicy(bind, NUMA {}) failed", fmt::join(t.mems, ",")));
  }
}

bool is_special_step(uint32_t step_id) {
  return step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_EXTERN_CONT || step_id == SLURM_INTERACTIVE_STEP;
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) {
  try {
    State& s = state();
    std::vector<std::string> args(av, av + ac);
    try {
      s.admin = trainrt::spank::parse_admin_args(args);
    } catch (const trainrt::Error& e) {
      s.admin_error = e.what();
      if (spank_context() == S_CTX_REMOTE || spank_context() == S_CTX_SLURMD) slurm_error("train-runtime: %s", e.what());
    }
    if (spank_option_register(sp, &train_runtime_option) != ESPANK_SUCCESS)
      slurm_error("train-runtime: could not register --train-runtime");
  } catch (...) {
    slurm_error("train-runtime: internal error in slurm_spank_init");
  }
  return 0;
}

int slurm_spank_init_post_opt(spank_t, int, char**) {
  try {
    State& s = state();
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) return 0;
    if (!s.option_given) return 0;
    if (!s.admin_error.empty()) {
      slurm_error("train-runtime is misconfigured on this cluster (%s); ask your admin", s.admin_error.c_str());
      return -1;
    }
    if (s.admin.enable == Enable::Never) {
      slurm_error("--train-runtime: disabled on this cluster (plugstack.conf enable=never)");
      return -1;
    }
    const char* env = std::getenv("TRAINRT_OPTS");
    try {
      trainrt::spank::parse_user_options(env ? env : "");
    } catch (const trainrt::Error& e) {
      slurm_error("%s (from TRAINRT_OPTS)", e.what());
      return -1;
    }
    return 0;
  } catch (...) {
    slurm_error("train-runtime: internal error in slurm_spank_init_post_opt");
    return -1;
  }
}

int slurm_spank_user_init(spank_t sp, int, char**) {
  State& s = state();
  try {
    if (spank_context() != S_CTX_REMOTE) return 0;
    if (!s.admin_error.empty() && s.option_given) {
      s.active = true;
      s.plan_error = "train-runtime is misconfigured on this node: " + s.admin_error;
      return 0;
    }
    if (!wants_plugin() || is_special_step(get_u32(sp, S_JOB_STEPID))) return 0;
    s.active = true;
    UserOptions user = merged_options(job_getenv(sp, "TRAINRT_OPTS"));
    s.show = user.show;
    const bool live = s.admin.topology_xml.empty();
    trainrt::topo::Node node = live ? trainrt::topo::load_live() : trainrt::topo::load_file(s.admin.topology_xml);
    s.plan = trainrt::spank::plan_step(node, live, gather_facts(sp, live), user, s.admin);
  } catch (const std::exception& e) {
    // user_init errors do not fail an srun step; keep them for task_init, which can.
    s.plan_error = e.what();
  } catch (...) {
    s.plan_error = "internal error while planning the step";
  }
  return 0;
}

int slurm_spank_task_init(spank_t sp, int, char**) {
  State& s = state();
  try {
    if (spank_context() != S_CTX_REMOTE || !s.active) return 0;
    if (!s.plan_error.empty()) {
      if (s.admin.strict) {
        slurm_error("train-runtime: %s", s.plan_error.c_str());
        return -1;
      }
      slurm_spank_log("train-runtime: warning: %s; the task runs unbound (strict=0)", s.plan_error.c_str());
      return 0;
    }
    int task_id = -1;
    if (spank_get_item(sp, S_TASK_ID, &task_id) != ESPANK_SUCCESS || task_id < 0 ||
        static_cast<std::size_t>(task_id) >= s.plan->tasks.size()) {
      slurm_error("train-runtime: no placement for local task %d", task_id);
      return -1;
    }
    const trainrt::spank::TaskPlan& t = s.plan->tasks[static_cast<std::size_t>(task_id)];
    if (s.show && task_id == 0) {
      std::fputs(s.plan->table.c_str(), stderr);
      std::fflush(stderr);
    }
    for (const auto& v : t.env)
      if (spank_setenv(sp, v.name.c_str(), v.value.c_str(), 1) != ESPANK_SUCCESS) {
        slurm_error("train-runtime: could not set %s", v.name.c_str());
        return -1;
      }
    if (t.bind) apply_binding(t);
    return 0;
  } catch (const std::exception& e) {
    slurm_error("train-runtime: %s", e.what());
    return -1;
  } catch (...) {
    slurm_error("train-runtime: internal error in task_init");
    return -1;
  }
}

}  // extern "C"
