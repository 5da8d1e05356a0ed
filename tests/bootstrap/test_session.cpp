#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <stdlib.h>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::bootstrap;

namespace {

// Sets variables for one test and restores the environment after it.
struct ScopedEnv {
  std::vector<std::string> names;
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      names.emplace_back(k);
      ::setenv(k, v, 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& n : names) ::unsetenv(n.c_str());
  }
};

void clear_launcher_env() {
  for (const char* v : {"PMIX_NAMESPACE", "PMIX_RANK", "PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                        "PMIX_SERVER_URI2", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"})
    ::unsetenv(v);
}

}  // namespace

TEST_CASE("outside any PMIx server: a single-process world", "[bootstrap]") {
  clear_launcher_env();
  auto s = Session::open({std::chrono::seconds(5), true});
  CHECK(s->is_single_process());
  CHECK(s->rank() == 0);
  CHECK(s->size() == 1);
  CHECK(s->local_peers() == std::vector<unsigned>{0});
  Blob b = {1, 2, 3};
  CHECK(s->allgather(b) == std::vector<Blob>{b});
  CHECK(s->broadcast(b, 0) == b);
  CHECK_THROWS_WITH(s->broadcast(b, 1), Catch::Contains("root 1"));
  s->barrier();
  CHECK(exchange_unique_id(*s, Blob(128, 7)) == Blob(128, 7));
  CHECK_THROWS_WITH(exchange_unique_id(*s, Blob{}), Catch::Contains("empty unique id"));
  CHECK(s->gather(b, 0) == std::vector<Blob>{b});
  CHECK_THROWS_WITH(s->gather(b, 2), Catch::Contains("root 2"));
  CHECK(s->gather_from(b, {0}) == std::vector<Blob>{b});
  CHECK(s->gather_from(b, {}).empty());
  CHECK_THROWS_WITH(s->gather_from(b, {1}), Catch::Contains("source 1"));
  CHECK(s->ranks_by_node() == std::vector<std::vector<unsigned>>{{0}});
}

TEST_CASE("a multi-task launch without PMIx is an error, not N lonely worlds", "[bootstrap]") {
  clear_launcher_env();
  {
    ScopedEnv env{{"SLURM_STEP_NUM_TASKS", "4"}};
    CHECK_THROWS_WITH(Session::open({std::chrono::seconds(5), true}), Catch::Contains("4 tasks") && Catch::Contains("--mpi=pmix"));
  }
  {
    ScopedEnv env{{"OMPI_COMM_WORLD_SIZE", "2"}};
    CHECK_THROWS_WITH(Session::open({std::chrono::seconds(5), true}), Catch::Contains("2 ranks"));
  }
}

TEST_CASE("PMIx variables without a reachable server: an error", "[bootstrap]") {
  clear_launcher_env();
  ScopedEnv env{{"PMIX_NAMESPACE", "trainrt-test-nowhere"}, {"PMIX_RANK", "0"},
                {"PMIX_SERVER_URI41", "pmix-server.1;tcp4://127.0.0.1:1"}};
  CHECK_THROWS_WITH(Session::open({std::chrono::seconds(5), true}), Catch::Contains("PMIx_Init failed"));
}
