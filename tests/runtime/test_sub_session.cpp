// A SubSession (the node leaders, a node's ranks) maps its members' indices to the parent's ranks:
// allgather_some must ask the parent for the right ranks in one fence, put each blob at its
// member's index, and a non-member must join that same fence and read nothing.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "../../runtime/src/sub_session.hpp"
#include "trainrt/error.hpp"

namespace {

using trainrt::bootstrap::Blob;

// A parent world of `n` ranks seen from rank `me`: rank r's blob is {r}; it records what it was asked.
class FakeWorld final : public trainrt::bootstrap::Session {
 public:
  FakeWorld(unsigned me, unsigned n) : me_(me), n_(n) {}
  unsigned rank() const override { return me_; }
  unsigned size() const override { return n_; }
  unsigned local_rank() const override { return 0; }
  unsigned local_size() const override { return 1; }
  unsigned node_id() const override { return me_; }
  std::vector<unsigned> local_peers() const override { return {me_}; }
  std::vector<std::vector<unsigned>> ranks_by_node() override {
    std::vector<std::vector<unsigned>> out;
    for (unsigned r = 0; r < n_; ++r) out.push_back({r});
    return out;
  }
  std::string job_id() const override { return "fake"; }
  bool is_single_process() const override { return false; }
  std::vector<Blob> allgather(std::span<const std::uint8_t>) override {
    ++fences;
    std::vector<Blob> out;
    for (unsigned r = 0; r < n_; ++r) out.push_back(blob(r));
    return out;
  }
  std::vector<Blob> gather_some(std::span<const std::uint8_t>, const std::vector<unsigned>& sources,
                                const std::vector<unsigned>& reads) override {
    ++fences;
    asked_sources = sources;
    asked_reads = reads;
    std::vector<Blob> out;
    for (unsigned r : reads) out.push_back(blob(r));
    return out;
  }
  void join_gather_from(const std::vector<unsigned>& sources) override {
    ++fences;
    joined = sources;
  }
  Blob broadcast(std::span<const std::uint8_t>, unsigned) override { return {}; }
  void barrier() override {}
  void publish(const std::string&, std::span<const std::uint8_t>) override {}
  Blob lookup(unsigned, const std::string&) override { return {}; }

  static Blob blob(unsigned r) { return Blob{static_cast<std::uint8_t>(r)}; }
  unsigned fences = 0;
  std::vector<unsigned> asked_sources, asked_reads, joined;

 private:
  unsigned me_, n_;
};

const std::vector<unsigned> kMembers = {7, 2, 9, 4};  // not ascending: indices are not ranks

}  // namespace

TEST_CASE("a member reads only the members it names, each blob at that member's index, in one fence") {
  FakeWorld world(9, 10);
  trainrt::SubSession group(world, kMembers);
  REQUIRE(group.rank() == 2);
  const Blob mine{42};
  const auto got = group.allgather_some(mine, {0, 3});  // members 0 and 3: ranks 7 and 4
  CHECK(world.fences == 1);
  CHECK(world.asked_sources == std::vector<unsigned>{2, 4, 7, 9});
  CHECK(world.asked_reads == std::vector<unsigned>{4, 7});
  REQUIRE(got.size() == kMembers.size());
  CHECK(got[0] == FakeWorld::blob(7));
  CHECK(got[3] == FakeWorld::blob(4));
  CHECK(got[1].empty());
  CHECK(got[2].empty());
}

TEST_CASE("a rank outside the group joins the same single fence and reads nothing") {
  FakeWorld world(5, 10);
  trainrt::SubSession group(world, kMembers);
  REQUIRE_FALSE(group.is_member());
  const auto got = group.allgather_some({}, {0, 1});
  CHECK(world.fences == 1);
  CHECK(world.joined == std::vector<unsigned>{2, 4, 7, 9});
  CHECK(world.asked_reads.empty());
  CHECK(got == std::vector<Blob>(kMembers.size()));
}

TEST_CASE("a read outside the group is a UsageError before any fence") {
  FakeWorld world(2, 10);
  trainrt::SubSession group(world, kMembers);
  CHECK_THROWS_AS(group.allgather_some({}, {4}), trainrt::UsageError);
  CHECK(world.fences == 0);
}
