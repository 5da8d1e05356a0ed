// check_shrink: a rerun on fewer nodes may restore replicated state only (train.sbatch asks it
// before excluding a node).
#define CATCH_CONFIG_MAIN
#include "../checkpoint/fixture.hpp"
#include "../common/temp_dir.hpp"
#include "trainrt/doctor/shrink.hpp"

using trainrt::checkpoint::Sharding;
using trainrt::doctor::check_shrink;

TEST_CASE("replicated state can shrink, sharded state is reported with its entries") {
  const trainrt::testing::TempDir tmp("doctor-shrink-");
  const auto rep = tmp / "rep", shard = tmp / "shard";
  trainrt::testing::save_in_world(rep, 2, Sharding::Replicated, 3);
  trainrt::testing::save_in_world(shard, 2, Sharding::PerRank, 4);
  auto a = check_shrink(rep);
  INFO(a.message);
  CHECK(a.can_shrink);
  CHECK(a.step == 3u);
  auto b = check_shrink(shard);
  INFO(b.message);
  CHECK_FALSE(b.can_shrink);
  CHECK(b.step == 4u);
  CHECK(b.world_size == 2);
  CHECK(b.sharded_count == 6);  // 3 entries on each of 2 ranks
  CHECK(b.sharded == std::vector<std::string>{"w", "d", "rng"});
  CHECK(b.message.find("saved by 2 ranks") != std::string::npos);
}

TEST_CASE("no checkpoint at all: nothing to restore, the world may change") {
  const trainrt::testing::TempDir tmp("doctor-shrink-");
  auto c = check_shrink(tmp / "none");
  CHECK(c.can_shrink);
  CHECK_FALSE(c.step);
}
