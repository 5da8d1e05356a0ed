// The memory tier's parity layout (checkpoint/src/parity.hpp): rows, blocks, and a lost member
// rebuilt bit for bit from the others' blocks and the parities, computed here as a save and a
// restore do (tier_parity.cpp moves the same blocks between ranks).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "parity.hpp"

using namespace trainrt::checkpoint;

namespace {

using Bytes = std::vector<std::byte>;

// The parity each member keeps, as persist_parity() builds it.
std::vector<Bytes> encode(const std::vector<Bytes>& files) {
  const unsigned g = static_cast<unsigned>(files.size());
  std::uint64_t largest = 0;
  for (const auto& f : files) largest = std::max<std::uint64_t>(largest, f.size());
  const std::uint64_t block = parity::block_bytes(largest, g);
  std::vector<Bytes> out(g, Bytes(block));
  for (unsigned i = 0; i < g; ++i)
    for (unsigned j = 0; j < g; ++j) {
      if (i == j) continue;
      Bytes piece(block);
      const std::uint64_t from = parity::block_of(i, j, g) * block;
      for (std::uint64_t k = 0; k < block && from + k < files[i].size(); ++k) piece[k] = files[i][from + k];
      parity::xor_into(out[j].data(), piece.data(), piece.size());
    }
  return out;
}

// Member x's file from everyone else's, as run_parity_rebuilds() assembles it.
Bytes rebuild(const std::vector<Bytes>& files, const std::vector<Bytes>& parities, unsigned x) {
  const unsigned g = static_cast<unsigned>(files.size());
  const std::uint64_t block = parities[0].size();
  Bytes out(block * (g - 1));
  for (unsigned b = 0; b + 1 < g; ++b) {
    const unsigned j = parity::holder_of(x, b, g);
    REQUIRE(j != x);
    parity::xor_into(out.data() + b * block, parities[j].data(), block);
    for (unsigned m = 0; m < g; ++m) {
      if (m == x || m == j) continue;
      const std::uint64_t from = parity::block_of(m, j, g) * block;
      for (std::uint64_t k = 0; k < block && from + k < files[m].size(); ++k) out[b * block + k] ^= files[m][from + k];
    }
  }
  out.resize(files[x].size());
  return out;
}

}  // namespace

TEST_CASE("every member's blocks lie in the other members' parities, one in each") {
  for (unsigned g = 2; g <= 9; ++g)
    for (unsigned i = 0; i < g; ++i) {
      std::set<unsigned> blocks;
      for (unsigned j = 0; j < g; ++j)
        if (j != i) blocks.insert(parity::block_of(i, j, g));
      CHECK(blocks.size() == g - 1);
      CHECK(*blocks.rbegin() == g - 2);
      for (unsigned b = 0; b + 1 < g; ++b) CHECK(parity::block_of(i, parity::holder_of(i, b, g), g) == b);
    }
}

TEST_CASE("rows: groups of consecutive nodes, a lone last node joins the group before, uneven nodes") {
  // 5 nodes of 2 ranks, groups of 2: {n0 n1} {n2 n3 n4}.
  const std::vector<unsigned> node_of = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4};
  const auto rows = parity::rows(node_of, 2);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].members == std::vector<unsigned>{0, 2});
  CHECK(rows[1].members == std::vector<unsigned>{1, 3});
  CHECK(rows[2].members == std::vector<unsigned>{4, 6, 8});
  CHECK(rows[3].members == std::vector<unsigned>{5, 7, 9});
  // A node with an extra rank: that rank's row has one member (unprotected, and said so by the save).
  const auto uneven = parity::rows({0, 0, 0, 1, 1}, 4);
  REQUIRE(uneven.size() == 3);
  CHECK(uneven[2].members == std::vector<unsigned>{2});
  std::set<unsigned> seen;
  for (const auto& r : parity::rows({2, 0, 1, 0, 2, 1, 3}, 3))
    for (unsigned m : r.members) CHECK(seen.insert(m).second);
  CHECK(seen.size() == 7);
}

TEST_CASE("any one member of a row is rebuilt bit for bit, files of uneven sizes") {
  std::mt19937_64 rng(7);
  for (unsigned g = 2; g <= 6; ++g) {
    std::vector<Bytes> files(g);
    for (unsigned i = 0; i < g; ++i) {
      files[i].resize(1000 + rng() % 5000);
      for (auto& b : files[i]) b = static_cast<std::byte>(rng());
    }
    files[g - 1].resize(3);  // a tiny one: mostly padding
    const auto parities = encode(files);
    std::uint64_t largest = 0;
    for (const auto& f : files) largest = std::max<std::uint64_t>(largest, f.size());
    CHECK(parities[0].size() * (g - 1) >= largest);
    for (unsigned x = 0; x < g; ++x) CHECK(rebuild(files, parities, x) == files[x]);
    // One flipped bit in a parity the rebuild reads changes the result (the load's checksums catch it).
    auto bad = parities;
    bad[parity::holder_of(0, 0, g)][0] ^= std::byte{1};
    CHECK(rebuild(files, bad, 0) != files[0]);
  }
}

TEST_CASE("parity headers: round trip, and crafted ones refused by name") {
  parity::Header h;
  h.step = 40;
  h.members = {1, 3, 5};
  h.holder = 2;
  h.block = 12345;
  h.xxh3 = "0123456789abcdef";
  const std::string text = parity::header_text(h);
  CHECK(text.size() == parity::kHeaderBytes);
  parity::Header back;
  REQUIRE(parity::parse_header(text, back).empty());
  CHECK(back.step == 40);
  CHECK(back.members == h.members);
  CHECK(back.holder == 2);
  CHECK(back.block == 12345);
  auto refused = [](parity::Header x) {
    parity::Header out;
    return parity::parse_header(parity::header_text(x), out);
  };
  auto one = h;
  one.members = {1};
  one.holder = 0;
  CHECK(refused(one).find("members") != std::string::npos);
  auto twice = h;
  twice.members = {1, 3, 3};
  CHECK(refused(twice).find("twice") != std::string::npos);
  auto holder = h;
  holder.holder = 3;
  CHECK(refused(holder).find("holder") != std::string::npos);
  auto block = h;
  block.block = 0;
  CHECK(refused(block).find("block") != std::string::npos);
  block.block = std::uint64_t{1} << 50;
  CHECK(refused(block).find("block") != std::string::npos);
  auto hex = h;
  hex.xxh3 = "xyz";
  CHECK(refused(hex).find("checksum") != std::string::npos);
  CHECK(!parity::parse_header("garbage", back).empty());
  // Numbers a 32-bit read would narrow into range (2^32 + 3 -> 3) are refused by their value.
  const std::string wide = "trainrt-parity 1\n{\"step\": 1, \"members\": [1, 4294967299], \"holder\": 0, \"block\": 8, "
                           "\"xxh3\": \"0123456789abcdef\"}\n";
  CHECK(parity::parse_header(wide, back).find("4294967299") != std::string::npos);
  const std::string far = "trainrt-parity 1\n{\"step\": 1, \"members\": [1, 3], \"holder\": 4294967296, \"block\": 8, "
                          "\"xxh3\": \"0123456789abcdef\"}\n";
  CHECK(parity::parse_header(far, back).find("holder") != std::string::npos);
  CHECK(!parity::parse_header("trainrt-parity 1\n{\"step\": 1", back).empty());
  CHECK(!parity::parse_header("trainrt-parity 1\n[1, 2]\n", back).empty());
}

TEST_CASE("parity file names") {
  CHECK(parity::file_name(3) == "parity_00003.xor");
  CHECK(parity::parse_file_name("parity_00003.xor") == 3u);
  CHECK(parity::parse_file_name("parity_123456.xor") == 123456u);
  CHECK(!parity::parse_file_name("parity_3.xor"));
  CHECK(!parity::parse_file_name("parity_0000a.xor"));
  CHECK(!parity::parse_file_name("rank_00003.shard"));
  CHECK(!parity::parse_file_name("parity_00003.xor.tmp"));
}
