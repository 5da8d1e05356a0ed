#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "trainrt/topology/env.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::topo {
namespace {

using nlohmann::json;

json nullable(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }
std::string hex16(std::uint16_t v) { return fmt::format("0x{:04x}", v); }

json gpu_json(const Node& node, const Placement& p, const Gpu& g) {
  const GpuRail& r = p.rails.gpus[g.index];
  json rail_nics = json::array();
  for (unsigned n : r.nics) rail_nics.push_back(node.nics[n].rdma_name.empty() ? node.nics[n].busid : node.nics[n].rdma_name);
  return {{"index", g.index},
          {"busid", g.busid},
          {"vendor", hex16(g.vendor)},
          {"device", hex16(g.device)},
          {"model", nullable(g.model)},
          {"cuda", nullable(g.cuda_name)},
          {"nvml", nullable(g.nvml_name)},
          {"uuid", nullable(g.uuid)},
          {"numa", g.numa},
          {"cpus", g.local_cpus.to_list()},
          {"rail", {{"nics", rail_nics},
                    {"path", r.nics.empty() ? json(nullptr) : json(to_string(r.path))},
                    {"on_switch", r.on_switch},
                    {"note", nullable(r.note)}}}};
}

json nic_json(const Node& node, const Placement& p, const Nic& n) {
  json ports = json::array();
  for (const auto& pt : n.ports) ports.push_back({{"number", pt.number}, {"state", pt.state < 0 ? json(nullptr) : json(pt.state)}});
  int rail = p.rails.rail_of_nic[n.index];
  (void)node;
  return {{"index", n.index},
          {"busid", n.busid},
          {"vendor", hex16(n.vendor)},
          {"device", hex16(n.device)},
          {"name", nullable(n.rdma_name)},
          {"netdevs", n.netdevs},
          {"link", to_string(n.link)},
          {"rdma", n.rdma},
          {"ports", ports},
          {"pcie_gbytes_s", n.pcie_gbytes_s ? json(*n.pcie_gbytes_s) : json(nullptr)},
          {"numa", n.numa},
          {"rail", rail < 0 ? json(nullptr) : json(rail)}};
}

json rank_json(const Node& node, const Placement& p, const TaskPlacement& t) {
  json nics = json::array();
  const unsigned first_gpu = t.gpus.empty() ? 0 : t.gpus.front();
  for (unsigned n : t.nics) {
    const Nic& nic = node.nics[n];
    std::vector<unsigned> port_numbers;
    for (const auto& pt : nic.ports) port_numbers.push_back(pt.number);
    if (port_numbers.empty()) port_numbers.push_back(0);
    for (unsigned port : port_numbers)
      nics.push_back({{"name", nullable(nic.rdma_name)},
                      {"busid", nic.busid},
                      {"port", port == 0 ? json(nullptr) : json(port)},
                      {"path", to_string(p.rails.matrix[first_gpu][n])},
                      {"rail", p.rails.rail_of_nic[n]}});
  }
  json gpus = json::array();
  for (unsigned g : t.gpus) gpus.push_back({{"index", g}, {"busid", node.gpus[g].busid}});
  json env = json::object();
  for (const auto& v : render_env(node, p, t)) env[v.name] = v.value;
  return {{"local_rank", t.local_rank},
          {"gpu", t.gpus.empty() ? json(nullptr) : gpus.front()},
          {"gpus", gpus},
          {"nics", nics},
          {"cpus", t.cpus.to_list()},
          {"cores", t.cores},
          {"numa", t.mems},
          {"bind", t.bind},
          {"oversubscribed", t.oversubscribed},
          {"notes", t.notes},
          {"env", env}};
}

}  // namespace

std::string render_json(const Node& node, const Placement& p) {
  json numa = json::array();
  for (const auto& n : node.numa_nodes)
    numa.push_back({{"os_index", n.os_index}, {"cpus", n.cpus.to_list()}, {"memory_bytes", n.memory_bytes}});
  json gpus = json::array(), nics = json::array(), ranks = json::array();
  for (const auto& g : node.gpus) gpus.push_back(gpu_json(node, p, g));
  for (const auto& n : node.nics) nics.push_back(nic_json(node, p, n));
  for (const auto& t : p.tasks) ranks.push_back(rank_json(node, p, t));
  json paths = json::array();
  for (const auto& row : p.rails.matrix) {
    json r = json::array();
    for (auto c : row) r.push_back(to_string(c));
    paths.push_back(r);
  }
  json doc = {{"schema", "trainrt-topo/1"},
              {"node", {{"hostname", nullable(node.hostname)},
                        {"source", node.source},
                        {"packages", node.packages.size()},
                        {"cores", node.cores.size()},
                        {"cores_are_pus", node.cores_are_pus},
                        {"pus", node.all_cpus.count()},
                        {"cpus", node.all_cpus.to_list()},
                        {"numa", numa}}},
              {"policy", to_string(p.policy)},
              {"allowed", {{"cpus", p.allowed_cpus.to_list()}, {"gpus", p.allowed_gpus}}},
              {"gpus", gpus},
              {"nics", nics},
              {"excluded_nics", p.rails.excluded},
              {"paths", paths},
              {"ranks", ranks}};
  // Strings from topology files may hold invalid UTF-8: replaced by U+FFFD rather than thrown on
  // (control bytes are escaped as \u00XX by the dump itself).
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace trainrt::topo
