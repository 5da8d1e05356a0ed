#include <cstdio>
#include <cstdlib>
#include <utility>

#include "session_impl.hpp"
#include "trainrt/number.hpp"

namespace trainrt::bootstrap {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

std::unique_ptr<Session> Session::open(const SessionOptions& options) {
  if (env("PMIX_NAMESPACE") || env("PMIX_RANK") || env("PMIX_SERVER_URI41") || env("PMIX_SERVER_URI4") ||
      env("PMIX_SERVER_URI3") || env("PMIX_SERVER_URI2"))
    return open_pmix_session(options);
  // N tasks each believing it is alone would silently train N separate models. (A count that is
  // not a number says nothing about that: the launcher wrote it, not the user.)
  if (const char* ntasks = env("SLURM_STEP_NUM_TASKS"); ntasks && to_number<unsigned>(ntasks).value_or(0) > 1)
    throw Error(fmt::format("this Slurm step has {} tasks but no PMIx server; launch with srun --mpi=pmix", ntasks),
                "bootstrap");
  if (const char* ws = env("OMPI_COMM_WORLD_SIZE"); ws && to_number<unsigned>(ws).value_or(0) > 1)
    throw Error(fmt::format("this mpirun job has {} ranks but no PMIx server was found", ws), "bootstrap");
  static bool announced = false;
  if (!options.quiet && !std::exchange(announced, true))
    std::fprintf(stderr, "trainrt: no PMIx server in the environment; running as a single-process world\n");
  return single_process();
}

}  // namespace trainrt::bootstrap
