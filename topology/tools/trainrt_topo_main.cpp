// trainrt-topo: show a node's GPUs, NICs, rails and the placement of N local ranks.
// Every bad input ends in one line on stderr naming it, and exit code 2: main catches every
// exception, and the line escapes what came from a file (control bytes, invalid UTF-8).
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <string_view>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"
#include "trainrt/topology/rails.hpp"
#include "trainrt/topology/render.hpp"

namespace {

constexpr int kBadInput = 2;

int fail(std::string_view message) {
  std::string line = "trainrt-topo: " + trainrt::topo::escape_line(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  return kBadInput;
}

// Non-empty comma-separated items.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  for (auto part : trainrt::split(s, ','))
    if (!part.empty()) out.emplace_back(part);
  return out;
}

// --check: every task's signature line over PMIx; the same verdict on every rank.
int gather_and_check(const std::string& line) {
  trainrt::bootstrap::SessionOptions options;
  options.quiet = true;
  options.timeout = std::chrono::seconds(60);
  auto session = trainrt::bootstrap::Session::open(options);
  const char* ntasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (session->is_single_process() && ntasks && trainrt::to_number<unsigned>(ntasks).value_or(0) > 1)
    throw trainrt::Error(fmt::format("{} tasks but no PMIx server to gather them: run it as srun --mpi=pmix ... "
                                     "trainrt-topo --check",
                                     ntasks),
                         "--check");
  std::vector<std::uint8_t> mine(line.begin(), line.end());
  std::string all;
  for (const auto& blob : session->allgather(mine)) {
    all.append(blob.begin(), blob.end());
    all += '\n';
  }
  trainrt::topo::RailCheck result = trainrt::topo::check_rail_signatures(all);
  if (session->rank() == 0) {
    std::fwrite(result.report.data(), 1, result.report.size(), stdout);
    std::fflush(stdout);
  }
  return result.mismatch ? 1 : 0;
}

int run(int argc, char** argv) {
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
  std::string write_cache, cache;
  auto* write_opt = app.add_option("--write-cache", write_cache,
                                   "write the digested topology cache to this absolute path (as root, once per boot; "
                                   "the plugin reads " + std::string(kDefaultCachePath) +
                                       "), and the node's NCCL topology beside it (PATH without .cache, "
                                       "plus .nccl.xml; none without GPUs), and exit");
  auto* cache_opt = app.add_option("--cache", cache, "read the node from this topology cache; an unusable one is an error");
  write_opt->excludes(cache_opt);
  bool rail_signature = false;
  std::string rail_check;
  app.add_flag("--rail-signature", rail_signature,
               "print this node's rail layout as one line 'HOST rails/1:HASH LAYOUT' and exit; compare nodes with "
               "'srun --ntasks-per-node=1 trainrt-topo --rail-signature | trainrt-topo --rail-check -'");
  bool check = false;
  app.add_flag("--check", check,
               "cross-node rail check: run under 'srun --mpi=pmix' (any tasks per node); every task's rail "
               "signature is gathered over PMIx, rank 0 prints the layouts and names the nodes that differ from the "
               "majority (on a tie, from the first node's); every rank exits 1 on a mismatch");
  app.add_option("--rail-check", rail_check,
                 "read signature lines (a file, or - for stdin), name the nodes whose layout differs from the "
                 "majority; exit 1 on a mismatch");
  app.add_option("--tasks", tasks, "local ranks to place (default: one per allowed GPU, else 1)");
  app.add_option("--gpus", gpus, "allowed GPUs: indexes in PCI order (0,2-3) or PCI bus ids (default: all)");
  app.add_option("--cpus", cpus, "allowed CPUs (PU OS indexes, e.g. 0-23,48-71; default: all)");
  app.add_option("--policy", policy, "rail (default), numa or none");
  app.add_option("--format", format, "table (default), json, env, or nccl-xml (the node as an NCCL_TOPO_FILE)");
  app.add_option("--tasks-per-gpu", tasks_per_gpu, "consecutive ranks sharing one GPU (default 1)");
  app.add_option("--gpus-per-task", gpus_per_task, "GPUs per rank (default 1)");
  app.add_option("--gpu-map", gpu_map, "explicit GPU index per rank, e.g. 3,2,1,0");
  app.add_option("--nic-include", nic_include, "only these NICs are rails (names, netdevs or bus ids)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see --help)");
  }

  if (!rail_check.empty()) {
    std::string text;
    std::ifstream file;
    if (rail_check != "-") {
      file.open(rail_check, std::ios::binary);
      if (!file) throw trainrt::Error("cannot open the signature file", rail_check);
    }
    std::istream& in = rail_check == "-" ? std::cin : file;
    // Bounded like every input: 64 MiB holds 65536 nodes' lines.
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      text.append(buf, static_cast<std::size_t>(in.gcount()));
      if (text.size() > (64u << 20)) throw trainrt::Error("more than 64 MiB of signature lines", rail_check);
    }
    RailCheck check = check_rail_signatures(text);
    std::fwrite(check.report.data(), 1, check.report.size(), stdout);
    return check.mismatch ? 1 : 0;
  }
  if (format != "table" && format != "json" && format != "env" && format != "nccl-xml")
    throw trainrt::Error(fmt::format("unknown format '{}'; valid: table, json, env, nccl-xml", format), "--format");
  PlacementRequest req;
  req.policy = parse_policy(policy);
  const std::string source_file = !xml.empty() ? xml : nccl_xml;
  if (!write_cache.empty()) {
    CachedNode cached;
    cached.stamp = current_stamp(source_file, true);
    cached.node = !xml.empty() ? load_file(xml) : !nccl_xml.empty() ? load_nccl_xml(nccl_xml) : load_live();
    // The NCCL topology beside it first: a step that finds the new cache compares the file with it.
    write_nccl_topo_file(cached.node, write_cache);
    write_cache_file(cached, write_cache);
    fmt::print("wrote {} ({} GPUs, {} NICs, source {})\n", write_cache, cached.node.gpus.size(), cached.node.nics.size(),
               cached.stamp.source);
    if (!cached.node.gpus.empty()) fmt::print("wrote {} (NCCL_TOPO_FILE)\n", nccl_topo_path(write_cache));
    return 0;
  }
  Node node;
  if (!cache.empty()) {
    CachedNode cached = read_cache_file(cache);
    check_fresh(cached.stamp, current_stamp(source_file, false), cache);
    node = std::move(cached.node);
  } else {
    node = !xml.empty() ? load_file(xml) : !nccl_xml.empty() ? load_nccl_xml(nccl_xml) : load_live();
  }
  if (!rail_signature && !check && req.policy == Policy::Rail && node.gpus.empty())
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
  // Counts from the command line are bounded like those from files: at most one rank per CPU.
  for (auto [name, value] : {std::pair<const char*, unsigned>{"--tasks", tasks}, {"--tasks-per-gpu", tasks_per_gpu},
                             {"--gpus-per-task", gpus_per_task}})
    if (value > CpuSet::kMaxCpus)
      throw trainrt::Error(fmt::format("{} is more than the {} supported", value, CpuSet::kMaxCpus), name);
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
  if (format == "nccl-xml") {
    std::string out = render_nccl_topology(node);
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
      throw trainrt::Error("cannot write the output", "stdout");
    return 0;
  }
  if (rail_signature || check) {
    // A live node's rails also carry their subnet prefixes and IP networks (sysfs, procfs).
    RailExtras extras;
    if (node.source == "live") extras = read_rail_extras(node);
    std::string host = node.hostname;  // a file's own host name, or this machine's
    char name[256] = {};
    if (check) {
      // Under srun the Slurm node name tells the nodes apart, whatever file each one was given.
      const char* slurm_name = std::getenv("SLURMD_NODENAME");
      host = slurm_name && *slurm_name ? slurm_name : "";
    }
    if (host.empty() && ::gethostname(name, sizeof name - 1) == 0) host = name;
    const std::string line = rail_signature_line(host, node, req.rails, &extras);
    if (!check) {
      fmt::print("{}\n", line);
      return 0;
    }
    return gather_and_check(line);
  }
  Placement placement = place(node, req);
  std::string out = format == "json"  ? render_json(node, placement)
                    : format == "env" ? render_env_script(node, placement)
                                      : render_table(node, placement);
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    throw trainrt::Error("cannot write the output", "stdout");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // hwloc prints "critical" complaints about inconsistent topologies on stderr; a hostile file
  // could fill it. Our own error names the file instead. An explicit HWLOC_HIDE_ERRORS wins.
  ::setenv("HWLOC_HIDE_ERRORS", "2", 0);
  try {
    return run(argc, argv);
  } catch (const trainrt::Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory (the input asks for more than this machine has)");
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return fail("internal error: unknown exception");
  }
}
