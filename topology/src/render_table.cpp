#include <fmt/format.h>

#include <algorithm>

#include "trainrt/printable.hpp"
#include "trainrt/topology/env.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::topo {
namespace {

std::string nic_short(const Nic& n) { return n.rdma_name.empty() ? n.busid : n.rdma_name; }

std::string gib(std::uint64_t bytes) {
  return bytes ? fmt::format("{:.0f} GiB", static_cast<double>(bytes) / (1ull << 30)) : "-";
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

// Names, models and hostnames come from topology files; each call is one line: trainrt/printable.hpp.
std::string escape_line(std::string_view s) { return printable_line(s, Backslash::keep); }

std::string render_table(const Node& node, const Placement& p) {
  std::string out;
  auto line = [&out](const std::string& s) { out += escape_line(s) + '\n'; };
  unsigned pus = node.all_cpus.count();
  line(fmt::format("node {} ({}): {} packages, {} NUMA nodes, {} cores{}, {} PUs, {} GPUs, {} NICs ({} rails)",
                   or_dash(node.hostname), node.source, node.packages.size(), node.numa_nodes.size(),
                   node.cores.size(), node.cores_are_pus ? " (no core info: PUs counted)" : "", pus,
                   node.gpus.size(), node.nics.size(), p.rails.rail_count));
  line("");
  line(fmt::format("{:<5} {:<24} {:>8}", "NUMA", "cpus", "memory"));
  for (const auto& n : node.numa_nodes) line(fmt::format("{:<5} {:<24} {:>8}", n.os_index, n.cpus.to_list(), gib(n.memory_bytes)));

  if (!node.gpus.empty()) {
    line("");
    line(fmt::format("{:<4} {:<13} {:<5} {:<28} {}", "GPU", "bus id", "NUMA", "model", "rail NICs (path)"));
    for (const auto& g : node.gpus) {
      const GpuRail& r = p.rails.gpus[g.index];
      std::vector<std::string> nics;
      for (unsigned n : r.nics) nics.push_back(nic_short(node.nics[n]));
      std::string rails = nics.empty() ? "-" : fmt::format("{} ({})", fmt::join(nics, ","), to_string(r.path));
      line(fmt::format("{:<4} {:<13} {:<5} {:<28} {}", g.index, g.busid, fmt::join(g.numa, ","),
                       or_dash(g.model).substr(0, 28), rails));
    }
  }

  if (!node.gpus.empty() && !node.nics.empty()) {
    line("");
    std::string head = fmt::format("{:<7}", "");
    for (const auto& n : node.nics) head += fmt::format(" {:>13}", nic_short(n).substr(0, 13));
    line(head);
    for (const auto& g : node.gpus) {
      std::string row = fmt::format("{:<7}", fmt::format("GPU{}", g.index));
      for (const auto& n : node.nics) row += fmt::format(" {:>13}", to_string(p.rails.matrix[g.index][n.index]));
      line(row);
    }
  }
  if (!node.nics.empty()) {
    line("");
    line(fmt::format("{:<4} {:<13} {:<10} {:<11} {:<5} {:<12} {}", "NIC", "bus id", "name", "link", "rail", "ports",
                     "netdevs"));
    for (const auto& n : node.nics) {
      std::vector<std::string> ports;
      for (const auto& pt : n.ports) ports.push_back(pt.state >= 0 ? fmt::format("{}(st{})", pt.number, pt.state)
                                                                   : fmt::format("{}", pt.number));
      int rail = p.rails.rail_of_nic[n.index];
      line(fmt::format("{:<4} {:<13} {:<10} {:<11} {:<5} {:<12} {}", n.index, n.busid, or_dash(n.rdma_name),
                       to_string(n.link), rail < 0 ? "-" : fmt::format("{}", rail),
                       or_dash(fmt::format("{}", fmt::join(ports, ","))), or_dash(fmt::format("{}", fmt::join(n.netdevs, ",")))));
    }
    for (const auto& why : p.rails.excluded) line("  not a rail: " + why);
  }

  line("");
  line(fmt::format("policy {}, allowed cpus {}, allowed GPUs {}", to_string(p.policy), p.allowed_cpus.to_list(),
                   p.allowed_gpus.empty() ? "-" : fmt::format("{}", fmt::join(p.allowed_gpus, ","))));
  line(fmt::format("{:<5} {:<4} {:<13} {:<20} {:<24} {:>5} {:<5}", "rank", "GPU", "bus id", "NICs", "cpus", "cores",
                   "mems"));
  for (const auto& t : p.tasks) {
    std::string gpu = t.gpus.empty() ? "-" : fmt::format("{}", fmt::join(t.gpus, ","));
    std::string busid = t.gpus.empty() ? "-" : node.gpus[t.gpus.front()].busid;
    std::string nics = nic_port_list(node, t);
    if (nics.empty()) {
      std::vector<std::string> names;
      for (unsigned n : t.nics) names.push_back(nic_short(node.nics[n]));
      nics = or_dash(fmt::format("{}", fmt::join(names, ",")));
    }
    line(fmt::format("{:<5} {:<4} {:<13} {:<20} {:<24} {:>5} {:<5}{}", t.local_rank, gpu, busid, nics,
                     t.bind ? t.cpus.to_list() : "(unbound)", t.cores, fmt::join(t.mems, ","),
                     t.oversubscribed ? "  oversubscribed" : ""));
    for (const auto& note : t.notes) line("      note: " + note);
  }
  return out;
}

std::string render_env_script(const Node& node, const Placement& p) {
  std::string out;
  for (const auto& t : p.tasks) {
    out += fmt::format("# local rank {}\n", t.local_rank);
    for (const auto& v : render_env(node, p, t)) {
      std::string quoted = "'";
      for (char c : v.value) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += fmt::format("export {}={}'\n", v.name, quoted);
    }
  }
  return out;
}

}  // namespace trainrt::topo
