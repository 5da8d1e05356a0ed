// check_shrink: a rerun on fewer nodes may restore replicated state and chunks of global tensors,
// not per-rank state (train.sbatch asks it before excluding a node).
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

TEST_CASE("chunks of global tensors can shrink: a smaller world reshards them") {
  const trainrt::testing::TempDir tmp("doctor-shrink-");
  const std::string dir = tmp / "tensors";
  trainrt::testing::ThreadWorld world(2);
  std::vector<std::thread> ranks;
  for (unsigned r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      trainrt::testing::ThreadSession session(world, r);
      std::vector<float> w(1000, static_cast<float>(r));
      trainrt::checkpoint::Options o;
      o.directory = dir;
      trainrt::checkpoint::Manager m(session, o);
      m.register_buffer("w", w.data(), w.size() * 4, trainrt::DType::F32, {1000},
                        trainrt::checkpoint::Shard{{2000}, {1000 * static_cast<std::int64_t>(r)}});
      m.save(5).get();
    });
  for (auto& t : ranks) t.join();
  auto c = check_shrink(dir);
  INFO(c.message);
  CHECK(c.can_shrink);
  CHECK(c.step == 5u);
  CHECK(c.sharded_count == 0);
}

TEST_CASE("no checkpoint at all: nothing to restore, the world may change") {
  const trainrt::testing::TempDir tmp("doctor-shrink-");
  auto c = check_shrink(tmp / "none");
  CHECK(c.can_shrink);
  CHECK_FALSE(c.step);
}
