// What the live system shows about each rail's network (the cross-node rail check): an
// InfiniBand/RoCE port's subnet prefix from its GID 0, an Ethernet netdev's IPv4/IPv6 networks.
// Read from sysfs and procfs only: discovery talks to no other process (no netlink socket).
#include <fmt/format.h>

#include <bit>
#include <cctype>
#include <sstream>

#include "file_checks.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/topology/rails.hpp"

namespace trainrt::topo {
namespace {

// A small procfs/sysfs text, "" when it cannot be read. At most 1 MiB (a route table of thousands
// of routes); longer is cut, which only loses networks from the text.
std::string read_text(const std::string& path, std::size_t max = 1u << 20) {
  try {
    return read_checked_file(path, max, "system file", false).bytes;
  } catch (const Error&) {
    return {};
  }
}

bool is_hex(std::string_view s) {
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return !s.empty();
}

// "fe80:0000:0000:0000:0800:3803:00bb:34d4" -> "fe80:0000:0000:0000"; "" unless well formed.
std::string gid_prefix(std::string gid) {
  while (!gid.empty() && std::isspace(static_cast<unsigned char>(gid.back()))) gid.pop_back();
  if (gid.size() != 39) return {};
  for (std::size_t i = 0; i < gid.size(); ++i)
    if (i % 5 == 4 ? gid[i] != ':' : !std::isxdigit(static_cast<unsigned char>(gid[i]))) return {};
  return gid.substr(0, 19);
}

// /proc/net/route: "Iface Destination Gateway Flags RefCnt Use Metric Mask ..." in host-order hex.
// A connected network is a route without gateway to a non-default destination.
void ipv4_networks(const std::string& text, std::map<std::string, std::vector<std::string>>& out) {
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string ifname, dest, gw, flags, refcnt, use, metric, mask;
    if (!(w >> ifname >> dest >> gw >> flags >> refcnt >> use >> metric >> mask)) continue;
    if (dest.size() != 8 || mask.size() != 8 || gw != "00000000") continue;
    const auto dest_bits = to_number<std::uint32_t>(dest, 0, 0xffffffff, 16);
    const auto mask_bits = to_number<std::uint32_t>(mask, 0, 0xffffffff, 16);
    if (!dest_bits || !mask_bits || *dest_bits == 0) continue;
    const std::uint32_t d = *dest_bits, m = *mask_bits;
    // Host order of a little-endian machine: the first octet is the low byte.
    out[ifname].push_back(fmt::format("{}.{}.{}.{}/{}", d & 0xff, (d >> 8) & 0xff, (d >> 16) & 0xff, d >> 24,
                                      std::popcount(m)));
  }
}

// /proc/net/if_inet6: "ADDR(32 hex) IFINDEX PREFIXLEN SCOPE FLAGS NAME"; scope 00 is global.
void ipv6_networks(const std::string& text, std::map<std::string, std::vector<std::string>>& out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    std::string addr, index, plen, scope, flags, ifname;
    if (!(w >> addr >> index >> plen >> scope >> flags >> ifname)) continue;
    const auto prefix = to_number<unsigned>(plen, 0, 0xff, 16);
    if (addr.size() != 32 || !is_hex(addr) || !prefix || scope != "00") continue;
    const unsigned bits = std::min(128u, *prefix);
    std::string masked;
    for (unsigned nibble = 0; nibble < 32; ++nibble) {
      unsigned v = to_number<unsigned>(std::string_view(addr).substr(nibble, 1), 0, 15, 16).value_or(0);
      const unsigned from = nibble * 4;
      if (from >= bits) v = 0;
      else if (from + 4 > bits) v &= 0xfu << (from + 4 - bits);
      if (nibble && nibble % 4 == 0) masked += ':';
      masked += "0123456789abcdef"[v & 0xf];
    }
    out[ifname].push_back(fmt::format("{}/{}", masked, bits));
  }
}

}  // namespace

RailExtras read_rail_extras(const Node& node, const std::string& sysfs, const std::string& procfs) {
  RailExtras x;
  std::map<std::string, std::vector<std::string>> nets;
  bool nets_read = false;
  for (const auto& n : node.nics) {
    // Names come from the Node (hwloc read them from sysfs); a name with '/' or '..' is not looked up.
    auto safe = [](const std::string& s) { return !s.empty() && s.find('/') == std::string::npos && s != "." && s != ".."; };
    if (safe(n.rdma_name))
      for (const auto& p : n.ports) {
        std::string prefix = gid_prefix(
            read_text(fmt::format("{}/class/infiniband/{}/ports/{}/gids/0", sysfs, n.rdma_name, p.number), 128));
        if (!prefix.empty()) x.port_prefix[fmt::format("{}/{}", n.rdma_name, p.number)] = prefix;
      }
    if (n.link != LinkLayer::Ethernet) continue;
    if (!nets_read) {
      ipv4_networks(read_text(procfs + "/net/route"), nets);
      ipv6_networks(read_text(procfs + "/net/if_inet6"), nets);
      nets_read = true;
    }
    for (const auto& d : n.netdevs)
      if (auto it = nets.find(d); it != nets.end() && safe(d)) x.netdev_networks[d] = fmt::format("{}", fmt::join(it->second, "+"));
  }
  return x;
}

}  // namespace trainrt::topo
