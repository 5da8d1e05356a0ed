// A compact, comparable text of a node's rail layout: run on every node of a job
// (`srun --ntasks-per-node=1 trainrt-topo rail-signature | trainrt-topo rail-check -`), a
// renamed NIC, a port down or a different cabling shows up as a node whose layout differs.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "trainrt/error.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/rails.hpp"

namespace trainrt::topo {
namespace {

constexpr std::size_t kMaxCheckLines = 65536;          // nodes in one job
constexpr std::size_t kMaxCheckLineBytes = 64u << 10;  // one node's layout
constexpr std::size_t kMaxNamesShown = 16;

std::string nic_text(const Nic& n, const RailExtras* extras) {
  std::string ports;
  for (const auto& p : n.ports) {
    ports += fmt::format("{}{}={}", ports.empty() ? "" : ",", p.number, p.state);
    if (!extras) continue;
    auto it = extras->port_prefix.find(fmt::format("{}/{}", n.rdma_name, p.number));
    if (it != extras->port_prefix.end()) ports += "@" + it->second;
  }
  std::string out = fmt::format("{}:{}:{}", n.rdma_name.empty() ? n.busid : n.rdma_name, to_string(n.link),
                                ports.empty() ? "-" : ports);
  if (extras && n.link == LinkLayer::Ethernet) {
    std::string nets;
    for (const auto& d : n.netdevs)
      if (auto it = extras->netdev_networks.find(d); it != extras->netdev_networks.end())
        nets += (nets.empty() ? "" : ",") + it->second;
    if (!nets.empty()) out += ":ip=" + nets;
  }
  return out;
}

std::string names(const std::vector<std::string>& hosts) {
  std::string out;
  for (std::size_t i = 0; i < hosts.size() && i < kMaxNamesShown; ++i) out += (i ? "," : "") + hosts[i];
  if (hosts.size() > kMaxNamesShown) out += fmt::format(",... ({} more)", hosts.size() - kMaxNamesShown);
  return out;
}

}  // namespace

std::string rail_layout(const Node& node, const RailOptions& options, const RailExtras* extras) {
  RailMap rails = pair_rails(node, options);
  std::string out = fmt::format("gpus={} rails={}", node.gpus.size(), rails.rail_count);
  for (const auto& g : rails.gpus) {
    out += fmt::format(" {}>", node.gpus[g.gpu].busid);
    if (g.nics.empty()) out += "none";
    for (std::size_t i = 0; i < g.nics.size(); ++i) out += (i ? "+" : "") + nic_text(node.nics[g.nics[i]], extras);
    out += fmt::format("/{}", to_string(g.path));
  }
  return out;
}

std::string rail_signature_line(const std::string& host, const Node& node, const RailOptions& options,
                                const RailExtras* extras) {
  const std::string layout = rail_layout(node, options, extras);
  std::string h = host.empty() ? "?" : host;
  std::replace_if(h.begin(), h.end(), [](char c) { return c == ' ' || c == '\t' || c == '\n'; }, '_');
  return fmt::format("{} rails/1:{:016x} {}", h, fnv1a64(layout), layout);
}

RailCheck check_rail_signatures(const std::string& text) {
  struct Group {
    std::string layout;
    std::vector<std::string> hosts;
    std::size_t first = 0;  // the group's earliest line: the tie-break
  };
  std::set<std::pair<std::string, std::string>> seen;  // (host, signature): several tasks per node
  std::map<std::string, Group> groups;  // by signature
  std::istringstream in(text);
  std::string line;
  std::size_t count = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (++count > kMaxCheckLines) throw Error(fmt::format("more than {} lines", kMaxCheckLines), "rail check");
    if (line.size() > kMaxCheckLineBytes)
      throw Error(fmt::format("line {} is longer than {} bytes", count, kMaxCheckLineBytes), "rail check");
    // `srun -l` prefixes "N: "; a line is "[N: ]HOST rails/1:HASH LAYOUT".
    std::istringstream words(line);
    std::string host, sig;
    words >> host;
    if (!host.empty() && host.back() == ':') words >> host;
    words >> sig;
    if (!sig.starts_with("rails/1:") || sig.size() != 24)
      throw Error(fmt::format("line {} is not a trainrt-topo rail-signature line", count), "rail check");
    std::string layout;
    std::getline(words, layout);
    if (!layout.empty() && layout.front() == ' ') layout.erase(0, 1);
    if (fmt::format("rails/1:{:016x}", fnv1a64(layout)) != sig)
      throw Error(fmt::format("line {} ({}): the signature does not match its layout", count, host), "rail check");
    if (!seen.emplace(host, sig).second) continue;
    auto [it, fresh] = groups.try_emplace(sig);
    Group& g = it->second;
    if (fresh) g.first = count;
    g.layout = layout;
    g.hosts.push_back(host);
  }
  if (groups.empty()) throw Error("no signature lines", "rail check");
  std::vector<const Group*> order;
  for (const auto& [sig, g] : groups) order.push_back(&g);
  std::stable_sort(order.begin(), order.end(),
                   [](const Group* a, const Group* b) {
                     return a->hosts.size() != b->hosts.size() ? a->hosts.size() > b->hosts.size() : a->first < b->first;
                   });
  RailCheck out;
  out.mismatch = order.size() > 1;
  out.report = fmt::format("rail check: {} node(s), {} layout(s)\n", seen.size(), order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Group& g = *order[i];
    out.report += fmt::format("{} {} node(s): {}\n  {}\n", i == 0 ? "majority" : "DIFFERS ", g.hosts.size(),
                              names(g.hosts), g.layout);
    if (i > 0) out.differing.insert(out.differing.end(), g.hosts.begin(), g.hosts.end());
  }
  std::sort(out.differing.begin(), out.differing.end());
  return out;
}

}  // namespace trainrt::topo
