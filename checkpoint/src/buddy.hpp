#pragma once
// Moving whole shard files between ranks of different nodes (docs/checkpoint.md "Memory tier"):
// buddy copies at a save, and the copies a restore needs on a node that lacks them (a spare, a
// node whose own copy failed its checksums). Every rank computes the same list of transfers, so
// pieces travel through the host communicator's alltoallv without headers, in rounds that bound
// the bytes a rank holds in flight.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trainrt/runtime/communicator.hpp"

namespace trainrt::checkpoint::buddy {

// Each rank's buddy: the rank at the same position (its index among its node's ranks, modulo the
// other node's count) on the next node, nodes taken in the order of their first rank and the last
// followed by the first. -1 for every rank when all ranks share one node. `node_of[r]` is rank r's
// node index.
std::vector<int> pair(const std::vector<unsigned>& node_of);

struct Transfer {
  unsigned from = 0, to = 0;  // ranks; never equal
  std::uint64_t bytes = 0;
};

// Reads `n` bytes at `offset` of transfer `index`'s source (on its sender) into `dst`; "" or why not.
using Reader = std::function<std::string(std::size_t index, std::uint64_t offset, std::byte* dst, std::size_t n)>;
// Writes `n` bytes at `offset` of transfer `index`'s destination (on its receiver); "" or why not.
using Writer = std::function<std::string(std::size_t index, std::uint64_t offset, const std::byte* src, std::size_t n)>;

struct Moved {
  std::string why;  // this rank's first problem ("" when every read and write of it succeeded)
  std::uint64_t sent = 0, received = 0;
  std::size_t rounds = 0;
};

// Collective: every rank of `comm` passes the same transfers. A rank holds at most about
// `budget` bytes of pieces per round (a piece of each transfer it sends or receives; at least
// 1 MiB each). A sender whose read fails sends zeros for the rest of that transfer and a receiver
// whose write fails discards it: every rank keeps taking part, and reports its problem.
Moved move(Communicator& comm, const std::vector<Transfer>& transfers, std::size_t budget, const Reader& read,
           const Writer& write);

}  // namespace trainrt::checkpoint::buddy
