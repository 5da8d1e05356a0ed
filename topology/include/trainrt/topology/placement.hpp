#pragma once
// The placement engine: local rank -> GPU(s) -> rail NIC(s) -> whole cores of the GPU's NUMA node
// -> that node's memory, always inside the allowed CPUs and GPUs. Pure: no hwloc, no syscalls.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/topology/node.hpp"
#include "trainrt/topology/rails.hpp"

namespace trainrt::topo {

// rail: GPU + its rail NICs + cores/memory of its NUMA node (default).
// numa: GPU + cores/memory of its NUMA node; NICs left to NCCL. Without GPUs: ranks spread over
//       the NUMA nodes that have allowed cores.
// none: GPUs are handed out, nothing is bound and no NIC is chosen.
enum class Policy { Rail, Numa, None };
Policy parse_policy(std::string_view text);  // throws trainrt::Error naming the value
const char* to_string(Policy policy);

struct PlacementRequest {
  Policy policy = Policy::Rail;
  unsigned tasks = 1;                // local tasks on this node
  unsigned tasks_per_gpu = 1;        // > 1: consecutive ranks share a GPU
  unsigned gpus_per_task = 1;        // > 1: each rank gets consecutive GPUs
  std::optional<CpuSet> allowed_cpus;               // the step's CPUs; default every PU of the node
  std::optional<std::vector<unsigned>> allowed_gpus;  // GPU indexes (PCI order); default all
  std::vector<unsigned> gpu_map;     // explicit rank -> GPU index; overrides the derived order
  std::vector<std::vector<unsigned>> task_gpus;  // explicit rank -> GPU indexes (several per rank);
                                                 // overrides gpu_map and the derived order
  RailOptions rails;
};

struct TaskPlacement {
  unsigned local_rank = 0;
  std::vector<unsigned> gpus;   // Node::gpus indexes
  std::vector<unsigned> nics;   // Node::nics indexes (policy rail only)
  CpuSet cpus;                  // PUs the task may run on
  unsigned cores = 0;           // whole cores in `cpus`
  std::vector<unsigned> mems;   // NUMA os indexes for memory binding
  bool bind = true;             // false for policy none
  bool oversubscribed = false;  // shares cores with another rank
  std::vector<std::string> notes;
};

struct Placement {
  Policy policy = Policy::Rail;
  RailMap rails;
  CpuSet allowed_cpus;
  std::vector<unsigned> allowed_gpus;
  std::vector<TaskPlacement> tasks;
};

Placement place(const Node& node, const PlacementRequest& request);

// "0,2-3" or PCI bus ids "0000:03:00.0,0000:44:00.0" -> GPU indexes; throws naming the bad entry.
std::vector<unsigned> parse_gpu_list(const Node& node, std::string_view text);

}  // namespace trainrt::topo
