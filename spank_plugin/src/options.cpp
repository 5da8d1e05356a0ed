#include "options.hpp"

#include <fmt/format.h>

#include <charconv>
#include <set>

#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

constexpr std::size_t kMaxOptionText = 1024;
constexpr unsigned kMaxTasksPerGpu = 64;
constexpr const char* kUserValid =
    "valid: policy=rail|numa|none, show, bind=on|off|dry, gpus=visible-own|visible-all, tasks-per-gpu=1..64, help";

[[noreturn]] void reject(const std::string& what) {
  throw Error(fmt::format("--train-runtime: {}; {}", what, kUserValid));
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

const char* to_string(BindMode mode) {
  switch (mode) {
    case BindMode::On: return "on";
    case BindMode::Off: return "off";
    case BindMode::Dry: break;
  }
  return "dry";
}

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
    if (!seen.insert(std::string(key)).second) reject(fmt::format("'{}' given twice", printable(key)));
    auto need_value = [&]() -> std::string_view {
      if (!value || value->empty()) reject(fmt::format("'{}' needs a value", printable(key)));
      return *value;
    };
    auto no_value = [&] {
      if (value) reject(fmt::format("'{}' takes no value (got '{}')", printable(key), printable(*value)));
    };
    if (key == "policy") {
      std::string_view v = need_value();
      if (v == "rail") o.policy = topo::Policy::Rail;
      else if (v == "numa") o.policy = topo::Policy::Numa;
      else if (v == "none") o.policy = topo::Policy::None;
      else reject(fmt::format("unknown policy '{}'", printable(v)));
    } else if (key == "bind") {
      std::string_view v = need_value();
      if (v == "on") o.bind = BindMode::On;
      else if (v == "off") o.bind = BindMode::Off;
      else if (v == "dry") o.bind = BindMode::Dry;
      else reject(fmt::format("unknown bind mode '{}'", printable(v)));
    } else if (key == "gpus") {
      std::string_view v = need_value();
      if (v == "visible-own") o.gpus = GpuVisibility::Own;
      else if (v == "visible-all") o.gpus = GpuVisibility::All;
      else reject(fmt::format("unknown gpus mode '{}'", printable(v)));
    } else if (key == "tasks-per-gpu") {
      std::string_view v = need_value();
      unsigned n = 0;
      auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || ptr != v.data() + v.size()) reject(fmt::format("tasks-per-gpu '{}' is not a number", printable(v)));
      if (n < 1 || n > kMaxTasksPerGpu) reject(fmt::format("tasks-per-gpu={} is out of range", n));
      o.tasks_per_gpu = n;
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

UserOptions merge(const UserOptions& base, const UserOptions& over) {
  UserOptions m = base;
  if (over.policy) m.policy = over.policy;
  if (over.bind) m.bind = over.bind;
  if (over.gpus) m.gpus = over.gpus;
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
         "  bind=on|off|dry         on (default): bind CPUs and memory; off: environment only;\n"
         "                          dry: compute and export, bind nothing\n"
         "  gpus=visible-own|visible-all\n"
         "                          visible-own (default): CUDA_VISIBLE_DEVICES is the task's GPU;\n"
         "                          visible-all: every step GPU stays visible (NVLink), TRAINRT_CUDA_DEVICE\n"
         "                          names the task's own\n"
         "  tasks-per-gpu=N         N consecutive tasks share one GPU (default 1)\n"
         "  show                    print each node's placement table at launch\n"
         "  help                    print this text\n"
         "Example: srun --train-runtime=show,policy=rail -n 8 --gpus-per-node=8 ./train\n"
         "Environment set in each task: docs/environment.md\n";
}

AdminConfig parse_admin_args(const std::vector<std::string>& args) {
  AdminConfig c;
  constexpr const char* valid =
      "valid: enable=default|always|never, policy=rail|numa|none, topology_xml=PATH, nic_include=NAME[,NAME...], "
      "strict=0|1";
  std::set<std::string> seen;
  for (const auto& arg : args) {
    std::size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
      throw Error(fmt::format("plugstack.conf: argument '{}' is not key=value; {}", printable(arg), valid));
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (!seen.insert(key).second) throw Error(fmt::format("plugstack.conf: '{}' given twice; {}", key, valid));
    if (key == "enable") {
      if (value == "default") c.enable = Enable::Default;
      else if (value == "always") c.enable = Enable::Always;
      else if (value == "never") c.enable = Enable::Never;
      else throw Error(fmt::format("plugstack.conf: enable='{}'; {}", printable(value), valid));
    } else if (key == "policy") {
      try {
        c.policy = topo::parse_policy(value);
      } catch (const Error&) {
        throw Error(fmt::format("plugstack.conf: policy='{}'; {}", printable(value), valid));
      }
    } else if (key == "topology_xml") {
      if (value.front() != '/') throw Error(fmt::format("plugstack.conf: topology_xml='{}' must be an absolute path", printable(value)));
      c.topology_xml = value;
    } else if (key == "nic_include") {
      for (auto part : split(value, ','))
        if (!part.empty()) c.nic_include.emplace_back(part);
    } else if (key == "strict") {
      if (value == "1") c.strict = true;
      else if (value == "0") c.strict = false;
      else throw Error(fmt::format("plugstack.conf: strict='{}'; {}", printable(value), valid));
    } else {
      throw Error(fmt::format("plugstack.conf: unknown key '{}'; {}", printable(key), valid));
    }
  }
  return c;
}

}  // namespace trainrt::spank
