#include "launch_net.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/small_file.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

constexpr unsigned kBandWidth = 12768;     // 20000..32767 with Linux's default ephemeral range
constexpr std::size_t kMaxProcFile = 16384;
constexpr std::size_t kMaxReservedRanges = 4096;

unsigned parse_port(std::string_view text, std::string_view file) {
  return parse_number(text, "a port number", 0u, 65535u, file);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

bool skipped(unsigned port, const PortBand& band) {
  if (port == 29500 || (port >= 6817 && port <= 6819)) return true;
  return std::any_of(band.reserved.begin(), band.reserved.end(),
                     [&](const auto& r) { return port >= r.first && port <= r.second; });
}

Address from_sockaddr(const sockaddr* sa) {
  Address a;
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    std::memcpy(a.bytes, &in->sin_addr, 4);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    a.loopback = a.bytes[0] == 127;
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    a.v6 = true;
    std::memcpy(a.bytes, &in6->sin6_addr, 16);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    a.loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  a.text = buf;
  return a;
}

bool in_network(const Address& a, const Network& n) {
  if (a.v6 != n.address.v6) return false;
  unsigned bits = std::min(n.prefix, a.v6 ? 128u : 32u);
  for (unsigned i = 0; i < bits; ++i) {
    unsigned byte = i / 8, mask = 0x80u >> (i % 8);
    if ((a.bytes[byte] & mask) != (n.address.bytes[byte] & mask)) return false;
  }
  return true;
}

std::string list_addresses(const std::vector<Address>& v) {
  std::vector<std::string> t;
  for (const auto& a : v) t.push_back(a.text);
  return t.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(t, ", "));
}

const Address* first_usable(const std::vector<Address>& v) {
  for (bool want_v6 : {false, true})
    for (const auto& a : v)
      if (!a.loopback && a.v6 == want_v6) return &a;
  return nullptr;
}

}  // namespace

PortBand port_band_from(const std::string& port_range_text, const std::string& reserved_text) {
  PortBand band;
  if (!port_range_text.empty()) {
    std::string_view t = trim(port_range_text);
    std::size_t sep = t.find_first_of(" \t");
    if (sep == std::string_view::npos) throw Error(fmt::format("'{}' is not 'LOW HIGH'", t), "ip_local_port_range");
    unsigned ephemeral_low = parse_port(t.substr(0, sep), "ip_local_port_range");
    if (ephemeral_low <= 2048)
      throw Error(fmt::format("the ephemeral range starts at {}: no room for a port band below it", ephemeral_low),
                  "ip_local_port_range");
    band.high = ephemeral_low - 1;
    band.low = band.high >= 1024 + kBandWidth ? band.high + 1 - kBandWidth : 1024;
  }
  for (auto part : split(trim(reserved_text), ',')) {
    part = trim(part);
    if (part.empty()) continue;
    if (band.reserved.size() >= kMaxReservedRanges)
      throw Error(fmt::format("more than {} ranges", kMaxReservedRanges), "ip_local_reserved_ports");
    std::size_t dash = part.find('-');
    unsigned a = parse_port(part.substr(0, dash), "ip_local_reserved_ports");
    unsigned b = dash == std::string_view::npos ? a : parse_port(part.substr(dash + 1), "ip_local_reserved_ports");
    band.reserved.emplace_back(std::min(a, b), std::max(a, b));
  }
  return band;
}

PortBand read_port_band(const std::string& proc_root) {
  const std::string dir = proc_root + "/sys/net/ipv4/";
  auto read = [&](const char* name) {
    return read_small_file(dir + name, kMaxProcFile, LastLink::refuse).value_or(std::string());
  };
  const std::string range = read("ip_local_port_range"), reserved = read("ip_local_reserved_ports");
  try {
    return port_band_from(range, reserved);
  } catch (const Error& e) {
    throw Error(fmt::format("{} (read from {})", e.what(), dir));
  }
}

unsigned master_port(std::uint32_t job_id, std::uint32_t step_id, const PortBand& band) {
  if (band.high < band.low) throw Error("the port band is empty", "MASTER_PORT");
  const std::uint64_t size = band.high - band.low + 1;
  const std::uint64_t index = (std::uint64_t{job_id} * 16 + step_id % 16) % size;
  // A skipped port moves a whole stride on, so the job's other steps keep their own ports.
  for (std::uint64_t tries = 0; tries < size / 16; ++tries) {
    unsigned port = band.low + static_cast<unsigned>((index + tries * 16) % size);
    if (!skipped(port, band)) return port;
  }
  for (std::uint64_t tries = 0; tries < size; ++tries) {
    unsigned port = band.low + static_cast<unsigned>((index + tries) % size);
    if (!skipped(port, band)) return port;
  }
  throw Error(fmt::format("every port of {}-{} is reserved", band.low, band.high), "MASTER_PORT");
}

std::vector<Address> resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return {};
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  std::vector<Address> out;
  for (addrinfo* p = res; p && out.size() < 64; p = p->ai_next) {
    if (p->ai_family != AF_INET && p->ai_family != AF_INET6) continue;
    Address a = from_sockaddr(p->ai_addr);
    if (std::none_of(out.begin(), out.end(), [&](const Address& b) { return b.text == a.text; })) out.push_back(a);
  }
  std::stable_sort(out.begin(), out.end(), [](const Address& a, const Address& b) { return !a.v6 && b.v6; });
  return out;
}

bool interface_exists(const std::string& ifname) { return if_nametoindex(ifname.c_str()) != 0; }

std::vector<Network> interface_networks(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> guard(list, freeifaddrs);
  std::vector<Network> out;
  for (ifaddrs* p = list; p; p = p->ifa_next) {
    if (!p->ifa_addr || !p->ifa_netmask || ifname != p->ifa_name) continue;
    if (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6) continue;
    Network n{from_sockaddr(p->ifa_addr), 0};
    Address mask = from_sockaddr(p->ifa_netmask);
    for (unsigned i = 0; i < (n.address.v6 ? 16u : 4u); ++i) n.prefix += static_cast<unsigned>(__builtin_popcount(mask.bytes[i]));
    out.push_back(n);
  }
  std::stable_sort(out.begin(), out.end(), [](const Network& a, const Network& b) { return !a.address.v6 && b.address.v6; });
  return out;
}

std::string choose_master_addr(const MasterInput& in) {
  if (in.nnodes <= 1) return "127.0.0.1";  // every rank is here: loopback always works
  if (!in.ifname.empty() && in.ifname_networks.empty())
    throw Error(fmt::format("interface '{}' has no IP address on this node (set by ifname= in plugstack.conf or "
                            "TRAINRT_IFNAME); name the data network's interface",
                            in.ifname),
                "MASTER_ADDR");
  if (in.this_is_first && !in.ifname.empty()) {
    for (const auto& n : in.ifname_networks)
      if (!n.address.v6) return n.address.text;
    return in.ifname_networks.front().address.text;
  }
  if (!in.ifname.empty()) {
    for (const auto& a : in.resolved)
      for (const auto& n : in.ifname_networks)
        if (!a.loopback && in_network(a, n)) return a.text;
  }
  if (const Address* a = first_usable(in.resolved)) return a->text;
  if (in.this_is_first && !in.resolved.empty()) return in.resolved.front().text;  // its own tasks reach it
  throw Error(fmt::format("the step's first node '{}' resolves to {} on this node, so the ranks here cannot reach "
                          "it{}; fix its name resolution (Debian's /etc/hosts maps a host's own name to "
                          "127.0.1.1), set ifname= in plugstack.conf or TRAINRT_IFNAME to the data network's "
                          "interface, or export MASTER_ADDR",
                          in.first_host, list_addresses(in.resolved),
                          in.ifname.empty() ? "" : fmt::format(" over {}", in.ifname)),
              "MASTER_ADDR");
}

}  // namespace trainrt::spank
