#include "trainrt/data_interface.hpp"

#include <net/if.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>

#include "trainrt/error.hpp"
#include "trainrt/printable.hpp"
#include "trainrt/strings.hpp"

namespace trainrt {
namespace {

// The non-empty items of a list variable.
std::vector<std::string_view> items(std::string_view value) {
  std::vector<std::string_view> out;
  for (std::string_view item : split(value, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

void check_interface_name(std::string_view name, std::string_view source) {
  constexpr std::size_t kMaxName = 15;  // IFNAMSIZ - 1
  const bool bad_byte = std::any_of(name.begin(), name.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f || c == '/';
  });
  if (name.empty() || name.size() > kMaxName || bad_byte || name == "." || name == "..")
    throw Error(fmt::format("'{}' cannot be a network interface name (1 to {} bytes, no '/', space or control "
                            "byte); name the data network's interface, e.g. ib0",
                            printable_line(name.substr(0, 64), Backslash::hex), kMaxName),
                std::string(source));
}

DataInterface data_interface(const std::function<std::optional<std::string>(std::string_view)>& lookup,
                             const std::vector<std::string>& interfaces, std::string_view fallback,
                             std::string_view fallback_source) {
  for (const std::string_view variable : kDataInterfaceVariables) {
    const std::optional<std::string> value = lookup(variable);
    if (!value || value->empty() || value->front() == '^') continue;
    const bool exact = value->front() == '=';
    const auto listed = items(std::string_view(*value).substr(exact ? 1 : 0));
    // A variable that is set yet lists nothing ("=", ",") is a mistake worth an error, not a skip.
    if (listed.empty()) check_interface_name("", variable);
    for (std::string_view item : listed) check_interface_name(item, variable);
    if (exact || variable != "NCCL_SOCKET_IFNAME") return {std::string(listed.front()), std::string(variable)};
    for (std::string_view prefix : listed)
      for (const std::string& name : interfaces)
        if (name.starts_with(prefix)) return {name, std::string(variable)};
  }
  if (fallback.empty()) return {};
  check_interface_name(fallback, fallback_source);
  return {std::string(fallback), std::string(fallback_source)};
}

std::vector<std::string> node_interfaces() {
  std::vector<std::pair<unsigned, std::string>> found;
  std::unique_ptr<struct if_nameindex, decltype(&if_freenameindex)> list(if_nameindex(), if_freenameindex);
  for (const struct if_nameindex* p = list.get(); p && p->if_index != 0; ++p) found.emplace_back(p->if_index, p->if_name);
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [index, name] : found) out.push_back(std::move(name));
  return out;
}

DataInterface data_interface_from_environment(std::string_view fallback, std::string_view fallback_source) {
  return data_interface(
      [](std::string_view name) -> std::optional<std::string> {
        const char* v = std::getenv(std::string(name).c_str());
        return v ? std::optional<std::string>(v) : std::nullopt;
      },
      node_interfaces(), fallback, fallback_source);
}

}  // namespace trainrt
