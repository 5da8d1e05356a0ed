#include "options.hpp"

#include <fmt/format.h>

#include <set>
#include <utility>

#include "trainrt/data_interface.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

constexpr std::size_t kMaxOptionText = 1024;
constexpr unsigned kMaxTasksPerGpu = 64;
constexpr const char* kUserValid =
    "valid: policy=rail|numa|none, show, bind=on|off|dry, gpus=visible-all|visible-own, nics=node|own, "
    "mem=prefer|bind|off, env=keep|override, launcher[=auto|on|off], tasks-per-gpu=1..64, help";

[[noreturn]] void reject(const std::string& what) {
  throw Error(fmt::format("--train-runtime: {}; {}", what, kUserValid));
}

constexpr std::pair<const char*, topo::Policy> kPolicies[] = {
    {"rail", topo::Policy::Rail}, {"numa", topo::Policy::Numa}, {"none", topo::Policy::None}};
constexpr std::pair<const char*, BindMode> kBind[] = {{"on", BindMode::On}, {"off", BindMode::Off}, {"dry", BindMode::Dry}};
constexpr std::pair<const char*, GpuVisibility> kGpus[] = {{"visible-all", GpuVisibility::All},
                                                           {"visible-own", GpuVisibility::Own}};
constexpr std::pair<const char*, NicScope> kNics[] = {{"node", NicScope::Node}, {"own", NicScope::Own}};
constexpr std::pair<const char*, MemPolicy> kMem[] = {
    {"prefer", MemPolicy::Prefer}, {"bind", MemPolicy::Bind}, {"off", MemPolicy::Off}};
constexpr std::pair<const char*, EnvMode> kEnv[] = {{"keep", EnvMode::Keep}, {"override", EnvMode::Override}};
constexpr std::pair<const char*, NcclTopo> kNcclTopo[] = {
    {"auto", NcclTopo::Auto}, {"always", NcclTopo::Always}, {"off", NcclTopo::Off}};
constexpr std::pair<const char*, LauncherMode> kLauncher[] = {
    {"auto", LauncherMode::Auto}, {"on", LauncherMode::On}, {"off", LauncherMode::Off}};

template <class E, std::size_t N>
const E* find_value(const std::pair<const char*, E> (&table)[N], std::string_view value) {
  for (const auto& [text, v] : table)
    if (value == text) return &v;
  return nullptr;
}

template <class E, std::size_t N>
E choose(const std::pair<const char*, E> (&table)[N], std::string_view key, std::string_view value) {
  if (const E* v = find_value(table, value)) return *v;
  reject(fmt::format("unknown {} '{}'", key, printable(value)));
}

template <class E, std::size_t N>
const char* name_of(const std::pair<const char*, E> (&table)[N], E value) {
  for (const auto& [text, v] : table)
    if (v == value) return text;
  return "?";
}

}  // namespace

const char* to_string(BindMode mode) { return name_of(kBind, mode); }
const char* to_string(NcclTopo mode) { return name_of(kNcclTopo, mode); }

UserOptions parse_user_options(std::string_view text) {
  UserOptions o;
  if (text.empty()) return o;
  if (text.size() > kMaxOptionText) reject(fmt::format("option text is {} bytes, longer than {}", text.size(), kMaxOptionText));
  std::set<std::string, std::less<>> seen;
  for (std::string_view item : split(text, ',')) {
    if (item.empty()) reject(fmt::format("empty item in '{}'", printable(text)));
    std::size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::optional<std::string_view> value;
    if (eq != std::string_view::npos) value = item.substr(eq + 1);
    if (key.empty()) reject(fmt::format("'{}' has no option name before '='", printable(item)));
    if (!seen.insert(std::string(key)).second) reject(fmt::format("'{}' given twice", printable(key)));
    auto need_value = [&]() -> std::string_view {
      if (!value || value->empty()) reject(fmt::format("'{}' needs a value", printable(key)));
      return *value;
    };
    auto no_value = [&] {
      if (value) reject(fmt::format("'{}' takes no value (got '{}')", printable(key), printable(*value)));
    };
    if (key == "policy") {
      o.policy = choose(kPolicies, "policy", need_value());
    } else if (key == "bind") {
      o.bind = choose(kBind, "bind mode", need_value());
    } else if (key == "gpus") {
      o.gpus = choose(kGpus, "gpus mode", need_value());
    } else if (key == "nics") {
      o.nics = choose(kNics, "nics scope", need_value());
    } else if (key == "mem") {
      o.mem = choose(kMem, "mem policy", need_value());
    } else if (key == "env") {
      o.env = choose(kEnv, "env mode", need_value());
    } else if (key == "launcher") {
      o.launcher = value ? choose(kLauncher, "launcher mode", need_value()) : LauncherMode::On;
    } else if (key == "tasks-per-gpu") {
      try {
        o.tasks_per_gpu = parse_number(need_value(), "a number of tasks per GPU", 1u, kMaxTasksPerGpu, "tasks-per-gpu");
      } catch (const Error& e) {
        reject(e.what());
      }
    } else if (key == "show") {
      no_value();
      o.show = true;
    } else if (key == "help") {
      no_value();
      o.help = true;
    } else {
      reject(fmt::format("unknown option '{}'", printable(key)));
    }
  }
  return o;
}

std::string to_text(const UserOptions& o) {
  std::vector<std::string> items;
  if (o.policy) items.push_back(fmt::format("policy={}", name_of(kPolicies, *o.policy)));
  if (o.bind) items.push_back(fmt::format("bind={}", name_of(kBind, *o.bind)));
  if (o.gpus) items.push_back(fmt::format("gpus={}", name_of(kGpus, *o.gpus)));
  if (o.nics) items.push_back(fmt::format("nics={}", name_of(kNics, *o.nics)));
  if (o.mem) items.push_back(fmt::format("mem={}", name_of(kMem, *o.mem)));
  if (o.env) items.push_back(fmt::format("env={}", name_of(kEnv, *o.env)));
  if (o.launcher) items.push_back(fmt::format("launcher={}", name_of(kLauncher, *o.launcher)));
  if (o.tasks_per_gpu) items.push_back(fmt::format("tasks-per-gpu={}", *o.tasks_per_gpu));
  if (o.show) items.emplace_back("show");
  if (o.help) items.emplace_back("help");
  return fmt::format("{}", fmt::join(items, ","));
}

UserOptions merge(const UserOptions& base, const UserOptions& over) {
  UserOptions m = base;
  if (over.policy) m.policy = over.policy;
  if (over.bind) m.bind = over.bind;
  if (over.gpus) m.gpus = over.gpus;
  if (over.nics) m.nics = over.nics;
  if (over.mem) m.mem = over.mem;
  if (over.env) m.env = over.env;
  if (over.launcher) m.launcher = over.launcher;
  if (over.tasks_per_gpu) m.tasks_per_gpu = over.tasks_per_gpu;
  m.show = base.show || over.show;
  m.help = base.help || over.help;
  return m;
}

std::string user_help() {
  return "Usage: --train-runtime[=OPTS]   GPU-first, rail-aware placement of every task (train-runtime)\n"
         "OPTS is a comma list (defaults also from the TRAINRT_OPTS environment variable):\n"
         "  policy=rail|numa|none   rail (default): GPU + the NIC on its PCIe switch + its NUMA node's cores\n"
         "                          numa: GPU + its NUMA node's cores; none: GPUs only, no binding\n"
         "                          (a step without GPUs falls back to numa unless policy=rail is given)\n"
         "  bind=on|off|dry         on (default): bind CPUs and memory; off: environment only;\n"
         "                          dry: compute and export, bind nothing\n"
         "  gpus=visible-all|visible-own\n"
         "                          visible-all (default): every task sees the step's GPUs on its node,\n"
         "                          position LOCAL_RANK being its own (torch.cuda.set_device(LOCAL_RANK));\n"
         "                          visible-own: only the task's GPU. TRAINRT_CUDA_DEVICE names the own one\n"
         "  nics=node|own           NCCL_IB_HCA lists every rail port of the node (default) or the task's own\n"
         "  mem=prefer|bind|off     memory on the cores' NUMA node: preferred (default), strict, untouched\n"
         "  env=keep|override       variables you exported (OMP_NUM_THREADS, MASTER_PORT, NCCL_IB_HCA, ...)\n"
         "                          are kept (default) or replaced; either way the choice is logged\n"
         "  launcher[=auto|on|off]  a step that starts launchers (torchrun, mpirun daemons) is left unbound\n"
         "                          with no per-rank variables; auto (default): one task holding several GPUs\n"
         "  tasks-per-gpu=N         N consecutive tasks share one GPU (default 1)\n"
         "  show                    print each node's placement table and decisions at launch\n"
         "  help                    print this text\n"
         "Example: srun --train-runtime=show -N 2 --ntasks-per-node=8 --gpus-per-node=8 ./train\n"
         "Environment set in each task: docs/environment.md\n";
}

AdminConfig parse_admin_args(const std::vector<std::string>& args) {
  AdminConfig c;
  constexpr const char* valid =
      "valid: enable=default|always|never, policy=rail|numa|none, topology_xml=PATH, nic_include=NAME[,NAME...], "
      "strict=0|1, ifname=INTERFACE, rail_ids=0|1, topology_cache=PATH|off, nccl_topo=auto|always|off";
  auto bad = [&](const std::string& key, const std::string& value) {
    return Error(fmt::format("plugstack.conf: {}='{}'; {}", key, printable(value), valid));
  };
  auto flag = [&](const std::string& key, const std::string& value) {
    if (value == "1") return true;
    if (value == "0") return false;
    throw bad(key, value);
  };
  std::set<std::string> seen;
  for (const auto& arg : args) {
    std::size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
      throw Error(fmt::format("plugstack.conf: argument '{}' is not key=value; {}", printable(arg), valid));
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (!seen.insert(key).second) throw Error(fmt::format("plugstack.conf: '{}' given twice; {}", printable(key), valid));
    if (key == "enable") {
      if (value == "default") c.enable = Enable::Default;
      else if (value == "always") c.enable = Enable::Always;
      else if (value == "never") c.enable = Enable::Never;
      else throw bad(key, value);
    } else if (key == "policy") {
      try {
        c.policy = topo::parse_policy(value);
      } catch (const Error&) {
        throw bad(key, value);
      }
    } else if (key == "topology_xml") {
      if (value.front() != '/') throw Error(fmt::format("plugstack.conf: topology_xml='{}' must be an absolute path", printable(value)));
      c.topology_xml = value;
    } else if (key == "topology_cache") {
      if (value == "off") {
        c.topology_cache.clear();
      } else {
        // An absolute path without '..' or a trailing '/': the directory checks (root-owned, not
        // writable by others, every ancestor too) must look at the directory really used.
        if (value.front() != '/' || value.back() == '/' || value.size() > 4096 || value.find("/../") != std::string::npos ||
            value.ends_with("/..") || value.find("/./") != std::string::npos)
          throw Error(fmt::format("plugstack.conf: topology_cache='{}' must be an absolute path to a file (no '.' or "
                                  "'..' components) or off",
                                  printable(value)));
        c.topology_cache = value;
      }
    } else if (key == "nccl_topo") {
      const NcclTopo* v = find_value(kNcclTopo, value);
      if (!v) throw bad(key, value);
      c.nccl_topo = *v;
    } else if (key == "nic_include") {
      for (auto part : split(value, ','))
        if (!part.empty()) c.nic_include.emplace_back(part);
    } else if (key == "strict") {
      c.strict = flag(key, value);
    } else if (key == "rail_ids") {
      c.rail_ids = flag(key, value);
    } else if (key == "ifname") {
      try {
        check_interface_name(value, "ifname");  // the rule every reader of an interface name applies
      } catch (const Error& e) {
        throw Error(fmt::format("plugstack.conf: {}; {}", e.what(), valid));
      }
      c.ifname = value;
    } else {
      throw Error(fmt::format("plugstack.conf: unknown key '{}'; {}", printable(key), valid));
    }
  }
  return c;
}

}  // namespace trainrt::spank
