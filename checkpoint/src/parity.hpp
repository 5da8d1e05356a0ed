#pragma once
// Parity instead of buddy copies in the memory tier (docs/checkpoint.md "Memory tier"): nodes in
// groups of g (MemoryTier::parity_group), and the ranks at one position (their index among their
// node's ranks) on a group's nodes form a row. Each member's shard file is cut into g-1 blocks of
// one size (the row's largest file over g-1, rounded up; a shorter file reads as zeros past its
// end), and each member keeps one parity block: the XOR of one block of every other member.
// Member i's block b lies in the parity of member (i + 1 + b) mod g, so the g-1 blocks of a lost
// member lie in the g-1 other parities, one each; each is rebuilt from that parity and the blocks
// of the g-2 other members. A node then holds its own shards plus 1/(g-1) of them in parity
// (S (1 + 1/k) with k = g-1) instead of 2 S, and any one node of a group may be lost.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt::checkpoint::parity {

inline constexpr unsigned kMaxGroup = 64;           // nodes in a parity group
inline constexpr unsigned kMaxRanks = 1u << 20;     // ranks a header may name (format::kMaxWorldSize)
inline constexpr std::size_t kHeaderBytes = 4096;   // the parity file's header, before its block

struct Row {
  std::vector<unsigned> members;  // saved ranks, in node order; a row of one member is unprotected
};

// The rows of a world: `node_of[r]` is rank r's node index (nodes numbered in order of first
// rank), nodes taken in groups of `group` (>= 2) consecutive ones; a last group of a single node
// joins the group before it. Every rank is in exactly one row.
std::vector<Row> rows(const std::vector<unsigned>& node_of, unsigned group);

// Bytes of each block in a row of `members` (>= 2) whose largest shard file has `largest` bytes.
std::uint64_t block_bytes(std::uint64_t largest, std::size_t members);

// Which of member i's blocks the parity of member j holds (i != j, both < g).
unsigned block_of(unsigned i, unsigned j, unsigned g);
// Which member's parity holds block b (< g - 1) of member i.
unsigned holder_of(unsigned i, unsigned b, unsigned g);

// dst ^= src over n bytes.
void xor_into(std::byte* dst, const std::byte* src, std::size_t n);

// What a parity file says of itself (its header): the step, the row, whose parity it is, the
// block size and the XXH3 of the block (hex), so a corrupted parity is refused before use.
struct Header {
  std::uint64_t step = 0;
  std::vector<unsigned> members;
  unsigned holder = 0;  // index into members
  std::uint64_t block = 0;
  std::string xxh3;
};
// Exactly kHeaderBytes: a magic line, then one JSON line, padded with newlines.
std::string header_text(const Header& h);
// "" or why the text is not a parity header (every count and size bounded).
std::string parse_header(std::string_view text, Header& h);

// "parity_00003.xor": the parity of saved rank 3, on the node that rank saved from.
std::string file_name(unsigned holder_rank);
std::optional<unsigned> parse_file_name(const std::string& name);

// The rank r < limit of a file named exactly prefix + r in at least 5 digits + suffix
// ("rank_00003.shard", "parity_00003.xor"), else nullopt.
std::optional<unsigned> parse_rank_file(const std::string& name, std::string_view prefix, std::string_view suffix,
                                        unsigned limit);

}  // namespace trainrt::checkpoint::parity
