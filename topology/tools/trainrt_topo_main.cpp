// trainrt-topo: show a node's GPUs, NICs, rails and the placement of N local ranks.
// Every bad input ends in one line on stderr naming it, and exit code 2.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"
#include "trainrt/topology/render.hpp"

namespace {

constexpr int kBadInput = 2;

// Non-empty comma-separated items.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (auto part : trainrt::split(s, ','))
    if (!part.empty()) out.emplace_back(part);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainrt::topo;
  CLI::App app{
      "trainrt-topo: GPU-first, rail-aware placement of local ranks on one node.\n"
      "Loads the live machine (hwloc) or a topology file, pairs each GPU with the RDMA NIC(s) on its\n"
      "PCIe switch, and binds each rank to whole cores and memory of its GPU's NUMA node, inside the\n"
      "allowed CPUs and GPUs. Exit codes: 0 ok, 2 bad input.",
      "trainrt-topo"};
  std::string xml, nccl_xml, gpus, cpus, policy = "rail", format = "table", gpu_map, nic_include;
  unsigned tasks = 0, tasks_per_gpu = 1, gpus_per_task = 1;
  auto* xml_opt = app.add_option("--xml", xml, "hwloc XML file (1.x or 2.x) instead of the live machine");
  auto* nccl_opt = app.add_option("--nccl-xml", nccl_xml, "NCCL topology file (NCCL_TOPO_FILE format)");
  xml_opt->excludes(nccl_opt);
  app.add_option("--tasks", tasks, "local ranks to place (default: one per allowed GPU, else 1)");
  app.add_option("--gpus", gpus, "allowed GPUs: indexes in PCI order (0,2-3) or PCI bus ids (default: all)");
  app.add_option("--cpus", cpus, "allowed CPUs (PU OS indexes, e.g. 0-23,48-71; default: all)");
  app.add_option("--policy", policy, "rail (default), numa or none");
  app.add_option("--format", format, "table (default), json or env");
  app.add_option("--tasks-per-gpu", tasks_per_gpu, "consecutive ranks sharing one GPU (default 1)");
  app.add_option("--gpus-per-task", gpus_per_task, "GPUs per rank (default 1)");
  app.add_option("--gpu-map", gpu_map, "explicit GPU index per rank, e.g. 3,2,1,0");
  app.add_option("--nic-include", nic_include, "only these NICs are rails (names, netdevs or bus ids)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trainrt-topo: %s (see --help)\n", e.what());
    return kBadInput;
  }

  try {
    if (format != "table" && format != "json" && format != "env")
      throw trainrt::Error(fmt::format("unknown format '{}'; valid: table, json, env", format), "--format");
    PlacementRequest req;
    req.policy = parse_policy(policy);
    Node node = !xml.empty() ? load_file(xml) : !nccl_xml.empty() ? load_nccl_xml(nccl_xml) : load_live();
    if (req.policy == Policy::Rail && node.gpus.empty())
      throw trainrt::Error("no GPUs found, so policy rail has nothing to place (use --policy numa for CPU-only ranks)",
                           node.source);
    if (!cpus.empty()) req.allowed_cpus = CpuSet::parse_list(cpus);
    if (!gpus.empty()) req.allowed_gpus = parse_gpu_list(node, gpus);
    if (!gpu_map.empty()) {
      for (const auto& item : split_commas(gpu_map)) {
        auto one = parse_gpu_list(node, item);
        req.gpu_map.push_back(one.front());
      }
    }
    req.rails.nic_include = split_commas(nic_include);
    req.tasks_per_gpu = tasks_per_gpu;
    req.gpus_per_task = gpus_per_task;
    if (tasks == 0) {
      std::size_t allowed = req.allowed_gpus ? req.allowed_gpus->size() : node.gpus.size();
      tasks = !req.gpu_map.empty() ? static_cast<unsigned>(req.gpu_map.size())
              : allowed ? static_cast<unsigned>(allowed * tasks_per_gpu / std::max(1u, gpus_per_task))
                        : 1;
      tasks = std::max(tasks, 1u);
    }
    req.tasks = tasks;
    Placement placement = place(node, req);
    std::string out = format == "json"  ? render_json(node, placement)
                      : format == "env" ? render_env_script(node, placement)
                                        : render_table(node, placement);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const trainrt::Error& e) {
    std::fprintf(stderr, "trainrt-topo: %s\n", e.what());
    return kBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrt-topo: internal error: %s\n", e.what());
    return 1;
  }
}
