// The SPANK callbacks: thin glue between Slurm and the pure logic in options, step_plan and
// task_plan. Every callback runs through guarded(), so no exception leaves this file. Nothing here
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
#include <memory>
#include <optional>
#include <string>

#include "gpu_identity.hpp"
#include "launch_net.hpp"
#include "nccl_topo.hpp"
#include "options.hpp"
#include "step_plan.hpp"
#include "task_plan.hpp"
#include "trainrt/data_interface.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/topology/cache.hpp"
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

using namespace trainrt::spank;
namespace topo = trainrt::topo;

// From <linux/mempolicy.h>, without a libnuma dependency.
constexpr int kMpolPreferred = 1, kMpolBind = 2, kMpolPreferredMany = 5;
constexpr unsigned kMaxCpus = 65536;  // the largest CPU set the plugin asks the kernel about

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

// Every callback's body runs here: an exception becomes one escaped line through slurm_error and
// the callback's error code.
template <class Body>
int guarded(const char* where, int rc_on_error, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    slurm_error("train-runtime: %s", printable(e.what()).c_str());
  } catch (...) {
    slurm_error("train-runtime: internal error in %s", where);
  }
  return rc_on_error;
}

int option_callback(int, const char* optarg, int remote) noexcept {
  return guarded("the option callback", -1, [&] {
    State& s = state();
    s.option_given = true;
    // An optional argument given without a value arrives twice in slurmstepd (NULL, then ""); a
    // bare `#SBATCH --train-runtime` reaches the job's sruns as the text "(null)" (Slurm 22.05
    // formats the NULL into the environment variable it passes options in).
    s.option_text = optarg && std::string_view(optarg) != "(null)" ? optarg : "";
    UserOptions o = parse_user_options(s.option_text);
    if (o.help && !remote) {
      std::fputs(user_help().c_str(), stdout);
      std::exit(0);
    }
    return 0;
  });
}

struct spank_option train_runtime_option = {
    const_cast<char*>("train-runtime"), const_cast<char*>("[OPTS]"),
    const_cast<char*>("GPU-first, rail-aware placement and training environment. OPTS: policy=rail|numa|none, "
                      "show, bind=on|off|dry, gpus=visible-all|visible-own, nics=node|own, mem=prefer|bind|off, "
                      "env=keep|override, launcher, tasks-per-gpu=N, help"),
    2, 0, option_callback};

std::string job_getenv(spank_t sp, const char* name) {
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof buf) != ESPANK_SUCCESS) return {};
  return buf;
}

UserOptions merged_options(const std::string& env_defaults) {
  return merge(parse_user_options(env_defaults), parse_user_options(state().option_text));
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

// A CPU set of any size the kernel uses (cpu_set_t stops at 1024 CPUs).
struct CpuSetFree {
  void operator()(cpu_set_t* p) const noexcept { CPU_FREE(p); }
};
struct KernelCpuSet {
  unsigned ncpus;
  std::size_t bytes;
  std::unique_ptr<cpu_set_t, CpuSetFree> set;
  explicit KernelCpuSet(unsigned n) : ncpus(n), bytes(CPU_ALLOC_SIZE(n)), set(CPU_ALLOC(n)) {
    if (!set) throw std::bad_alloc();
    CPU_ZERO_S(bytes, set.get());
  }
};

topo::CpuSet own_affinity() {
  for (unsigned n = 1024; n <= kMaxCpus; n *= 2) {
    KernelCpuSet k(n);
    if (sched_getaffinity(0, k.bytes, k.set.get()) == 0) {
      topo::CpuSet out;
      for (unsigned c = 0; c < n; ++c)
        if (CPU_ISSET_S(c, k.bytes, k.set.get())) out.set(c);
      return out;
    }
    if (errno != EINVAL) break;
  }
  throw trainrt::Error("sched_getaffinity failed");
}


void choose_network(spank_t sp, StepFacts& f) {
  // The job's own variables first, then the site's ifname=: the rule the runtime and trainrt.torch
  // apply too (trainrt/data_interface.hpp), so MASTER_ADDR is on the network they use.
  f.ifname = trainrt::data_interface(
                 [&](std::string_view name) -> std::optional<std::string> {
                   std::string v = job_getenv(sp, std::string(name).c_str());
                   return v.empty() ? std::nullopt : std::optional<std::string>(std::move(v));
                 },
                 trainrt::node_interfaces(), state().admin.ifname, "plugstack.conf ifname")
                 .name;
  MasterInput in;
  in.first_host = first_host(f.step_nodelist.empty() ? f.hostname : f.step_nodelist);
  in.this_is_first = f.node_id == 0;
  in.nnodes = f.nnodes;
  in.ifname = f.ifname;
  if (f.nnodes > 1) in.resolved = resolve(in.first_host);
  if (!f.ifname.empty()) in.ifname_networks = interface_networks(f.ifname);
  try {
    f.master_addr = choose_master_addr(in);
  } catch (const trainrt::Error& e) {
    f.master_error = e.what();
  }
}

StepFacts gather_facts(spank_t sp, bool live) {
  StepFacts f;
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
  // Not a count: taken as --gpus-per-task not given (0), so no per-task GPU binding is assumed.
  f.gpus_per_task = trainrt::to_number(job_getenv(sp, "SLURM_GPUS_PER_TASK"), 0u, 1024u).value_or(0);
  f.gpu_bind = job_getenv(sp, "SLURM_GPU_BIND");
  if (live) {
    f.stepd_affinity = own_affinity();
    f.driver_gpus = read_driver_gpus();
  }
  f.ports = read_port_band();
  f.user_asked = state().option_given;
  choose_network(sp, f);
  return f;
}

void apply_binding(const FinalTask& t) {
  if (t.cpus) {
    unsigned top = 0;
    for (unsigned c : t.cpus->members()) top = std::max(top, c);
    KernelCpuSet k(std::max(1024u, top + 1));
    for (unsigned c : t.cpus->members()) CPU_SET_S(c, k.bytes, k.set.get());
    if (sched_setaffinity(0, k.bytes, k.set.get()) != 0)
      throw trainrt::Error(fmt::format("sched_setaffinity({}) failed", t.cpus->to_list()));
  }
  if (t.mem == MemPolicy::Off || t.mems.empty()) return;
  constexpr unsigned kMaxNode = 4096;
  unsigned long mask[kMaxNode / 64] = {};
  for (unsigned m : t.mems)
    if (m < kMaxNode) mask[m / 64] |= 1ul << (m % 64);
  // prefer: the first choice for every page, other nodes when it is full (no early OOM kill);
  // several nodes need MPOL_PREFERRED_MANY (Linux 5.15+), else the first one is preferred.
  long rc = -1;
  if (t.mem == MemPolicy::Bind) {
    rc = syscall(SYS_set_mempolicy, kMpolBind, mask, kMaxNode + 1);
  } else if (t.mems.size() > 1) {
    rc = syscall(SYS_set_mempolicy, kMpolPreferredMany, mask, kMaxNode + 1);
  }
  if (rc != 0 && t.mem == MemPolicy::Prefer) {
    unsigned long first[kMaxNode / 64] = {};
    first[t.mems.front() / 64] |= 1ul << (t.mems.front() % 64);
    rc = syscall(SYS_set_mempolicy, kMpolPreferred, first, kMaxNode + 1);
  }
  if (rc != 0) throw trainrt::Error(fmt::format("set_mempolicy(NUMA {}) failed", fmt::join(t.mems, ",")));
}

// NCCL_TOPO_FILE for every task of the step (nccl_topo.hpp says when), into the facts the plan
// renders; returns the note to log, or "". The file's check runs only when it decides something;
// in auto mode every step reads the VM test's few small files, which is how it tells bare metal,
// where nothing more is read.
std::string choose_nccl_topo_file(spank_t sp, const topo::Node& node, bool cache_used, StepFacts& facts) {
  const AdminConfig& admin = state().admin;
  if (admin.nccl_topo == NcclTopo::Off || admin.topology_cache.empty()) return {};
  NcclTopoInput in;
  in.mode = admin.nccl_topo;
  in.is_vm = in.mode == NcclTopo::Auto && this_node_is_vm();
  in.cache_used = cache_used;
  in.path = topo::nccl_topo_path(admin.topology_cache);
  in.user_value = job_getenv(sp, "NCCL_TOPO_FILE");
  NcclTopoChoice c = choose_nccl_topo(in, [&] { return topo::check_nccl_topo_file(node, in.path); });
  facts.nccl_topo_file = c.export_path;
  return c.note;
}

bool is_special_step(uint32_t step_id) {
  return step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_EXTERN_CONT || step_id == SLURM_INTERACTIVE_STEP;
}

void say(const std::string& text) {
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("slurm_spank_init", 0, [&] {
    State& s = state();
    try {
      s.admin = parse_admin_args(std::vector<std::string>(av, av + ac));
    } catch (const trainrt::Error& e) {
      s.admin_error = e.what();
      if (spank_context() == S_CTX_REMOTE || spank_context() == S_CTX_SLURMD)
        slurm_error("train-runtime: %s", printable(e.what()).c_str());
    }
    if (spank_option_register(sp, &train_runtime_option) != ESPANK_SUCCESS)
      slurm_error("train-runtime: could not register --train-runtime");
    return 0;
  });
}

int slurm_spank_init_post_opt(spank_t, int, char**) {
  return guarded("slurm_spank_init_post_opt", -1, [&] {
    State& s = state();
    spank_context_t ctx = spank_context();
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) return 0;
    if (!s.option_given) return 0;
    if (!s.admin_error.empty())
      throw trainrt::Error(fmt::format("misconfigured on this cluster ({}); ask your admin", s.admin_error));
    if (s.admin.enable == Enable::Never)
      throw trainrt::Error("--train-runtime is disabled on this cluster (plugstack.conf enable=never)");
    const char* env = std::getenv("TRAINRT_OPTS");
    try {
      parse_user_options(env ? env : "");
    } catch (const trainrt::Error& e) {
      throw trainrt::Error(fmt::format("{} (from TRAINRT_OPTS)", e.what()));
    }
    return 0;
  });
}

int slurm_spank_user_init(spank_t sp, int, char**) {
  return guarded("slurm_spank_user_init", 0, [&] {
    State& s = state();
    if (spank_context() != S_CTX_REMOTE) return 0;
    if (!s.admin_error.empty() && s.option_given) {
      s.active = true;
      s.plan_error = "train-runtime is misconfigured on this node: " + s.admin_error;
      return 0;
    }
    if (!wants_plugin() || is_special_step(get_u32(sp, S_JOB_STEPID))) return 0;
    s.active = true;
    try {
      UserOptions user = merged_options(job_getenv(sp, "TRAINRT_OPTS"));
      s.show = user.show;
      const bool live = s.admin.topology_xml.empty();
      // The digested cache (topo::kDefaultCachePath, written by `trainrt-topo write-cache`) when
      // fresh for this source, else discovery as before, saying why the cache was passed over.
      // topology_cache=off gives an empty path: discovery every step.
      std::string cache_note;
      bool cache_used = false;
      const std::string& cache = s.admin.topology_cache;
      topo::Node node = live ? topo::load_cached_or_live(&cache_note, cache, &cache_used)
                             : topo::load_cached_or_file(s.admin.topology_xml, &cache_note, cache, &cache_used);
      if (!cache_note.empty()) slurm_info("train-runtime: %s", printable(cache_note).c_str());
      StepFacts facts = gather_facts(sp, live);
      const std::string nccl_topo_note = choose_nccl_topo_file(sp, node, cache_used, facts);
      s.plan = plan_step(node, live, facts, user, s.admin);
      if (!nccl_topo_note.empty()) s.plan->notes.push_back(nccl_topo_note);
      for (const auto& n : s.plan->notes) slurm_info("train-runtime: %s", printable(n).c_str());
    } catch (const std::exception& e) {
      // user_init errors do not fail an srun step; keep them for task_init, which can.
      s.plan_error = e.what();
    }
    return 0;
  });
}

int slurm_spank_task_init(spank_t sp, int, char**) {
  return guarded("slurm_spank_task_init", -1, [&] {
    State& s = state();
    if (spank_context() != S_CTX_REMOTE || !s.active) return 0;
    if (!s.plan_error.empty()) {
      if (s.admin.strict) throw trainrt::Error(s.plan_error);
      slurm_spank_log("train-runtime: warning: %s; the task runs unbound (strict=0)", printable(s.plan_error).c_str());
      return 0;
    }
    int task_id = -1;
    if (spank_get_item(sp, S_TASK_ID, &task_id) != ESPANK_SUCCESS || task_id < 0)
      throw trainrt::Error("Slurm gave no local task id");
    TaskFacts facts;
    facts.affinity = own_affinity();
    for (const auto& name : task_env_names(*s.plan))
      if (std::string v = job_getenv(sp, name.c_str()); !v.empty()) facts.env[name] = v;
    FinalTask t = finalize_task(*s.plan, static_cast<unsigned>(task_id), facts);
    if (task_id == 0) {
      std::string text;
      if (s.show) text += s.plan->table;
      if (get_u32(sp, S_JOB_NODEID) == 0) {
        for (const auto& w : s.plan->warnings) text += fmt::format("train-runtime: note: {}\n", printable(w));
        for (const auto& w : t.warnings) text += fmt::format("train-runtime: note: {}\n", printable(w));
      }
      if (s.show)
        for (const auto& n : s.plan->notes) text += fmt::format("train-runtime: {}\n", printable(n));
      say(text);
    }
    for (const auto& n : t.notes) {
      slurm_info("train-runtime: %s", printable(n).c_str());
      if (s.show) say(fmt::format("train-runtime: {}\n", printable(n)));
    }
    for (const auto& v : t.env)
      if (spank_setenv(sp, v.name.c_str(), v.value.c_str(), 1) != ESPANK_SUCCESS)
        throw trainrt::Error(fmt::format("could not set {}", v.name));
    apply_binding(t);
    return 0;
  });
}

}  // extern "C"
