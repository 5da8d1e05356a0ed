#include <catch2/catch.hpp>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/env.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/placement.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

// 2 packages x 2 NUMA nodes x 4 cores x 2 threads; one GPU and one IB NIC per NUMA node.
// NUMA n holds cores 4n..4n+3, i.e. PUs 4n-4n+3 and 16+4n-16+4n+3.
const Node& four_gpu_node() {
  static const Node node = [] {
    auto numa = [](const char* gpu, const char* nic, const char* name) {
      return SynthNuma{4, {{{SynthSwitch{{gpu}, {SynthNic{nic, name, "", 0x0207, 1}}}}}}};
    };
    SynthNode n;
    n.packages = {{{numa("0000:05:00.0", "0000:04:00.0", "mlx5_0"), numa("0000:45:00.0", "0000:44:00.0", "mlx5_1")}},
                  {{numa("0000:85:00.0", "0000:84:00.0", "mlx5_2"), numa("0000:c5:00.0", "0000:c4:00.0", "mlx5_3")}}};
    return load_hwloc_xml(write_hwloc_xml(n, "four-gpu"));
  }();
  return node;
}

PlacementRequest tasks(unsigned n, Policy policy = Policy::Rail) {
  PlacementRequest r;
  r.tasks = n;
  r.policy = policy;
  return r;
}

}  // namespace

TEST_CASE("rail policy: rank -> GPU -> its NIC -> its NUMA node's cores and memory", "[placement]") {
  const Node& node = four_gpu_node();
  Placement p = place(node, tasks(4));
  REQUIRE(p.tasks.size() == 4);
  const char* cpus[] = {"0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"};
  for (unsigned i = 0; i < 4; ++i) {
    INFO("rank " << i);
    CHECK(p.tasks[i].gpus == std::vector<unsigned>{i});
    CHECK(p.tasks[i].nics == std::vector<unsigned>{i});
    CHECK(p.tasks[i].cpus.to_list() == cpus[i]);
    CHECK(p.tasks[i].cores == 4);
    CHECK(p.tasks[i].mems == std::vector<unsigned>{i});
    CHECK_FALSE(p.tasks[i].oversubscribed);
    CHECK(p.tasks[i].bind);
  }
}

TEST_CASE("ranks sharing a GPU split its NUMA node's whole cores evenly", "[placement]") {
  PlacementRequest r = tasks(8);
  r.tasks_per_gpu = 2;
  Placement p = place(four_gpu_node(), r);
  CHECK(p.tasks[0].gpus == std::vector<unsigned>{0});
  CHECK(p.tasks[1].gpus == std::vector<unsigned>{0});
  CHECK(p.tasks[0].cpus.to_list() == "0-1,16-17");
  CHECK(p.tasks[1].cpus.to_list() == "2-3,18-19");
  CHECK(p.tasks[7].cpus.to_list() == "14-15,30-31");
  CHECK(p.tasks[7].cores == 2);

  r.tasks = 3;  // an odd count on the last GPU
  r.tasks_per_gpu = 3;
  Placement q = place(four_gpu_node(), r);
  CHECK(q.tasks[0].cores + q.tasks[1].cores + q.tasks[2].cores == 4);
  CHECK_FALSE(q.tasks[0].cpus.intersects(q.tasks[1].cpus));
}

TEST_CASE("more ranks than GPUs is an error that names the numbers", "[placement]") {
  CHECK_THROWS_WITH(place(four_gpu_node(), tasks(8)),
                    Catch::Contains("8 tasks") && Catch::Contains("need 8 GPUs") && Catch::Contains("4 are allowed"));
  PlacementRequest r = tasks(3);
  r.gpus_per_task = 2;
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("need 6 GPUs"));
}

TEST_CASE("allowed GPUs and CPUs bound the placement", "[placement]") {
  PlacementRequest r = tasks(2);
  r.allowed_gpus = std::vector<unsigned>{3, 1};
  Placement p = place(four_gpu_node(), r);
  CHECK(p.tasks[0].gpus == std::vector<unsigned>{1});
  CHECK(p.tasks[1].gpus == std::vector<unsigned>{3});

  r = tasks(4);
  r.allowed_cpus = CpuSet::parse_list("0-1,4-5,8-9,12-13");  // first thread of two cores per NUMA node
  p = place(four_gpu_node(), r);
  CHECK(p.tasks[2].cpus.to_list() == "8-9");
  CHECK(p.tasks[2].cores == 2);
  for (const auto& t : p.tasks) CHECK(t.cpus.is_subset_of(*r.allowed_cpus));

  r.allowed_cpus = CpuSet::parse_list("0-40");
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("32-40") && Catch::Contains("not on this node"));
  r.allowed_cpus = std::nullopt;
  r.allowed_gpus = std::vector<unsigned>{4};
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("GPU 4 does not exist"));
}

TEST_CASE("a GPU whose NUMA node has no allowed cores gets other allowed cores, with a note", "[placement]") {
  PlacementRequest r = tasks(4);
  r.allowed_cpus = CpuSet::parse_list("0-7,16-23");  // NUMA 0 and 1 only
  Placement p = place(four_gpu_node(), r);
  CHECK(p.tasks[0].cpus.to_list() == "0-3,16-19");
  CHECK(p.tasks[2].notes.size() == 1);
  CHECK_THAT(p.tasks[2].notes[0], Catch::Contains("no allowed cores"));
  for (const auto& t : p.tasks) CHECK(t.cpus.is_subset_of(*r.allowed_cpus));
  CHECK(p.tasks[2].oversubscribed);
}

TEST_CASE("gpus-per-task and an explicit GPU map", "[placement]") {
  PlacementRequest r = tasks(2);
  r.gpus_per_task = 2;
  Placement p = place(four_gpu_node(), r);
  CHECK(p.tasks[1].gpus == std::vector<unsigned>{2, 3});
  CHECK(p.tasks[1].nics == std::vector<unsigned>{2, 3});
  CHECK(p.tasks[1].cpus.to_list() == "8-11,24-27");  // the first GPU's NUMA node

  r = tasks(4);
  r.gpu_map = {3, 2, 1, 0};
  p = place(four_gpu_node(), r);
  CHECK(p.tasks[0].gpus == std::vector<unsigned>{3});
  CHECK(p.tasks[0].cpus.to_list() == "12-15,28-31");
  r.gpu_map = {0, 1, 2};
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("3 entries for 4 tasks"));
  r = tasks(2);
  r.gpu_map = {0, 2};
  r.allowed_gpus = std::vector<unsigned>{0, 1};
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("GPU 2"));
}

TEST_CASE("numa and none policies", "[placement]") {
  Placement numa = place(four_gpu_node(), tasks(4, Policy::Numa));
  CHECK(numa.tasks[1].nics.empty());
  CHECK(numa.tasks[1].cpus.to_list() == "4-7,20-23");

  PlacementRequest cpu_only = tasks(2, Policy::Numa);
  cpu_only.allowed_gpus = std::vector<unsigned>{};
  Placement spread = place(four_gpu_node(), cpu_only);
  CHECK(spread.tasks[0].gpus.empty());
  CHECK(spread.tasks[0].cpus.to_list() == "0-3,16-19");
  CHECK(spread.tasks[1].cpus.to_list() == "8-11,24-27");  // spread over the machine

  Placement none = place(four_gpu_node(), tasks(2, Policy::None));
  CHECK_FALSE(none.tasks[0].bind);
  CHECK(none.tasks[0].cpus.to_list() == "0-31");
  CHECK(none.tasks[1].gpus == std::vector<unsigned>{1});
  CHECK(none.tasks[0].nics.empty());

  PlacementRequest no_gpu = tasks(1);
  no_gpu.allowed_gpus = std::vector<unsigned>{};
  CHECK_THROWS_WITH(place(four_gpu_node(), no_gpu), Catch::Contains("policy rail needs GPUs"));
}

TEST_CASE("bad requests and policies name the value", "[placement]") {
  CHECK_THROWS_WITH(parse_policy("fastest"), Catch::Contains("'fastest'") && Catch::Contains("rail, numa, none"));
  CHECK(parse_policy("numa") == Policy::Numa);
  CHECK_THROWS_WITH(place(four_gpu_node(), tasks(0)), Catch::Contains("at least 1"));
  PlacementRequest r = tasks(2);
  r.tasks_per_gpu = 2;
  r.gpus_per_task = 2;
  CHECK_THROWS_WITH(place(four_gpu_node(), r), Catch::Contains("cannot both exceed 1"));
}

TEST_CASE("GPU lists by index or PCI bus id", "[placement]") {
  const Node& node = four_gpu_node();
  CHECK(parse_gpu_list(node, "0,2-3") == std::vector<unsigned>{0, 2, 3});
  CHECK(parse_gpu_list(node, "0000:85:00.0,45:00.0") == std::vector<unsigned>{1, 2});
  CHECK_THROWS_WITH(parse_gpu_list(node, "7"), Catch::Contains("GPU 7 does not exist"));
  CHECK_THROWS_WITH(parse_gpu_list(node, "0000:99:00.0"), Catch::Contains("0000:99:00.0"));
  CHECK_THROWS_AS(parse_gpu_list(node, "x"), trainrt::Error);
}

TEST_CASE("environment rendering: the exact contract", "[env]") {
  const Node& node = four_gpu_node();
  Placement p = place(node, tasks(4));
  std::vector<EnvVar> expected = {
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"TRAINRT_CUDA_DEVICE", "2"},
      {"NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"},
      {"UCX_NET_DEVICES", "mlx5_2:1"},
      {"OMP_NUM_THREADS", "4"},
      {"TRAINRT_POLICY", "rail"},
      {"TRAINRT_LOCAL_RANK", "2"},
      {"TRAINRT_GPU_BUSIDS", "0000:85:00.0"},
      {"TRAINRT_NICS", "mlx5_2"},
      {"TRAINRT_RAILS", "2"},
      {"TRAINRT_CPUS", "8-11,24-27"},
      {"TRAINRT_MEMS", "2"},
      {"TRAINRT_BIND", "1"},
  };
  CHECK(render_env(node, p, p.tasks[2]) == expected);

  EnvOptions own;
  own.gpu_view = GpuView::Own;
  own.hca_scope = HcaScope::Task;
  auto env_own = render_env(node, p, p.tasks[2], own);
  CHECK(std::find(env_own.begin(), env_own.end(), EnvVar{"CUDA_VISIBLE_DEVICES", "2"}) != env_own.end());
  CHECK(std::find(env_own.begin(), env_own.end(), EnvVar{"TRAINRT_CUDA_DEVICE", "0"}) != env_own.end());
  CHECK(std::find(env_own.begin(), env_own.end(), EnvVar{"NCCL_IB_HCA", "=mlx5_2:1"}) != env_own.end());

  EnvOptions all;
  all.cuda_ids = {"a", "b", "c", "d"};
  all.bound = false;
  all.step = StepIdentity{13, 32, 4, 3, 8, "node07", 20123, 77, 2};
  auto env_all = render_env(node, p, p.tasks[2], all);
  auto has = [](const std::vector<EnvVar>& e, const char* name, const char* value) {
    return std::find(e.begin(), e.end(), EnvVar{name, value}) != e.end();
  };
  CHECK(has(env_all, "CUDA_VISIBLE_DEVICES", "a,b,c,d"));
  CHECK(has(env_all, "TRAINRT_CUDA_DEVICE", "2"));
  CHECK(has(env_all, "TRAINRT_BIND", "0"));
  CHECK(has(env_all, "RANK", "13"));
  CHECK(has(env_all, "LOCAL_RANK", "2"));
  CHECK(has(env_all, "WORLD_SIZE", "32"));
  CHECK(has(env_all, "LOCAL_WORLD_SIZE", "4"));
  CHECK(has(env_all, "MASTER_ADDR", "node07"));
  CHECK(has(env_all, "MASTER_PORT", "20123"));
  CHECK(has(env_all, "GROUP_RANK", "3"));
  CHECK(has(env_all, "GROUP_WORLD_SIZE", "8"));
  CHECK(has(env_all, "TRAINRT_NNODES", "8"));

  Placement none = place(node, tasks(1, Policy::None));
  auto env = render_env(node, none, none.tasks[0]);
  for (const auto& v : env) CHECK(v.name != "NCCL_IB_HCA");
  CHECK(std::find(env.begin(), env.end(), EnvVar{"TRAINRT_BIND", "0"}) != env.end());
  CHECK(std::find(env.begin(), env.end(), EnvVar{"OMP_NUM_THREADS", "16"}) != env.end());
}

TEST_CASE("environment rendering: what the launcher decided, every variable from this one function", "[env]") {
  const Node& node = four_gpu_node();
  Placement p = place(node, tasks(4));
  auto value = [](const std::vector<EnvVar>& e, const char* name) {
    for (const auto& v : e)
      if (v.name == name) return v.value;
    return std::string("<unset>");
  };
  auto names = [](const std::vector<EnvVar>& e) {
    std::vector<std::string> out;
    for (const auto& v : e) out.push_back(v.name);
    return out;
  };
  const StepIdentity step{13, 32, 4, 3, 8, "10.0.0.1", 20123, 77, 2};

  // Slurm bound the task to a GPU and the task still sees the others: the launcher's order.
  EnvOptions listed;
  listed.gpu_view = GpuView::Listed;
  listed.listed_gpus = {3, 2, 0, 1};
  auto l = render_env(node, p, p.tasks[2], listed);
  CHECK(value(l, "CUDA_VISIBLE_DEVICES") == "3,2,0,1");
  CHECK(value(l, "TRAINRT_CUDA_DEVICE") == "1");

  // Slurm confined the task: its GPU is named only by UUID, else Slurm's value stands.
  EnvOptions confined;
  confined.gpu_view = GpuView::Confined;
  auto c = render_env(node, p, p.tasks[2], confined);
  CHECK(value(c, "CUDA_VISIBLE_DEVICES") == "<unset>");
  CHECK(value(c, "TRAINRT_CUDA_DEVICE") == "0");
  confined.cuda_ids = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"};
  CHECK(value(render_env(node, p, p.tasks[2], confined), "CUDA_VISIBLE_DEVICES") == "GPU-c");

  // After the placement's and the step's: the data network, NCCL_TOPO_FILE, then what was kept.
  EnvOptions net;
  net.step = step;
  net.ifname = "ib0";
  net.nccl_topo_file = "/run/train-runtime/topology.nccl.xml";
  net.existing = {{"OMP_NUM_THREADS", "1"}, {"MASTER_PORT", "29501"}, {"UCX_NET_DEVICES", "mlx5_2:1"}, {"RANK", "7"}};
  auto e = render_env(node, p, p.tasks[2], net);
  auto tail = names(e);
  tail.erase(tail.begin(), tail.end() - 6);
  CHECK(tail == std::vector<std::string>{"TRAINRT_STEP_ID", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TRAINRT_IFNAME",
                                         "NCCL_TOPO_FILE", "TRAINRT_ENV_KEPT"});
  CHECK(value(e, "TRAINRT_IFNAME") == "ib0");
  CHECK(value(e, "TRAINRT_ENV_KEPT") == "OMP_NUM_THREADS,MASTER_PORT");  // UCX's is ours already
  CHECK(value(e, "OMP_NUM_THREADS") == "<unset>");
  CHECK(value(e, "MASTER_PORT") == "<unset>");
  CHECK(value(e, "UCX_NET_DEVICES") == "mlx5_2:1");
  CHECK(value(e, "RANK") == "13");  // who the task is is not a tunable
  net.override_existing = true;
  auto o = render_env(node, p, p.tasks[2], net);
  CHECK(value(o, "OMP_NUM_THREADS") == "4");
  CHECK(value(o, "TRAINRT_ENV_OVERRIDDEN") == "OMP_NUM_THREADS,MASTER_PORT");
  CHECK(value(o, "TRAINRT_ENV_KEPT") == "<unset>");

  // A launcher step's one task: the node's rails and where its ranks meet, nothing per rank.
  EnvOptions launcher;
  launcher.launcher = true;
  launcher.step = step;
  CHECK(names(render_env(node, p, p.tasks[0], launcher)) ==
        std::vector<std::string>{"NCCL_IB_HCA", "TRAINRT_LAUNCHER", "TRAINRT_POLICY", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                 "MASTER_ADDR", "MASTER_PORT", "TRAINRT_NODE_ID", "TRAINRT_NNODES", "TRAINRT_JOB_ID",
                                 "TRAINRT_STEP_ID"});
}
