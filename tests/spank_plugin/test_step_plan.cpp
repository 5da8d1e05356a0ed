#include <catch2/catch.hpp>

#include "two_gpu_node.hpp"
#include "step_plan.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::spank;
using namespace trainrt::topo;

namespace {

const Node& node() { return trainrt::testing::two_gpu_node(); }

StepFacts facts() {
  StepFacts f;
  f.job_id = 1234;
  f.step_id = 3;
  f.node_id = 1;
  f.nnodes = 2;
  f.total_tasks = 4;
  f.global_ids = {2, 3};
  f.hostname = "gpu002";
  f.step_nodelist = "gpu[001-002]";
  f.step_gpus = "0,1";
  f.cuda_visible_devices = "0,1";
  f.master_addr = "10.0.0.1";
  return f;
}

std::string env_of(const TaskPlan& t, const std::string& name) {
  for (const auto& v : t.env)
    if (v.name == name) return v.value;
  return "<unset>";
}

}  // namespace

TEST_CASE("hostlists", "[step]") {
  CHECK(first_host("gpu[003-010,12],login1") == "gpu003");
  CHECK(first_host("node7") == "node7");
  CHECK(first_host("a1,b2") == "a1");
  CHECK(first_host("rack[2]-gpu[01-04]") == "rack2-gpu01");
  CHECK_THROWS_AS(first_host("gpu[01"), trainrt::Error);
}

TEST_CASE("a step's plan: PyTorch variables, rails, binding", "[step]") {
  StepPlan plan = plan_step(node(), true, facts(), {}, {});
  REQUIRE(plan.tasks.size() == 2);
  const TaskPlan& t1 = plan.tasks[1];
  CHECK(env_of(t1, "RANK") == "3");
  CHECK(env_of(t1, "LOCAL_RANK") == "1");
  CHECK(env_of(t1, "WORLD_SIZE") == "4");
  CHECK(env_of(t1, "LOCAL_WORLD_SIZE") == "2");
  CHECK(env_of(t1, "GROUP_RANK") == "1");
  CHECK(env_of(t1, "GROUP_WORLD_SIZE") == "2");
  CHECK(env_of(t1, "MASTER_ADDR") == "10.0.0.1");
  CHECK(env_of(t1, "MASTER_PORT") == std::to_string(master_port(1234, 3, PortBand{})));
  // Every task sees the node's step GPUs; position LOCAL_RANK is its own.
  CHECK(env_of(t1, "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(env_of(t1, "TRAINRT_CUDA_DEVICE") == "1");
  CHECK(env_of(plan.tasks[0], "TRAINRT_CUDA_DEVICE") == "0");
  // One node-wide NCCL_IB_HCA; UCX and TRAINRT_NICS keep the task's own rail.
  CHECK(env_of(t1, "NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1");
  CHECK(env_of(plan.tasks[0], "NCCL_IB_HCA") == env_of(t1, "NCCL_IB_HCA"));
  CHECK(env_of(t1, "UCX_NET_DEVICES") == "mlx5_1:1");
  CHECK(env_of(t1, "TRAINRT_NICS") == "mlx5_1");
  CHECK(env_of(t1, "TRAINRT_BIND") == "1");
  CHECK(t1.cpus.to_list() == "4-7");
  CHECK(t1.bind);
  CHECK(plan.warnings.empty());
  CHECK_THAT(plan.table, Catch::Contains("gpu002 (node 1 of 2), step 1234.3, bind=on"));
}

TEST_CASE("options: one-GPU view, own-rail NCCL_IB_HCA, rail ids", "[step]") {
  UserOptions own;
  own.gpus = GpuVisibility::Own;
  own.nics = NicScope::Own;
  StepPlan p = plan_step(node(), true, facts(), own, {});
  CHECK(env_of(p.tasks[1], "CUDA_VISIBLE_DEVICES") == "1");
  CHECK(env_of(p.tasks[1], "TRAINRT_CUDA_DEVICE") == "0");
  CHECK(env_of(p.tasks[1], "NCCL_IB_HCA") == "=mlx5_1:1");
  AdminConfig admin;
  admin.rail_ids = true;
  CHECK(env_of(plan_step(node(), true, facts(), {}, admin).tasks[0], "NCCL_IB_HCA") == "=mlx5_0:1:0,mlx5_1:1:1");
}

TEST_CASE("Slurm's core list and the stepd's CPUs bound the plan", "[step]") {
  StepFacts f = facts();
  f.alloc_cores = "0-1,4-5";
  f.stepd_affinity = CpuSet::parse_list("0-6");
  StepPlan plan = plan_step(node(), true, f, {}, {});
  CHECK(plan.tasks[0].cpus.to_list() == "0-1");
  CHECK(plan.tasks[1].cpus.to_list() == "4-5");
  f.alloc_cores = "0-9";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("core 8") && Catch::Contains("8 cores"));
  f.alloc_cores = "7";
  f.stepd_affinity = CpuSet::parse_list("0-3");
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("do not overlap"));
}

TEST_CASE("GPU lists from Slurm: device numbers, CUDA names, the driver's identity, errors", "[step]") {
  StepFacts f = facts();
  f.step_gpus = "1";
  f.cuda_visible_devices = "0";  // a constrained step renumbers: CUDA sees its only GPU as 0
  f.global_ids = {0};
  f.total_tasks = 1;
  f.nnodes = 1;
  f.node_id = 0;
  StepPlan plan = plan_step(node(), true, f, {}, {});
  CHECK(plan.slurm_local_ids);
  CHECK(env_of(plan.tasks[0], "CUDA_VISIBLE_DEVICES") == "0");
  CHECK(env_of(plan.tasks[0], "TRAINRT_GPU_BUSIDS") == "0000:85:00.0");

  // gres.conf by minor number, minors not in PCI order: the driver's table says which GPU is which.
  StepFacts d = facts();
  d.step_gpus = d.cuda_visible_devices = "0,1";
  d.driver_gpus = {{0, "0000:85:00.0", "GPU-bbbb"}, {1, "0000:05:00.0", "GPU-aaaa"}};
  StepPlan byid = plan_step(node(), true, d, {}, {});
  CHECK(byid.gpu_of_slurm_id.at("0") == 1u);
  CHECK(env_of(byid.tasks[0], "CUDA_VISIBLE_DEVICES") == "GPU-aaaa,GPU-bbbb");
  CHECK(env_of(byid.tasks[0], "TRAINRT_GPU_BUSIDS") == "0000:05:00.0");
  d.step_gpus = "0,7";
  d.cuda_visible_devices = "";
  CHECK_THROWS_WITH(plan_step(node(), true, d, {}, {}), Catch::Contains("no NVIDIA GPU has device minor 7"));

  f.step_gpus = "";
  f.cuda_visible_devices = "0,1";  // the user's own variable never counts as allocated GPUs
  UserOptions rail;
  rail.policy = Policy::Rail;
  CHECK_THROWS_WITH(plan_step(node(), true, f, rail, {}), Catch::Contains("no GPU is allocated") && Catch::Contains("gpu002"));
  StepPlan fallback = plan_step(node(), true, f, {}, {});  // the default policy falls back to numa
  CHECK(env_of(fallback.tasks[0], "TRAINRT_POLICY") == "numa");
  CHECK(env_of(fallback.tasks[0], "CUDA_VISIBLE_DEVICES") == "<unset>");
  f.step_gpus = "5";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("SLURM_STEP_GPUS names GPU 5"));
  f.step_gpus = "GPU-zzz";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("'GPU-zzz'"));
  f.step_gpus = "0";
  f.cuda_visible_devices = "MIG-1234";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("MIG slices"));

  StepFacts two = facts();
  two.global_ids = {0, 1, 2};
  two.total_tasks = 3;
  CHECK_THROWS_WITH(plan_step(node(), true, two, {}, {}), Catch::Contains("need 3 GPUs"));
  UserOptions shared;
  shared.tasks_per_gpu = 2;
  StepPlan sp = plan_step(node(), true, two, shared, {});
  CHECK(env_of(sp.tasks[1], "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(env_of(sp.tasks[1], "TRAINRT_CUDA_DEVICE") == "0");
  CHECK(env_of(sp.tasks[2], "TRAINRT_CUDA_DEVICE") == "1");
}

TEST_CASE("Slurm binding GPUs per task (--gpus-per-task): the plan follows its order", "[step]") {
  StepFacts f = facts();
  f.step_gpus = f.cuda_visible_devices = "1,0";  // Slurm's order is not PCI order here
  f.gpus_per_task = 1;
  StepPlan plan = plan_step(node(), true, f, {}, {});
  CHECK(plan.tasks[0].gpus == std::vector<unsigned>{1});
  CHECK(plan.tasks[0].cpus.to_list() == "4-7");  // the cores of Slurm's GPU, not of local rank 0's
  f.gpu_bind = "none";
  CHECK(plan_step(node(), true, f, {}, {}).tasks[0].gpus == std::vector<unsigned>{0});
}

TEST_CASE("launcher steps: one task holding the node's GPUs is left alone", "[step]") {
  StepFacts f = facts();
  f.global_ids = {1};
  f.total_tasks = 2;
  StepPlan plan = plan_step(node(), true, f, {}, {});
  REQUIRE(plan.launcher);
  REQUIRE(plan.tasks.size() == 1);
  const TaskPlan& t = plan.tasks[0];
  CHECK_FALSE(t.bind);
  CHECK(env_of(t, "TRAINRT_LAUNCHER") == "1");
  CHECK(env_of(t, "RANK") == "<unset>");
  CHECK(env_of(t, "LOCAL_RANK") == "<unset>");
  CHECK(env_of(t, "CUDA_VISIBLE_DEVICES") == "<unset>");
  CHECK(env_of(t, "OMP_NUM_THREADS") == "<unset>");
  CHECK(env_of(t, "NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1");
  CHECK(env_of(t, "MASTER_PORT") != "<unset>");
  CHECK(env_of(t, "GROUP_RANK") == "1");
  UserOptions off;
  off.launcher = LauncherMode::Off;
  StepPlan placed = plan_step(node(), true, f, off, {});
  CHECK_FALSE(placed.launcher);
  CHECK(env_of(placed.tasks[0], "RANK") == "1");
}

TEST_CASE("torchrun's rank algebra is checked", "[step]") {
  StepFacts cyclic = facts();
  cyclic.global_ids = {1, 3};  // node 1 of a cyclic distribution
  StepPlan plan = plan_step(node(), true, cyclic, {}, {});
  REQUIRE(plan.warnings.size() == 1);
  CHECK_THAT(plan.warnings[0], Catch::Contains("--distribution=block"));
  StepFacts uneven = facts();
  uneven.total_tasks = 5;
  CHECK(plan_step(node(), true, uneven, {}, {}).warnings.size() == 1);
}

TEST_CASE("modes: dry for a cached XML, numa without GPUs, bind off", "[step]") {
  StepPlan dry = plan_step(node(), false, facts(), {}, {});
  CHECK_FALSE(dry.tasks[0].bind);
  CHECK(env_of(dry.tasks[0], "TRAINRT_BIND") == "0");
  CHECK_THAT(dry.table, Catch::Contains("bind=dry (cached topology of another machine)"));

  StepFacts cpu = facts();
  cpu.step_gpus = cpu.cuda_visible_devices = "";
  UserOptions numa;
  numa.policy = Policy::Numa;
  StepPlan n = plan_step(node(), true, cpu, numa, {});
  CHECK(n.tasks[0].cpus.to_list() == "0-3");
  CHECK(n.tasks[1].cpus.to_list() == "4-7");
  CHECK(env_of(n.tasks[0], "CUDA_VISIBLE_DEVICES") == "<unset>");
  AdminConfig admin;
  admin.policy = Policy::Numa;
  CHECK(plan_step(node(), true, cpu, {}, admin).tasks.size() == 2);

  UserOptions off;
  off.bind = BindMode::Off;
  CHECK_FALSE(plan_step(node(), true, facts(), off, {}).tasks[0].bind);
}

TEST_CASE("the data network's interface reaches NCCL, Gloo and the runtime", "[step]") {
  StepFacts f = facts();
  f.ifname = "ib0";
  StepPlan plan = plan_step(node(), true, f, {}, {});
  for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TRAINRT_IFNAME"})
    CHECK(env_of(plan.tasks[0], name) == "ib0");
}
