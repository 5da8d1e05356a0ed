#include <catch2/catch.hpp>

#include "../topology/synthetic_topology.hpp"
#include "step_plan.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::spank;
using namespace trainrt::topo;

namespace {

// 2 NUMA nodes x 4 cores (no SMT); a GPU + IB NIC per NUMA node.
const Node& node() {
  static const Node n = [] {
    trainrt::test::SynthNode s;
    s.threads_per_core = 1;
    auto numa = [](const char* gpu, const char* nic, const char* name) {
      return trainrt::test::SynthNuma{4, {{{trainrt::test::SynthSwitch{{gpu}, {{nic, name, "", 0x0207, 1}}}}}}};
    };
    s.packages = {{{numa("0000:05:00.0", "0000:04:00.0", "mlx5_0"), numa("0000:85:00.0", "0000:84:00.0", "mlx5_1")}}};
    return load_hwloc_xml(trainrt::test::write_hwloc_xml(s, "step-plan"));
  }();
  return n;
}

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
  return f;
}

std::string env_of(const TaskPlan& t, const std::string& name) {
  for (const auto& v : t.env)
    if (v.name == name) return v.value;
  return "<unset>";
}

}  // namespace

TEST_CASE("hostlists and ports", "[step]") {
  CHECK(first_host("gpu[003-010,12],login1") == "gpu003");
  CHECK(first_host("node7") == "node7");
  CHECK(first_host("a1,b2") == "a1");
  CHECK(first_host("rack[2]-gpu[01-04]") == "rack2-gpu01");
  CHECK_THROWS_AS(first_host("gpu[01"), trainrt::Error);
  CHECK(master_port(1234, 3) == 20000 + 234 * 20 + 3);
  CHECK(master_port(1234, 3) != master_port(1234, 4));
  CHECK(master_port(1234, 3) != master_port(1235, 3));
  CHECK(master_port(4294967295u, 4294967295u) < 40000);
}

TEST_CASE("a step's plan: PyTorch variables, rails, binding", "[step]") {
  StepPlan plan = plan_step(node(), true, facts(), {}, {});
  REQUIRE(plan.tasks.size() == 2);
  const TaskPlan& t1 = plan.tasks[1];
  CHECK(env_of(t1, "RANK") == "3");
  CHECK(env_of(t1, "LOCAL_RANK") == "1");
  CHECK(env_of(t1, "WORLD_SIZE") == "4");
  CHECK(env_of(t1, "LOCAL_WORLD_SIZE") == "2");
  CHECK(env_of(t1, "MASTER_ADDR") == "gpu001");
  CHECK(env_of(t1, "MASTER_PORT") == "24683");
  CHECK(env_of(t1, "CUDA_VISIBLE_DEVICES") == "1");
  CHECK(env_of(t1, "NCCL_IB_HCA") == "=mlx5_1:1");
  CHECK(env_of(t1, "TRAINRT_BIND") == "1");
  CHECK(t1.cpus.to_list() == "4-7");
  CHECK(t1.bind);
  CHECK_THAT(plan.table, Catch::Contains("gpu002 (node 1 of 2), step 1234.3, bind=on"));
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

TEST_CASE("GPU lists from Slurm: gres indexes, CUDA names, errors", "[step]") {
  StepFacts f = facts();
  f.step_gpus = "1";
  f.cuda_visible_devices = "0";  // a constrained step renumbers: CUDA sees its only GPU as 0
  f.global_ids = {0};
  f.total_tasks = 1;
  StepPlan plan = plan_step(node(), true, f, {}, {});
  CHECK(env_of(plan.tasks[0], "CUDA_VISIBLE_DEVICES") == "0");
  CHECK(env_of(plan.tasks[0], "TRAINRT_GPU_BUSIDS") == "0000:85:00.0");

  f.step_gpus = "";
  f.cuda_visible_devices = "";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("no GPU is allocated") && Catch::Contains("gpu002"));
  f.step_gpus = "5";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("SLURM_STEP_GPUS names GPU 5"));
  f.step_gpus = "GPU-zzz";
  CHECK_THROWS_WITH(plan_step(node(), true, f, {}, {}), Catch::Contains("'GPU-zzz'"));

  StepFacts two = facts();
  two.global_ids = {0, 1, 2};
  CHECK_THROWS_WITH(plan_step(node(), true, two, {}, {}), Catch::Contains("need 3 GPUs"));
  UserOptions shared;
  shared.tasks_per_gpu = 2;
  CHECK(env_of(plan_step(node(), true, two, shared, {}).tasks[1], "CUDA_VISIBLE_DEVICES") == "0");
}

TEST_CASE("modes: dry for a cached XML, visible-all, numa without GPUs", "[step]") {
  StepPlan dry = plan_step(node(), false, facts(), {}, {});
  CHECK_FALSE(dry.tasks[0].bind);
  CHECK(env_of(dry.tasks[0], "TRAINRT_BIND") == "0");
  CHECK_THAT(dry.table, Catch::Contains("bind=dry (cached topology of another machine)"));

  UserOptions all;
  all.gpus = GpuVisibility::All;
  StepPlan va = plan_step(node(), true, facts(), all, {});
  CHECK(env_of(va.tasks[1], "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(env_of(va.tasks[1], "TRAINRT_CUDA_DEVICE") == "1");

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
