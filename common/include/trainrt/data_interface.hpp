#pragma once
// The one rule for the data network's interface: the interface whose address the ranks of a job
// advertise to each other (the plugin's MASTER_ADDR, the store torch.distributed meets at, Gloo's
// sockets). Every reader of it calls this function (trainrt.torch through the binding), so they
// cannot disagree; tests/common/data_interface_cases.json is the table of cases the C++ and the
// Python tests both check.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt {

struct DataInterface {
  std::string name;    // e.g. "ib0"; empty: none is named (callers fall back to the host's name)
  std::string source;  // what named it (a variable, or the caller's fallback), for messages
  bool operator==(const DataInterface&) const = default;
};

// The variables read, in this order: ours (set by the plugin, or by the user), then Gloo's and
// NCCL's own, which users and sites export for the same purpose.
inline constexpr const char* kDataInterfaceVariables[] = {"TRAINRT_IFNAME", "GLOO_SOCKET_IFNAME",
                                                          "NCCL_SOCKET_IFNAME"};

// The first variable that names an interface wins:
//   "ib0"       -> ib0
//   "ib0,ib1"   -> ib0   the first of a list
//   "=ib0"      -> ib0   NCCL's exact-match prefix
//   "^docker0"  -> none: an exclusion list names no interface, so the next variable is read
//   "" / unset  -> the next variable
// except that NCCL_SOCKET_IFNAME without '=' holds name prefixes, as NCCL reads it ("ib" is ib0,
// ib1, ...): it names the first of `interfaces` (this node's, in index order) that one of them
// begins, or none. When no variable names one, `fallback` (a site's default, e.g. the plugin's
// ifname=) under the name `fallback_source`, else an empty name. A name that cannot be a Linux
// interface name is an Error naming its source (check_interface_name).
DataInterface data_interface(const std::function<std::optional<std::string>(std::string_view)>& lookup,
                             const std::vector<std::string>& interfaces, std::string_view fallback = {},
                             std::string_view fallback_source = {});

// data_interface() over this process's environment and this node's interfaces.
DataInterface data_interface_from_environment(std::string_view fallback = {}, std::string_view fallback_source = {});

// This node's network interfaces, in index order (if_nameindex).
std::vector<std::string> node_interfaces();

// Throws trainrt::Error("SOURCE: ...") unless `name` can be a Linux interface name: 1 to 15
// bytes, no '/', whitespace or control byte, not "." or "..". (':' stays allowed: "eth0:1" names
// an address alias.)
void check_interface_name(std::string_view name, std::string_view source);

}  // namespace trainrt
