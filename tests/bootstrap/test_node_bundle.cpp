// The node leader's bundle (a gather through node leaders): what a leader packs comes back at the
// right ranks, and a crafted bundle is refused naming the leader, never read past its end.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "node_bundle.hpp"
#include "trainrt/error.hpp"

using namespace trainrt;
using namespace trainrt::bootstrap;

namespace {
Blob bytes(std::initializer_list<int> v) {
  Blob b;
  for (int x : v) b.push_back(static_cast<std::uint8_t>(x));
  return b;
}
}  // namespace

TEST_CASE("a node's bundle puts every blob at its rank, empty blobs included") {
  std::vector<Blob> out(6);
  std::vector<bool> filled(6, false);
  unpack_node_bundle(pack_node_bundle({{4, bytes({1, 2, 3})}, {1, {}}, {5, bytes({9})}}), 1, out, filled);
  unpack_node_bundle(pack_node_bundle({{0, bytes({7, 7})}, {2, bytes({8})}, {3, {}}}), 0, out, filled);
  CHECK(out[4] == bytes({1, 2, 3}));
  CHECK(out[1].empty());
  CHECK(out[5] == bytes({9}));
  CHECK(out[0] == bytes({7, 7}));
  CHECK(out[2] == bytes({8}));
  CHECK(std::find(filled.begin(), filled.end(), false) == filled.end());
  CHECK(pack_node_bundle({}).empty());
}

TEST_CASE("a crafted bundle is an error naming its leader: cut, oversized, outside the world, twice") {
  auto refused = [](const Blob& bundle, std::vector<bool> filled, const char* says) {
    std::vector<Blob> out(filled.size());
    try {
      unpack_node_bundle(bundle, 3, out, filled);
      FAIL("accepted a bundle that " << says);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Matchers::Contains("node leader 3"));
      CHECK_THAT(e.what(), Catch::Matchers::Contains(says));
    }
  };
  const Blob good = pack_node_bundle({{1, bytes({1, 2, 3, 4})}});
  refused(Blob(good.begin(), good.begin() + 5), std::vector<bool>(4), "cut inside a header");
  refused(Blob(good.begin(), good.end() - 1), std::vector<bool>(4), "4 bytes for rank 1 with 3 left");
  refused(pack_node_bundle({{4, bytes({1})}}), std::vector<bool>(4), "outside a world of 4");
  refused(pack_node_bundle({{2, {}}, {2, {}}}), std::vector<bool>(4), "already received");
  refused(good, {false, true, false, false}, "already received");
  Blob huge = good;
  const std::uint32_t lie = 0xffffffffu;
  std::memcpy(huge.data() + 4, &lie, sizeof lie);
  refused(huge, std::vector<bool>(4), "4294967295 bytes for rank 1");
}

TEST_CASE("bundles of every node make the world; a rank no bundle carries is named") {
  const auto all = unpack_node_bundles({{0, pack_node_bundle({{0, bytes({1})}, {1, {}}})}, {2, pack_node_bundle({{2, bytes({3})}})}},
                                       3, "gather to 0");
  CHECK(all == std::vector<Blob>{bytes({1}), {}, bytes({3})});
  // Concatenated bundles are one bundle (what an allgather's root passes on).
  Blob joined = pack_node_bundle({{1, bytes({5})}});
  const Blob more = pack_node_bundle({{0, bytes({4})}});
  joined.insert(joined.end(), more.begin(), more.end());
  CHECK(unpack_node_bundles({{0, joined}}, 2, "allgather") == std::vector<Blob>{bytes({4}), bytes({5})});
  try {
    unpack_node_bundles({{0, pack_node_bundle({{0, bytes({1})}, {2, {}}})}}, 3, "gather to 0");
    FAIL("a world with a missing rank was accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("gather to 0: no bundle carried rank 1's blob"));
  }
}
