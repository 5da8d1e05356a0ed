#include "buddy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt::checkpoint::buddy {

std::vector<int> pair(const std::vector<unsigned>& node_of) {
  const std::size_t world = node_of.size();
  std::vector<int> out(world, -1);
  unsigned nodes = 0;
  for (unsigned n : node_of) nodes = std::max(nodes, n + 1);
  if (nodes < 2) return out;
  std::vector<std::vector<unsigned>> ranks(nodes);  // each node's ranks, ascending
  for (unsigned r = 0; r < world; ++r) ranks[node_of[r]].push_back(r);
  // Node indices are dense in order of first rank, but a node may have no rank listed when the
  // caller numbered them otherwise: skip empty ones so every rank gets a live buddy.
  std::vector<unsigned> order;
  for (unsigned n = 0; n < nodes; ++n)
    if (!ranks[n].empty()) order.push_back(n);
  if (order.size() < 2) return out;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& mine = ranks[order[i]];
    const auto& next = ranks[order[(i + 1) % order.size()]];
    for (std::size_t k = 0; k < mine.size(); ++k) out[mine[k]] = static_cast<int>(next[k % next.size()]);
  }
  return out;
}

Moved move(Communicator& comm, const std::vector<Transfer>& transfers, std::size_t budget, const Reader& read,
           const Writer& write) {
  const unsigned me = comm.rank(), world = comm.size();
  Moved out;
  std::uint64_t longest = 0;
  std::vector<std::size_t> involvement(world, 0);
  for (const auto& t : transfers) {
    if (t.from == t.to || t.from >= world || t.to >= world)
      throw UsageError(fmt::format("a transfer from rank {} to rank {} in a world of {}", t.from, t.to, world), "checkpoint");
    longest = std::max(longest, t.bytes);
    ++involvement[t.from];
    ++involvement[t.to];
  }
  if (transfers.empty() || longest == 0) return out;
  const std::size_t busiest = *std::max_element(involvement.begin(), involvement.end());
  const std::size_t segment = std::max<std::size_t>(budget / std::max<std::size_t>(busiest, 1), std::size_t{1} << 20);
  // This rank's sends in destination order and receives in source order, each in list order
  // within one peer: the order alltoallv packs pieces in, the same on both sides.
  std::vector<std::size_t> sends, receives;
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    if (transfers[i].from == me) sends.push_back(i);
    if (transfers[i].to == me) receives.push_back(i);
  }
  std::stable_sort(sends.begin(), sends.end(), [&](auto a, auto b) { return transfers[a].to < transfers[b].to; });
  std::stable_sort(receives.begin(), receives.end(), [&](auto a, auto b) { return transfers[a].from < transfers[b].from; });
  std::vector<bool> read_failed(transfers.size(), false), write_failed(transfers.size(), false);
  auto piece = [&](std::size_t i, std::uint64_t at) {
    return static_cast<std::size_t>(std::min<std::uint64_t>(segment, transfers[i].bytes > at ? transfers[i].bytes - at : 0));
  };
  std::vector<std::byte> send_buf, recv_buf;
  std::vector<std::size_t> send_bytes(world), recv_bytes(world);
  for (std::uint64_t at = 0; at < longest; at += segment) {
    std::fill(send_bytes.begin(), send_bytes.end(), 0);
    std::fill(recv_bytes.begin(), recv_bytes.end(), 0);
    std::size_t total_send = 0, total_recv = 0;
    for (auto i : sends) send_bytes[transfers[i].to] += piece(i, at), total_send += piece(i, at);
    for (auto i : receives) recv_bytes[transfers[i].from] += piece(i, at), total_recv += piece(i, at);
    send_buf.resize(total_send);
    recv_buf.resize(total_recv);
    std::size_t offset = 0;
    for (auto i : sends) {
      const std::size_t n = piece(i, at);
      std::byte* dst = send_buf.data() + offset;
      if (!read_failed[i] && n > 0) {
        if (std::string why = read(i, at, dst, n); !why.empty()) {
          read_failed[i] = true;
          if (out.why.empty()) out.why = why;
        }
      }
      if (read_failed[i]) std::memset(dst, 0, n);
      offset += n;
    }
    comm.alltoallv(send_buf.data(), send_bytes, recv_buf.data(), recv_bytes);
    offset = 0;
    for (auto i : receives) {
      const std::size_t n = piece(i, at);
      if (!write_failed[i] && n > 0) {
        if (std::string why = write(i, at, recv_buf.data() + offset, n); !why.empty()) {
          write_failed[i] = true;
          if (out.why.empty()) out.why = why;
        }
      }
      offset += n;
    }
    out.sent += total_send;
    out.received += total_recv;
    ++out.rounds;
  }
  return out;
}

}  // namespace trainrt::checkpoint::buddy
