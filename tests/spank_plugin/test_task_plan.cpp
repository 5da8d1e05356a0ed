#include <catch2/catch.hpp>

#include "two_gpu_node.hpp"
#include "task_plan.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::spank;
using namespace trainrt::topo;

namespace {

const Node& node() { return trainrt::testing::two_gpu_node(); }

StepFacts facts() {
  StepFacts f;
  f.job_id = 99;
  f.step_id = 0;
  f.node_id = 0;
  f.nnodes = 1;
  f.total_tasks = 2;
  f.global_ids = {0, 1};
  f.hostname = "gpu001";
  f.step_nodelist = "gpu001";
  f.step_gpus = f.cuda_visible_devices = "0,1";
  f.stepd_affinity = CpuSet::parse_list("0-7");
  f.master_addr = "127.0.0.1";
  return f;
}

std::string env_of(const FinalTask& t, const std::string& name) {
  for (const auto& v : t.env)
    if (v.name == name) return v.value;
  return "<unset>";
}

TaskFacts untouched() {
  TaskFacts f;
  f.affinity = CpuSet::parse_list("0-7");
  f.env = {{"SLURM_STEP_GPUS", "0,1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  return f;
}

}  // namespace

TEST_CASE("a task Slurm left alone gets the plan", "[task]") {
  StepPlan plan = plan_step(node(), true, facts(), {}, {});
  FinalTask t = finalize_task(plan, 1, untouched());
  REQUIRE(t.cpus);
  CHECK(t.cpus->to_list() == "4-7");
  CHECK(t.mems == std::vector<unsigned>{1});
  CHECK(t.mem == MemPolicy::Prefer);
  CHECK(env_of(t, "OMP_NUM_THREADS") == "4");
  CHECK(env_of(t, "CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK(t.notes.empty());
  CHECK_THROWS_WITH(finalize_task(plan, 2, untouched()), Catch::Contains("no placement for local task 2"));
}

TEST_CASE("Slurm's CPU binding: the variables describe the affinity the task really has", "[task]") {
  StepPlan plan = plan_step(node(), true, facts(), {}, {});
  TaskFacts narrowed = untouched();
  narrowed.affinity = CpuSet::parse_list("4-5");  // --cpu-bind gave task 1 two of its four cores
  FinalTask t = finalize_task(plan, 1, narrowed);
  CHECK(t.cpus->to_list() == "4-5");
  CHECK(env_of(t, "TRAINRT_CPUS") == "4-5");
  CHECK(env_of(t, "OMP_NUM_THREADS") == "2");
  CHECK_THAT(t.notes.at(0), Catch::Contains("narrowed"));

  TaskFacts elsewhere = untouched();
  elsewhere.affinity = CpuSet::parse_list("0-1");  // Slurm put task 1 on the other NUMA node
  FinalTask kept = finalize_task(plan, 1, elsewhere);
  CHECK_FALSE(kept.cpus);  // Slurm's binding stands
  CHECK(env_of(kept, "TRAINRT_CPUS") == "0-1");
  CHECK(env_of(kept, "OMP_NUM_THREADS") == "2");
  CHECK(env_of(kept, "TRAINRT_MEMS") == "0");
  CHECK_THAT(kept.notes.at(0), Catch::Contains("--cpu-bind=none"));
}

TEST_CASE("memory: preferred by default, strict on request, never over --mem-bind", "[task]") {
  UserOptions strict;
  strict.mem = MemPolicy::Bind;
  CHECK(finalize_task(plan_step(node(), true, facts(), strict, {}), 0, untouched()).mem == MemPolicy::Bind);
  TaskFacts user = untouched();
  user.env["SLURM_MEM_BIND_TYPE"] = "local";
  FinalTask t = finalize_task(plan_step(node(), true, facts(), strict, {}), 0, user);
  CHECK(t.mem == MemPolicy::Off);
  CHECK_THAT(t.notes.at(0), Catch::Contains("--mem-bind"));
}

TEST_CASE("policy none shares the cores among the node's tasks", "[task]") {
  UserOptions none;
  none.policy = Policy::None;
  FinalTask t = finalize_task(plan_step(node(), true, facts(), none, {}), 0, untouched());
  CHECK_FALSE(t.cpus);
  CHECK(env_of(t, "OMP_NUM_THREADS") == "4");
}

TEST_CASE("a GPU Slurm bound per task: placed around it, own GPU at position LOCAL_RANK", "[task]") {
  StepFacts f = facts();
  StepPlan plan = plan_step(node(), true, f, {}, {});
  TaskFacts swapped = untouched();
  swapped.env["SLURM_STEP_GPUS"] = "1";  // Slurm gave local task 0 the GPU of NUMA node 1
  swapped.env["CUDA_VISIBLE_DEVICES"] = "1";
  FinalTask t = finalize_task(plan, 0, swapped);
  CHECK(t.cpus->to_list() == "4-7");
  CHECK(env_of(t, "TRAINRT_GPU_BUSIDS") == "0000:85:00.0");
  CHECK(env_of(t, "UCX_NET_DEVICES") == "mlx5_1:1");
  CHECK(env_of(t, "CUDA_VISIBLE_DEVICES") == "1,0");  // Slurm's GPU first: local rank 0's own
  CHECK(env_of(t, "TRAINRT_CUDA_DEVICE") == "0");
  CHECK(t.warnings.empty());
  CHECK_THAT(t.notes.at(0), Catch::Contains("placed around GPU 0000:85:00.0"));
  TaskFacts second = untouched();
  second.env["SLURM_STEP_GPUS"] = second.env["CUDA_VISIBLE_DEVICES"] = "0";
  FinalTask t1 = finalize_task(plan, 1, second);
  CHECK(env_of(t1, "CUDA_VISIBLE_DEVICES") == "1,0");
  CHECK(env_of(t1, "TRAINRT_CUDA_DEVICE") == "1");

  // Confined devices (Slurm renumbers from 0): the one GPU stands, and the user hears why.
  TaskFacts confined = untouched();
  confined.env["SLURM_STEP_GPUS"] = "1";
  confined.env["CUDA_VISIBLE_DEVICES"] = "0";
  FinalTask c = finalize_task(plan, 0, confined);
  CHECK(env_of(c, "CUDA_VISIBLE_DEVICES") == "<unset>");  // Slurm's value stays
  CHECK(env_of(c, "TRAINRT_CUDA_DEVICE") == "0");
  CHECK_THAT(c.warnings.at(0), Catch::Contains("--gpus-per-node"));
  CHECK(finalize_task(plan, 0, untouched()).warnings.empty());

  f.driver_gpus = {{0, "0000:05:00.0", "GPU-aaaa"}, {1, "0000:85:00.0", "GPU-bbbb"}};
  FinalTask byuuid = finalize_task(plan_step(node(), true, f, {}, {}), 0, confined);
  CHECK(env_of(byuuid, "CUDA_VISIBLE_DEVICES") == "GPU-bbbb");
}

TEST_CASE("exported tunables are kept and said; env=override replaces them", "[task]") {
  TaskFacts user = untouched();
  user.env["OMP_NUM_THREADS"] = "1";
  user.env["NCCL_IB_HCA"] = "=mlx5_0:1";  // a site excluding a faulty HCA
  user.env["MASTER_PORT"] = "29501";
  StepPlan plan = plan_step(node(), true, facts(), {}, {});
  FinalTask kept = finalize_task(plan, 0, user);
  CHECK(env_of(kept, "OMP_NUM_THREADS") == "<unset>");
  CHECK(env_of(kept, "NCCL_IB_HCA") == "<unset>");
  CHECK(env_of(kept, "MASTER_PORT") == "<unset>");
  CHECK(env_of(kept, "TRAINRT_ENV_KEPT") == "OMP_NUM_THREADS,NCCL_IB_HCA,MASTER_PORT");
  CHECK(kept.notes.size() == 3);
  CHECK(env_of(kept, "RANK") == "0");  // who the task is is never the user's to keep
  UserOptions over;
  over.env = EnvMode::Override;
  FinalTask replaced = finalize_task(plan_step(node(), true, facts(), over, {}), 0, user);
  CHECK(env_of(replaced, "OMP_NUM_THREADS") == "4");
  CHECK(env_of(replaced, "TRAINRT_ENV_OVERRIDDEN") == "OMP_NUM_THREADS,NCCL_IB_HCA,MASTER_PORT");
}

TEST_CASE("no reachable MASTER_ADDR fails the task unless the user exported one", "[task]") {
  StepFacts f = facts();
  f.master_addr.clear();
  f.master_error = "MASTER_ADDR: the step's first node 'gpu001' resolves to 127.0.1.1";
  StepPlan plan = plan_step(node(), true, f, {}, {});
  CHECK_THROWS_WITH(finalize_task(plan, 0, untouched()), Catch::Contains("127.0.1.1"));
  TaskFacts user = untouched();
  user.env["MASTER_ADDR"] = "10.2.3.4";
  CHECK(env_of(finalize_task(plan, 0, user), "MASTER_ADDR") == "<unset>");
}

TEST_CASE("placed around Slurm's GPU, a task keeps the step's data network and NCCL_TOPO_FILE", "[task]") {
  StepFacts f = facts();
  f.ifname = "ib0";
  f.nccl_topo_file = "/run/train-runtime/topology.nccl.xml";
  StepPlan plan = plan_step(node(), true, f, {}, {});
  TaskFacts swapped = untouched();
  swapped.env["SLURM_STEP_GPUS"] = swapped.env["CUDA_VISIBLE_DEVICES"] = "1";
  FinalTask t = finalize_task(plan, 0, swapped);
  REQUIRE_THAT(t.notes.at(0), Catch::Contains("placed around GPU 0000:85:00.0"));
  for (const char* name : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TRAINRT_IFNAME"}) CHECK(env_of(t, name) == "ib0");
  CHECK(env_of(t, "NCCL_TOPO_FILE") == "/run/train-runtime/topology.nccl.xml");
  CHECK(env_of(finalize_task(plan, 1, untouched()), "NCCL_TOPO_FILE") == "/run/train-runtime/topology.nccl.xml");
}
