// trainrt/error.hpp: the kinds of error, and the failure a collective's error carries as data.
#include <catch2/catch.hpp>
#include <string>

#include "trainrt/error.hpp"

using namespace trainrt;

TEST_CASE("every kind is a trainrt::Error with the context prefix; only collective errors carry a failure", "[error]") {
  try {
    throw CheckpointError("step 3 not committed", "checkpoint");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "checkpoint: step 3 not committed");
    CHECK(e.bare_what() == "step 3 not committed");
    CHECK(dynamic_cast<const CheckpointError*>(&e) != nullptr);
    CHECK_FALSE(e.failure());
  }
  CHECK_FALSE(UsageError("bad root").failure());
  CHECK_FALSE(Error("no memory").failure());
}

TEST_CASE("a PeerError says what failed and which ranks, whatever its message", "[error]") {
  const PeerError plain("connection reset", "gloo");
  REQUIRE(plain.failure());
  CHECK(plain.kind() == FailureKind::Transport);
  CHECK(plain.ranks().empty());
  const PeerError timeout({FailureKind::Timeout, {1, 3}, 2.5}, "any words at all", "shm");
  CHECK(timeout.kind() == FailureKind::Timeout);
  CHECK(timeout.ranks() == std::vector<unsigned>{1, 3});
  CHECK(timeout.failure()->waited_s == 2.5);
  CHECK(std::string(timeout.what()) == "shm: any words at all");
  // A mismatched call is a program bug: a UsageError, with the same fields.
  const UsageError mismatch({FailureKind::Mismatch, {2}}, "ranks called different collectives");
  REQUIRE(mismatch.failure());
  CHECK(mismatch.failure()->kind == FailureKind::Mismatch);
}

TEST_CASE("failure kinds have one name each, read back as written", "[error]") {
  for (FailureKind k : {FailureKind::Transport, FailureKind::DeadPeer, FailureKind::Timeout, FailureKind::Aborted,
                        FailureKind::Mismatch}) {
    INFO(to_string(k));
    CHECK(parse_failure_kind(to_string(k)) == k);
  }
  CHECK(std::string(to_string(FailureKind::DeadPeer)) == "dead_peer");
  CHECK_FALSE(parse_failure_kind("died"));
  CHECK_FALSE(parse_failure_kind(""));
}
