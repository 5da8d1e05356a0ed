// trainrt-topo: a node's GPUs, NICs and rails, and the placement of N local ranks on it.
//   trainrt-topo show [SOURCE] [--tasks N] [--policy P] [--format table|json|env|nccl-xml] ...
//   trainrt-topo write-cache PATH [--xml F | --nccl-xml F]   the digested cache and its NCCL file
//   trainrt-topo rail-signature [SOURCE] [--nic-include ...]   this node's rail layout, one line
//   trainrt-topo rail-check FILE|-                            which nodes' layouts differ
//   trainrt-topo check [SOURCE] [--nic-include ...]            both at once, over PMIx (srun --mpi=pmix)
// SOURCE: --xml FILE, --nccl-xml FILE or --cache FILE; none: this machine (hwloc, live).
// The flag forms of before (no subcommand for show; --write-cache PATH, --rail-signature,
// --rail-check FILE, --check) still work: legacy_args() rewrites them to these.
// Exit codes: 0 ok; 1 rail-check/check found a node that differs; 2 bad input. Every bad input
// ends in one line on stderr naming it: main catches every exception, and the line escapes what
// came from a file (control bytes, invalid UTF-8).
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
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

using namespace trainrt::topo;
constexpr int kBadInput = 2;

int fail(std::string_view message) {
  std::string line = "trainrt-topo: " + escape_line(message) + "\n";
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

// Where the node comes from: a file, a cache, or this machine.
struct Source {
  std::string xml, nccl_xml, cache;

  void add_to(CLI::App& app, bool with_cache) {
    auto* x = app.add_option("--xml", xml, "hwloc XML file (1.x or 2.x) instead of the live machine");
    auto* n = app.add_option("--nccl-xml", nccl_xml, "NCCL topology file (NCCL_TOPO_FILE format)");
    x->excludes(n);
    if (with_cache) app.add_option("--cache", cache, "read the node from this topology cache; an unusable one is an error");
  }
  const std::string& file() const { return !xml.empty() ? xml : nccl_xml; }
  Node load_source() const { return !xml.empty() ? load_file(xml) : !nccl_xml.empty() ? load_nccl_xml(nccl_xml) : load_live(); }
  Node load() const {
    if (cache.empty()) return load_source();
    CachedNode cached = read_cache_file(cache);
    check_fresh(cached.stamp, current_stamp(file(), false), cache);
    return std::move(cached.node);
  }
};

// The old flag forms, rewritten to subcommands (scripts and boot units written for them keep
// working). Precedence as it was: --rail-check, --write-cache, --check, --rail-signature, show.
std::vector<std::string> legacy_args(std::vector<std::string> in) {
  if (!in.empty() && (!in[0].starts_with('-') || in[0] == "-h" || in[0] == "--help")) return in;
  std::optional<std::string> rail_check, write_cache;
  bool check = false, signature = false;
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::string& a = in[i];
    auto value = [&](const std::string& flag) -> std::optional<std::string> {
      if (a == flag && i + 1 < in.size()) return in[++i];
      if (a.starts_with(flag + "=")) return a.substr(flag.size() + 1);
      return std::nullopt;
    };
    if (a == "--check") check = true;
    else if (a == "--rail-signature") signature = true;
    else if (auto v = value("--rail-check")) rail_check = v;
    else if (auto w = value("--write-cache")) write_cache = w;
    else rest.push_back(a);
  }
  std::vector<std::string> out;
  if (rail_check) out = {"rail-check", *rail_check};
  else if (write_cache) out = {"write-cache", *write_cache};
  else out = {check ? "check" : signature ? "rail-signature" : "show"};
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// check: every task's signature line over PMIx; the same verdict on every rank.
int gather_and_check(const std::string& line) {
  trainrt::bootstrap::SessionOptions options;
  options.quiet = true;
  options.timeout = std::chrono::seconds(60);
  auto session = trainrt::bootstrap::Session::open(options);
  const char* ntasks = std::getenv("SLURM_STEP_NUM_TASKS");
  if (session->is_single_process() && ntasks && trainrt::to_number<unsigned>(ntasks).value_or(0) > 1)
    throw trainrt::Error(
        fmt::format("{} tasks but no PMIx server to gather them: run it as srun --mpi=pmix ... trainrt-topo check", ntasks),
        "check");
  std::vector<std::uint8_t> mine(line.begin(), line.end());
  std::string all;
  for (const auto& blob : session->allgather(mine)) {
    all.append(blob.begin(), blob.end());
    all += '\n';
  }
  RailCheck result = check_rail_signatures(all);
  if (session->rank() == 0) {
    std::fwrite(result.report.data(), 1, result.report.size(), stdout);
    std::fflush(stdout);
  }
  return result.mismatch ? 1 : 0;
}

int rail_check(const std::string& from) {
  std::string text;
  std::ifstream file;
  if (from != "-") {
    file.open(from, std::ios::binary);
    if (!file) throw trainrt::Error("cannot open the signature file", from);
  }
  std::istream& in = from == "-" ? std::cin : file;
  // Bounded like every input: 64 MiB holds 65536 nodes' lines.
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > (64u << 20)) throw trainrt::Error("more than 64 MiB of signature lines", from);
  }
  RailCheck check = check_rail_signatures(text);
  std::fwrite(check.report.data(), 1, check.report.size(), stdout);
  return check.mismatch ? 1 : 0;
}

int write_cache(const std::string& path, const Source& source) {
  CachedNode cached;
  cached.stamp = current_stamp(source.file(), true);
  cached.node = source.load_source();
  // The NCCL topology beside it first: a step that finds the new cache compares the file with it.
  write_nccl_topo_file(cached.node, path);
  write_cache_file(cached, path);
  fmt::print("wrote {} ({} GPUs, {} NICs, source {})\n", path, cached.node.gpus.size(), cached.node.nics.size(),
             cached.stamp.source);
  if (!cached.node.gpus.empty()) fmt::print("wrote {} (NCCL_TOPO_FILE)\n", nccl_topo_path(path));
  return 0;
}

// rail-signature and check: a live node's rails also carry their subnet prefixes and IP networks.
int signature(const Source& source, const std::string& nic_include, bool gather) {
  const Node node = source.load();
  RailOptions rails;
  rails.nic_include = split_commas(nic_include);
  RailExtras extras;
  if (node.source == "live") extras = read_rail_extras(node);
  std::string host = node.hostname;  // a file's own host name, or this machine's
  if (gather) {
    // Under srun the Slurm node name tells the nodes apart, whatever file each one was given.
    const char* slurm_name = std::getenv("SLURMD_NODENAME");
    host = slurm_name && *slurm_name ? slurm_name : "";
  }
  char name[256] = {};
  if (host.empty() && ::gethostname(name, sizeof name - 1) == 0) host = name;
  const std::string line = rail_signature_line(host, node, rails, &extras);
  if (gather) return gather_and_check(line);
  fmt::print("{}\n", line);
  return 0;
}

struct ShowArgs {
  Source source;
  std::string gpus, cpus, policy = "rail", format = "table", gpu_map, nic_include;
  unsigned tasks = 0, tasks_per_gpu = 1, gpus_per_task = 1;
};

int show(const ShowArgs& a) {
  if (a.format != "table" && a.format != "json" && a.format != "env" && a.format != "nccl-xml")
    throw trainrt::Error(fmt::format("unknown format '{}'; valid: table, json, env, nccl-xml", a.format), "--format");
  PlacementRequest req;
  req.policy = parse_policy(a.policy);
  const Node node = a.source.load();
  if (req.policy == Policy::Rail && node.gpus.empty())
    throw trainrt::Error("no GPUs found, so policy rail has nothing to place (use --policy numa for CPU-only ranks)",
                         node.source);
  if (!a.cpus.empty()) req.allowed_cpus = CpuSet::parse_list(a.cpus);
  if (!a.gpus.empty()) req.allowed_gpus = parse_gpu_list(node, a.gpus);
  for (const auto& item : split_commas(a.gpu_map)) req.gpu_map.push_back(parse_gpu_list(node, item).front());
  req.rails.nic_include = split_commas(a.nic_include);
  // Counts from the command line are bounded like those from files: at most one rank per CPU.
  for (auto [name, value] : {std::pair<const char*, unsigned>{"--tasks", a.tasks}, {"--tasks-per-gpu", a.tasks_per_gpu},
                             {"--gpus-per-task", a.gpus_per_task}})
    if (value > CpuSet::kMaxCpus)
      throw trainrt::Error(fmt::format("{} is more than the {} supported", value, CpuSet::kMaxCpus), name);
  req.tasks_per_gpu = a.tasks_per_gpu;
  req.gpus_per_task = a.gpus_per_task;
  unsigned tasks = a.tasks;
  if (tasks == 0) {
    std::size_t allowed = req.allowed_gpus ? req.allowed_gpus->size() : node.gpus.size();
    tasks = !req.gpu_map.empty() ? static_cast<unsigned>(req.gpu_map.size())
            : allowed ? static_cast<unsigned>(allowed * a.tasks_per_gpu / std::max(1u, a.gpus_per_task))
                      : 1;
    tasks = std::max(tasks, 1u);
  }
  req.tasks = tasks;
  std::string out;
  if (a.format == "nccl-xml") {
    out = render_nccl_topology(node);
  } else {
    const Placement placement = place(node, req);
    out = a.format == "json" ? render_json(node, placement)
          : a.format == "env" ? render_env_script(node, placement)
                              : render_table(node, placement);
  }
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
    throw trainrt::Error("cannot write the output", "stdout");
  return 0;
}

int run(int argc, char** argv) {
  CLI::App app{
      "trainrt-topo: GPU-first, rail-aware placement of local ranks on one node.\n"
      "Loads the live machine (hwloc) or a topology file, pairs each GPU with the RDMA NIC(s) on its\n"
      "PCIe switch, and binds each rank to whole cores and memory of its GPU's NUMA node, inside the\n"
      "allowed CPUs and GPUs. Exit codes: 0 ok, 1 rail-check/check found a node that differs, 2 bad input.",
      "trainrt-topo"};
  app.require_subcommand(1);

  ShowArgs s;
  auto* show_cmd = app.add_subcommand("show", "the placement of N local ranks (a table, JSON, the environment each "
                                              "rank gets), or the node as an NCCL_TOPO_FILE");
  s.source.add_to(*show_cmd, true);
  show_cmd->add_option("--tasks", s.tasks, "local ranks to place (default: one per allowed GPU, else 1)");
  show_cmd->add_option("--gpus", s.gpus, "allowed GPUs: indexes in PCI order (0,2-3) or PCI bus ids (default: all)");
  show_cmd->add_option("--cpus", s.cpus, "allowed CPUs (PU OS indexes, e.g. 0-23,48-71; default: all)");
  show_cmd->add_option("--policy", s.policy, "rail (default), numa or none");
  show_cmd->add_option("--format", s.format, "table (default), json, env, or nccl-xml (the node as an NCCL_TOPO_FILE)");
  show_cmd->add_option("--tasks-per-gpu", s.tasks_per_gpu, "consecutive ranks sharing one GPU (default 1)");
  show_cmd->add_option("--gpus-per-task", s.gpus_per_task, "GPUs per rank (default 1)");
  show_cmd->add_option("--gpu-map", s.gpu_map, "explicit GPU index per rank, e.g. 3,2,1,0");
  show_cmd->add_option("--nic-include", s.nic_include, "only these NICs are rails (names, netdevs or bus ids)");

  std::string cache_path;
  Source cache_source;
  auto* write_cmd = app.add_subcommand(
      "write-cache", "write the digested topology cache to PATH (as root, once per boot; the plugin reads " +
                         std::string(kDefaultCachePath) +
                         "), and the node's NCCL topology beside it (PATH without .cache, plus .nccl.xml; none "
                         "without GPUs)");
  write_cmd->add_option("PATH", cache_path, "absolute path of the cache")->required();
  cache_source.add_to(*write_cmd, false);

  Source sig_source;
  std::string sig_nics;
  auto* sig_cmd = app.add_subcommand(
      "rail-signature", "this node's rail layout as one line 'HOST rails/1:HASH LAYOUT'; compare nodes with "
                        "'srun --ntasks-per-node=1 trainrt-topo rail-signature | trainrt-topo rail-check -'");
  sig_source.add_to(*sig_cmd, true);
  sig_cmd->add_option("--nic-include", sig_nics, "only these NICs are rails (names, netdevs or bus ids)");

  Source check_source;
  std::string check_nics;
  auto* check_cmd = app.add_subcommand(
      "check", "cross-node rail check: run under 'srun --mpi=pmix' (any tasks per node); every task's rail "
               "signature is gathered over PMIx, rank 0 prints the layouts and names the nodes that differ from the "
               "majority (on a tie, from the first node's); every rank exits 1 on a mismatch");
  check_source.add_to(*check_cmd, true);
  check_cmd->add_option("--nic-include", check_nics, "only these NICs are rails (names, netdevs or bus ids)");

  std::string signatures;
  auto* rail_check_cmd = app.add_subcommand(
      "rail-check", "read signature lines (a file, or - for stdin), name the nodes whose layout differs from the "
                    "majority; exit 1 on a mismatch");
  rail_check_cmd->add_option("FILE", signatures, "signature lines, or - for stdin")->required();

  std::vector<std::string> args = legacy_args(std::vector<std::string>(argv + 1, argv + argc));
  const auto& commands = app.get_subcommands([](const CLI::App*) { return true; });
  if (!args.empty() && !args[0].starts_with('-') &&
      std::none_of(commands.begin(), commands.end(), [&](const CLI::App* c) { return c->get_name() == args[0]; }))
    return fail(fmt::format("unknown subcommand '{}'; valid: show, write-cache, rail-signature, rail-check, check "
                            "(see --help)",
                            args[0]));
  std::vector<char*> rewritten{argv[0]};
  for (auto& a : args) rewritten.push_back(a.data());
  try {
    app.parse(static_cast<int>(rewritten.size()), rewritten.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string(e.what()) + " (see --help)");
  }
  if (rail_check_cmd->parsed()) return rail_check(signatures);
  if (write_cmd->parsed()) return write_cache(cache_path, cache_source);
  if (sig_cmd->parsed()) return signature(sig_source, sig_nics, false);
  if (check_cmd->parsed()) return signature(check_source, check_nics, true);
  return show(s);
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
