#pragma once
// The plugin's two inputs, parsed without Slurm so they can be unit- and fuzz-tested:
// the user's --train-runtime[=OPTS] (plus TRAINRT_OPTS defaults) and the admin's plugstack.conf
// arguments. Every rejection is a trainrt::Error whose message starts with the option's name and
// lists what is valid.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/topology/placement.hpp"

namespace trainrt::spank {

enum class BindMode { On, Off, Dry };
enum class GpuVisibility { Own, All };

struct UserOptions {
  std::optional<topo::Policy> policy;
  std::optional<BindMode> bind;
  std::optional<GpuVisibility> gpus;
  std::optional<unsigned> tasks_per_gpu;
  bool show = false;
  bool help = false;
};

// "policy=rail,show,bind=dry,gpus=visible-all,tasks-per-gpu=2". Empty or absent text means "all
// defaults". Throws trainrt::Error("--train-runtime: <what was wrong>; valid: ...").
UserOptions parse_user_options(std::string_view text);
// Fields set in `over` win over those in `base` (TRAINRT_OPTS gives the base).
UserOptions merge(const UserOptions& base, const UserOptions& over);
std::string user_help();

enum class Enable { Default, Always, Never };

struct AdminConfig {
  Enable enable = Enable::Default;
  topo::Policy policy = topo::Policy::Rail;
  std::string topology_xml;              // cached node topology; empty = live discovery
  std::vector<std::string> nic_include;  // empty = the default rail rule
  bool strict = true;                    // false: placement errors warn and leave tasks unbound
};

// plugstack.conf arguments: enable=, policy=, topology_xml=, nic_include=, strict=.
// Throws trainrt::Error("plugstack.conf: ...") on an unknown key or a bad value.
AdminConfig parse_admin_args(const std::vector<std::string>& args);

const char* to_string(BindMode mode);

}  // namespace trainrt::spank
