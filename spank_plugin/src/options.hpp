#pragma once
// The plugin's two inputs, parsed without Slurm so they can be unit- and fuzz-tested:
// the user's --train-runtime[=OPTS] (plus TRAINRT_OPTS defaults) and the admin's plugstack.conf
// arguments. Every rejection is a trainrt::Error whose message starts with the option's name,
// quotes the offending text (control bytes escaped) and lists what is valid.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/printable.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"

namespace trainrt::spank {

enum class BindMode { On, Off, Dry };
enum class GpuVisibility { All, Own };      // CUDA_VISIBLE_DEVICES: the node's step GPUs, or the task's own
enum class NicScope { Node, Own };          // NCCL_IB_HCA: the node's rail ports, or the task's own rail
enum class MemPolicy { Prefer, Bind, Off }; // memory near the task's cores: preferred, strict, or untouched
enum class EnvMode { Keep, Override };      // tunables already in the task's environment: kept or replaced
enum class LauncherMode { Auto, On, Off };  // a step that starts launchers (torchrun, mpirun daemons)

struct UserOptions {
  std::optional<topo::Policy> policy;
  std::optional<BindMode> bind;
  std::optional<GpuVisibility> gpus;
  std::optional<NicScope> nics;
  std::optional<MemPolicy> mem;
  std::optional<EnvMode> env;
  std::optional<LauncherMode> launcher;
  std::optional<unsigned> tasks_per_gpu;
  bool show = false;
  bool help = false;
};

// "policy=rail,show,bind=dry,gpus=visible-own,tasks-per-gpu=2". Empty or absent text means "all
// defaults". Throws trainrt::Error("--train-runtime: <what was wrong>; valid: ...").
UserOptions parse_user_options(std::string_view text);
// The canonical text of `o`: parse_user_options(to_text(o)) gives `o` back.
std::string to_text(const UserOptions& o);
// Fields set in `over` win over those in `base` (TRAINRT_OPTS gives the base).
UserOptions merge(const UserOptions& base, const UserOptions& over);
std::string user_help();

enum class Enable { Default, Always, Never };
// NCCL_TOPO_FILE: exported on virtual machines (auto), on every node (always) or never (off). The file
// is the one `trainrt-topo write-cache` writes beside the cache (topo::nccl_topo_path).
enum class NcclTopo { Auto, Always, Off };

struct AdminConfig {
  Enable enable = Enable::Default;
  topo::Policy policy = topo::Policy::Rail;
  std::string topology_xml;              // cached node topology; empty = live discovery
  std::vector<std::string> nic_include;  // empty = the default rail rule
  bool strict = true;                    // false: placement errors warn and leave tasks unbound
  std::string ifname;                    // the data network's interface (MASTER_ADDR, Gloo, NCCL sockets)
  bool rail_ids = false;                 // NCCL_IB_HCA as hca:port:rail (NCCL >= 2.30.7)
  std::string topology_cache = topo::kDefaultCachePath;  // the digested cache; empty = off
  NcclTopo nccl_topo = NcclTopo::Auto;
};

// plugstack.conf arguments: enable=, policy=, topology_xml=, nic_include=, strict=, ifname=, rail_ids=,
// topology_cache=PATH|off, nccl_topo=auto|always|off.
// Throws trainrt::Error("plugstack.conf: ...") on an unknown key or a bad value.
AdminConfig parse_admin_args(const std::vector<std::string>& args);

const char* to_string(BindMode mode);
const char* to_string(NcclTopo mode);
// Anything a user, the site or a file wrote, made safe to print on one line: common's escaper
// (trainrt/printable.hpp), a backslash written as \x5c so "\x41" in the input stays apart from an
// escaped byte.
inline std::string printable(std::string_view s) { return printable_line(s, Backslash::hex); }

}  // namespace trainrt::spank
