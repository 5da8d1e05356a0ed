// Time to a ready world, per rank, under a PMIx server:
//   bootstrap_bench floor    PMIx_Init + Put + Commit + Fence(collect) + Get of rank 0's key: the floor
//   bootstrap_bench trainrt  trainrt::init(): bootstrap session + shared-memory host communicator
// Each rank measures from its own main() to ready; the slowest rank's figure is printed by rank 0.
#include <fmt/format.h>
#include <pmix.h>

#include <chrono>
#include <string>

#include "trainrt/runtime/init.hpp"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const auto t0 = Clock::now();
  std::string mode = argc > 1 ? argv[1] : "trainrt";
  double ms = 0;
  if (mode == "floor") {
    pmix_proc_t me, all;
    if (PMIx_Init(&me, nullptr, 0) != PMIX_SUCCESS) return 1;
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_UINT32;
    v.data.uint32 = me.rank;
    PMIx_Put(PMIX_GLOBAL, "bench.key", &v);
    PMIx_Commit();
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIx_Fence(&all, 1, &info, 1);
    pmix_proc_t root;
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    pmix_value_t* got = nullptr;
    PMIx_Get(&root, "bench.key", nullptr, 0, &got);
    if (got) PMIX_VALUE_RELEASE(got);
    ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    // Gather the slowest rank through one more fence-collected key.
    pmix_value_t t;
    PMIX_VALUE_CONSTRUCT(&t);
    t.type = PMIX_DOUBLE;
    t.data.dval = ms;
    PMIx_Put(PMIX_GLOBAL, "bench.ms", &t);
    PMIx_Commit();
    PMIx_Fence(&all, 1, &info, 1);
    if (me.rank == 0) {
      pmix_value_t* sz = nullptr;
      PMIx_Get(&all, PMIX_JOB_SIZE, nullptr, 0, &sz);
      double worst = 0;
      for (unsigned r = 0; r < sz->data.uint32; ++r) {
        pmix_proc_t p;
        PMIX_LOAD_PROCID(&p, me.nspace, r);
        pmix_value_t* x = nullptr;
        if (PMIx_Get(&p, "bench.ms", nullptr, 0, &x) == PMIX_SUCCESS) {
          worst = std::max(worst, x->data.dval);
          PMIX_VALUE_RELEASE(x);
        }
      }
      fmt::print("floor {} {:.1f}\n", sz->data.uint32, worst);
      PMIX_VALUE_RELEASE(sz);
    }
    PMIx_Finalize(nullptr, 0);
    return 0;
  }
  trainrt::InitOptions io;
  io.nccl = trainrt::DeviceComm::Off;
  io.bootstrap.quiet = true;
  auto rt = trainrt::init(io);
  ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  double worst = ms;
  rt->host->allreduce(&ms, &worst, 1, trainrt::DType::F64, trainrt::ReduceOp::Max);
  if (rt->rank == 0) fmt::print("trainrt {} {:.1f}\n", rt->size, worst);
  return 0;
}
