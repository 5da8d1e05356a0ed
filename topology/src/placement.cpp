#include "trainrt/topology/placement.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::topo {
namespace {

struct CoreSlice {
  CpuSet pus;  // the allowed PUs of one core
};

// Allowed PUs grouped by whole core, in core order.
std::vector<CoreSlice> cores_within(const Node& node, const CpuSet& cpus) {
  std::vector<CoreSlice> out;
  for (const auto& core : node.cores) {
    CpuSet mine = core.pus & cpus;
    if (!mine.empty()) out.push_back({mine});
  }
  return out;
}

// Gives each of `ranks` an even, contiguous share of whole cores; when there are fewer cores than
// ranks, ranks share cores and are marked oversubscribed.
void split_cores(const std::vector<CoreSlice>& cores, const std::vector<TaskPlacement*>& ranks) {
  const std::size_t n = cores.size(), k = ranks.size();
  // Every CPU lies in a core (check_node), so callers pass allowed CPUs that hold at least one; a
  // Node built some other way gets an error here, never a read past an empty list.
  if (n == 0 && k > 0) throw Error("no core holds any of the CPUs to bind to", "placement");
  for (std::size_t j = 0; j < k; ++j) {
    TaskPlacement& t = *ranks[j];
    if (n >= k) {
      for (std::size_t c = j * n / k; c < (j + 1) * n / k; ++c) t.cpus |= cores[c].pus;
      t.cores = static_cast<unsigned>((j + 1) * n / k - j * n / k);
    } else {
      t.cpus = cores[j * n / k].pus;
      t.cores = 1;
    }
  }
}

CpuSet numa_cpus(const Node& node, const std::vector<unsigned>& numa) {
  CpuSet s;
  for (unsigned os : numa)
    if (const NumaNode* n = node.numa_by_os(os)) s |= n->cpus;
  return s;
}

std::string list_of(const std::vector<unsigned>& v) { return fmt::format("{}", fmt::join(v, ",")); }

void check_request(const Node& node, const PlacementRequest& r, const CpuSet& allowed) {
  if (r.tasks == 0) throw UsageError("the number of tasks must be at least 1", "tasks");
  if (r.tasks_per_gpu == 0) throw UsageError("must be at least 1", "tasks-per-gpu");
  if (r.gpus_per_task == 0) throw UsageError("must be at least 1", "gpus-per-task");
  if (r.tasks_per_gpu > 1 && r.gpus_per_task > 1)
    throw UsageError(fmt::format("tasks-per-gpu={} and gpus-per-task={} cannot both exceed 1", r.tasks_per_gpu,
                                 r.gpus_per_task),
                     "placement");
  if (!allowed.is_subset_of(node.all_cpus))
    throw Error(fmt::format("CPUs {} are not on this node (it has {})", (allowed - node.all_cpus).to_list(),
                            node.all_cpus.to_list()),
                "allowed CPUs");
  if (allowed.empty()) throw Error("no CPUs are allowed", "allowed CPUs");
}

std::vector<std::vector<unsigned>> assign_gpus(const Node& node, const PlacementRequest& r,
                                               const std::vector<unsigned>& allowed) {
  std::vector<std::vector<unsigned>> out(r.tasks);
  if (!r.task_gpus.empty()) {
    if (r.task_gpus.size() != r.tasks)
      throw UsageError(fmt::format("{} entries for {} tasks", r.task_gpus.size(), r.tasks), "task GPUs");
    for (unsigned i = 0; i < r.tasks; ++i) {
      if (r.task_gpus[i].empty()) throw Error(fmt::format("rank {} has no GPU", i), "task GPUs");
      for (unsigned g : r.task_gpus[i])
        if (std::find(allowed.begin(), allowed.end(), g) == allowed.end())
          throw Error(fmt::format("rank {} has GPU {}, which is not among the allowed GPUs ({})", i, g, list_of(allowed)),
                      "task GPUs");
    }
    return r.task_gpus;
  }
  if (!r.gpu_map.empty()) {
    if (r.gpu_map.size() != r.tasks)
      throw UsageError(fmt::format("{} entries for {} tasks", r.gpu_map.size(), r.tasks), "gpu map");
    for (unsigned i = 0; i < r.tasks; ++i) {
      if (std::find(allowed.begin(), allowed.end(), r.gpu_map[i]) == allowed.end())
        throw Error(fmt::format("rank {} maps to GPU {}, which is not among the allowed GPUs ({})", i, r.gpu_map[i],
                                list_of(allowed)),
                    "gpu map");
      out[i] = {r.gpu_map[i]};
    }
    return out;
  }
  if (allowed.empty()) return out;
  const std::size_t needed = r.tasks_per_gpu > 1 ? (r.tasks + r.tasks_per_gpu - 1) / r.tasks_per_gpu
                                                 : std::size_t{r.tasks} * r.gpus_per_task;
  if (needed > allowed.size())
    throw Error(fmt::format("{} tasks with {} task(s) per GPU and {} GPU(s) per task need {} GPUs, but {} "
                            "are allowed ({}) of the node's {}",
                            r.tasks, r.tasks_per_gpu, r.gpus_per_task, needed, allowed.size(), list_of(allowed),
                            node.gpus.size()),
                "placement");
  for (unsigned i = 0; i < r.tasks; ++i) {
    if (r.tasks_per_gpu > 1) {
      out[i] = {allowed[i / r.tasks_per_gpu]};
    } else {
      for (unsigned g = 0; g < r.gpus_per_task; ++g) out[i].push_back(allowed[i * r.gpus_per_task + g]);
    }
  }
  return out;
}

void bind_cpus_near_gpus(const Node& node, const CpuSet& allowed, Placement& p) {
  // Ranks whose GPU sits in the same NUMA set split that set's allowed cores.
  std::map<std::vector<unsigned>, std::vector<TaskPlacement*>> by_home;
  for (auto& t : p.tasks) by_home[node.gpus[t.gpus.front()].numa].push_back(&t);

  CpuSet claimed;
  std::vector<TaskPlacement*> homeless;
  for (auto& [numa, ranks] : by_home) {
    CpuSet local = numa_cpus(node, numa) & allowed;
    if (local.empty()) {
      for (TaskPlacement* t : ranks) {
        t->notes.push_back(fmt::format("NUMA node {} of GPU {} has no allowed cores; bound to other allowed cores",
                                       list_of(numa), node.gpus[t->gpus.front()].busid));
        homeless.push_back(t);
      }
      continue;
    }
    claimed |= local;
    split_cores(cores_within(node, local), ranks);
  }
  if (!homeless.empty()) {
    CpuSet pool = allowed - claimed;
    if (pool.empty()) pool = allowed;
    std::sort(homeless.begin(), homeless.end(),
              [](auto* a, auto* b) { return a->local_rank < b->local_rank; });
    split_cores(cores_within(node, pool), homeless);
  }
}

void spread_over_numa(const Node& node, const CpuSet& allowed, Placement& p) {
  std::vector<CpuSet> domains;
  for (const auto& n : node.numa_nodes)
    if (CpuSet c = n.cpus & allowed; !c.empty()) domains.push_back(c);
  if (domains.empty()) domains.push_back(allowed);  // a node without NUMA information
  const std::size_t m = domains.size(), k = p.tasks.size();
  for (std::size_t d = 0; d < m; ++d) {
    std::vector<TaskPlacement*> ranks;
    for (std::size_t i = 0; i < k; ++i)
      if (i * m / k == d) ranks.push_back(&p.tasks[i]);
    if (!ranks.empty()) split_cores(cores_within(node, domains[d]), ranks);
  }
}

void finish_tasks(const Node& node, Placement& p) {
  for (auto& t : p.tasks) {
    for (const auto& n : node.numa_nodes)
      if (n.cpus.intersects(t.cpus)) t.mems.push_back(n.os_index);
  }
  for (std::size_t i = 0; i < p.tasks.size(); ++i)
    for (std::size_t j = i + 1; j < p.tasks.size(); ++j)
      if (p.tasks[i].bind && p.tasks[i].cpus.intersects(p.tasks[j].cpus))
        p.tasks[i].oversubscribed = p.tasks[j].oversubscribed = true;
}

}  // namespace

Policy parse_policy(std::string_view text) {
  if (text == "rail") return Policy::Rail;
  if (text == "numa") return Policy::Numa;
  if (text == "none") return Policy::None;
  throw Error(fmt::format("unknown policy '{}'; valid: rail, numa, none", text), "policy");
}

const char* to_string(Policy policy) {
  switch (policy) {
    case Policy::Rail: return "rail";
    case Policy::Numa: return "numa";
    case Policy::None: break;
  }
  return "none";
}

std::vector<unsigned> parse_gpu_list(const Node& node, std::string_view text) {
  std::vector<unsigned> out;
  if (text.find(':') != std::string_view::npos) {
    for (auto part : split(text, ',')) {
      std::string item(part);
      std::string busid = normalize_busid(item);
      auto it = std::find_if(node.gpus.begin(), node.gpus.end(), [&](const Gpu& g) { return g.busid == busid; });
      if (busid.empty() || it == node.gpus.end())
        throw Error(fmt::format("'{}' is not the PCI bus id of a GPU of this node", item), "GPU list");
      out.push_back(it->index);
    }
  } else {
    CpuSet ids;
    try {
      ids = CpuSet::parse_list(text);
    } catch (const Error& e) {
      throw Error(e.bare_what(), fmt::format("GPU list '{}'", text));
    }
    for (unsigned id : ids.members()) {
      if (id >= node.gpus.size())
        throw Error(fmt::format("GPU {} does not exist; the node has {} GPUs", id, node.gpus.size()),
                    fmt::format("GPU list '{}'", text));
      out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Placement place(const Node& node, const PlacementRequest& r) {
  Placement p;
  p.policy = r.policy;
  p.allowed_cpus = r.allowed_cpus.value_or(node.all_cpus);
  check_request(node, r, p.allowed_cpus);
  if (r.allowed_gpus) {
    p.allowed_gpus = *r.allowed_gpus;
    std::sort(p.allowed_gpus.begin(), p.allowed_gpus.end());
    for (unsigned g : p.allowed_gpus)
      if (g >= node.gpus.size())
        throw Error(fmt::format("GPU {} does not exist; the node has {} GPUs", g, node.gpus.size()), "allowed GPUs");
  } else {
    for (const auto& g : node.gpus) p.allowed_gpus.push_back(g.index);
  }
  if (r.policy == Policy::Rail && p.allowed_gpus.empty())
    throw Error(fmt::format("policy rail needs GPUs, but the node has {} and none is allowed; use policy numa for "
                            "CPU-only tasks",
                            node.gpus.size()),
                "placement");
  p.rails = pair_rails(node, r.rails);

  auto gpus = assign_gpus(node, r, p.allowed_gpus);
  p.tasks.resize(r.tasks);
  for (unsigned i = 0; i < r.tasks; ++i) {
    TaskPlacement& t = p.tasks[i];
    t.local_rank = i;
    t.gpus = gpus[i];
    if (r.policy == Policy::Rail) {
      for (unsigned g : t.gpus) {
        const GpuRail& rail = p.rails.gpus[g];
        for (unsigned n : rail.nics)
          if (std::find(t.nics.begin(), t.nics.end(), n) == t.nics.end()) t.nics.push_back(n);
        if (!rail.note.empty()) t.notes.push_back(rail.note);
      }
    }
  }

  if (r.policy == Policy::None) {
    for (auto& t : p.tasks) {
      t.bind = false;
      t.cpus = p.allowed_cpus;
      t.cores = static_cast<unsigned>(cores_within(node, p.allowed_cpus).size());
    }
  } else if (!p.tasks.front().gpus.empty()) {
    bind_cpus_near_gpus(node, p.allowed_cpus, p);
  } else {
    spread_over_numa(node, p.allowed_cpus, p);
  }
  finish_tasks(node, p);
  return p;
}

}  // namespace trainrt::topo
