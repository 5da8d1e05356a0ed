#include "parity.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "json_fields.hpp"

namespace trainrt::checkpoint::parity {
namespace {

constexpr std::string_view kMagic = "trainrt-parity 1\n";
constexpr std::uint64_t kMaxBlock = std::uint64_t{1} << 44;  // 16 TiB: far above any shard, below overflow

}  // namespace

std::vector<Row> rows(const std::vector<unsigned>& node_of, unsigned group) {
  unsigned nodes = 0;
  for (unsigned n : node_of) nodes = std::max(nodes, n + 1);
  std::vector<std::vector<unsigned>> ranks(nodes);  // each node's ranks, ascending
  for (unsigned r = 0; r < node_of.size(); ++r) ranks[node_of[r]].push_back(r);
  std::vector<unsigned> order;  // nodes that have ranks, in index order
  for (unsigned n = 0; n < nodes; ++n)
    if (!ranks[n].empty()) order.push_back(n);
  group = std::clamp(group, 2u, kMaxGroup);
  std::vector<std::pair<std::size_t, std::size_t>> groups;  // [first, last) into order
  for (std::size_t first = 0; first < order.size(); first += group)
    groups.emplace_back(first, std::min(order.size(), first + group));
  // A single node left at the end has nobody to share parity with: it joins the group before.
  if (groups.size() >= 2 && groups.back().second - groups.back().first == 1) {
    groups[groups.size() - 2].second = groups.back().second;
    groups.pop_back();
  }
  std::vector<Row> out;
  for (const auto& [first, last] : groups) {
    std::size_t widest = 0;
    for (std::size_t k = first; k < last; ++k) widest = std::max(widest, ranks[order[k]].size());
    for (std::size_t p = 0; p < widest; ++p) {
      Row row;
      for (std::size_t k = first; k < last; ++k)
        if (p < ranks[order[k]].size()) row.members.push_back(ranks[order[k]][p]);
      out.push_back(std::move(row));
    }
  }
  return out;
}

std::uint64_t block_bytes(std::uint64_t largest, std::size_t members) {
  const std::uint64_t k = members > 1 ? members - 1 : 1;
  return std::max<std::uint64_t>(1, (largest + k - 1) / k);
}

unsigned block_of(unsigned i, unsigned j, unsigned g) { return (j + g - i - 1) % g; }
unsigned holder_of(unsigned i, unsigned b, unsigned g) { return (i + 1 + b) % g; }

void xor_into(std::byte* dst, const std::byte* src, std::size_t n) {
  std::size_t k = 0;
  for (; k + 8 <= n; k += 8) {  // words of any alignment; the compiler vectorizes this loop
    std::uint64_t a, b;
    std::memcpy(&a, dst + k, 8);
    std::memcpy(&b, src + k, 8);
    a ^= b;
    std::memcpy(dst + k, &a, 8);
  }
  for (; k < n; ++k) dst[k] ^= src[k];
}

std::string header_text(const Header& h) {
  const nlohmann::json j = {{"step", h.step}, {"members", h.members}, {"holder", h.holder}, {"block", h.block}, {"xxh3", h.xxh3}};
  std::string text = std::string(kMagic) + j.dump() + "\n";
  if (text.size() > kHeaderBytes) throw std::length_error("parity header larger than its space");
  text.resize(kHeaderBytes, '\n');
  return text;
}

std::string parse_header(std::string_view text, Header& h) {
  if (text.size() < kMagic.size() || text.substr(0, kMagic.size()) != kMagic) return "not a parity file (no magic line)";
  text.remove_prefix(kMagic.size());
  const std::size_t end = text.find('\n');
  if (end == std::string_view::npos) return "its header has no end";
  try {
    const auto j = nlohmann::json::parse(text.substr(0, end));
    h = Header{};
    h.step = j.at("step").get<std::uint64_t>();
    // As 64-bit values, range-checked below: a narrowing read would turn 2^32 + 3 into 3.
    const auto members = j.at("members").get<std::vector<std::uint64_t>>();
    const auto holder = j.at("holder").get<std::uint64_t>();
    for (std::uint64_t m : members) {
      if (m >= kMaxRanks) return fmt::format("its row lists rank {}, beyond {}", m, kMaxRanks);
      h.members.push_back(static_cast<unsigned>(m));
    }
    if (holder >= members.size()) return fmt::format("its holder index {} is outside its row of {}", holder, members.size());
    h.holder = static_cast<unsigned>(holder);
    h.block = j.at("block").get<std::uint64_t>();
    h.xxh3 = j.at("xxh3").get<std::string>();
  } catch (const std::exception& e) {
    return fmt::format("its header is malformed ({})", e.what());
  }
  if (h.members.size() < 2 || h.members.size() > kMaxGroup * 2)
    return fmt::format("its row has {} members (2 to {})", h.members.size(), kMaxGroup * 2);
  for (std::size_t k = 0; k < h.members.size(); ++k)
    if (std::count(h.members.begin(), h.members.end(), h.members[k]) != 1)
      return fmt::format("its row lists rank {} twice", h.members[k]);
  if (h.block == 0 || h.block > kMaxBlock) return fmt::format("its block of {} bytes is out of range", h.block);
  if (!format::detail::is_hex16(h.xxh3)) return "its block checksum is not 16 hex digits";
  return {};
}

std::string file_name(unsigned holder_rank) { return fmt::format("parity_{:05}.xor", holder_rank); }

std::optional<unsigned> parse_file_name(const std::string& name) { return parse_rank_file(name, "parity_", ".xor", kMaxRanks); }

std::optional<unsigned> parse_rank_file(const std::string& name, std::string_view prefix, std::string_view suffix,
                                        unsigned limit) {
  if (name.size() < prefix.size() + 5 + suffix.size() || name.size() > prefix.size() + 7 + suffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  unsigned rank = 0;
  for (std::size_t i = prefix.size(); i < name.size() - suffix.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    rank = rank * 10 + static_cast<unsigned>(name[i] - '0');
  }
  // One spelling per rank: "rank_0003.shard" or "rank_000003.shard" is not rank 3's file.
  if (rank >= limit || fmt::format("{}{:05}{}", prefix, rank, suffix) != name) return std::nullopt;
  return rank;
}

}  // namespace trainrt::checkpoint::parity
