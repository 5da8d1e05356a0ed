// The shared-memory collectives that move data without reducing it: allgather, broadcast and
// alltoallv. Large ones read the peers' buffers directly (one copy) where the kernel allows it.
#include "shm_group.hpp"

namespace trainrt::shm {

void ShmCommunicator::do_allgather(const void* in_v, void* out_v, std::size_t count, DType dtype) {
  begin({0, count, 0, Kind::Allgather, dtype, ReduceOp::Sum});
  const std::size_t es = size_of(dtype), chunk = chunk_elems(dtype);
  const auto* in = static_cast<const std::byte*>(in_v);
  auto* out = static_cast<std::byte*>(out_v);
  if (count * es <= kSmallBytes) {
    std::memcpy(small(rank_, seq_ + 1), in, count * es);
    phase(&RankControl::arrive, "stage");
    check_descriptors();
    for (unsigned r = 0; r < size_; ++r) std::memcpy(out + r * count * es, small(r, seq_), count * es);
    return;
  }
  if (single_copy_ != SingleCopy::No && count * es >= kSingleCopyBytes && arrive_for_single_copy(in)) {
    std::byte* own = out + rank_ * count * es;
    if (own != in) std::memmove(own, in, count * es);
    for (unsigned r = 0; r < size_; ++r)
      if (r != rank_) read_peer(r, out + r * count * es, count * es);
    phase(&RankControl::done, "gather");  // our `in` must stay put until every peer has read it
    return;
  }
  std::size_t base = 0;
  do {
    const std::size_t m = std::min(chunk, count - base);
    std::memcpy(slot(rank_), in + base * es, m * es);
    phase(&RankControl::arrive, "stage");
    if (base == 0) check_descriptors();
    for (unsigned r = 0; r < size_; ++r) std::memcpy(out + (r * count + base) * es, slot(r), m * es);
    phase(&RankControl::done, "gather");
    base += m;
  } while (base < count);
}

void ShmCommunicator::do_broadcast(void* buf_v, std::size_t count, DType dtype, unsigned root) {
  begin({0, count, root, Kind::Broadcast, dtype, ReduceOp::Sum});
  const std::size_t es = size_of(dtype), chunk = chunk_elems(dtype);
  auto* buf = static_cast<std::byte*>(buf_v);
  if (count * es <= kSmallBytes) {
    if (rank_ == root) std::memcpy(small(root, seq_ + 1), buf, count * es);
    phase(&RankControl::arrive, "stage");
    check_descriptors();
    if (rank_ != root) std::memcpy(buf, small(root, seq_), count * es);
    return;
  }
  if (single_copy_ != SingleCopy::No && count * es >= kSingleCopyBytes && arrive_for_single_copy(buf)) {
    if (rank_ != root) read_peer(root, buf, count * es);
    phase(&RankControl::done, "copy");
    return;
  }
  std::size_t base = 0;
  do {
    const std::size_t m = std::min(chunk, count - base);
    if (rank_ == root) std::memcpy(slot(root), buf + base * es, m * es);
    phase(&RankControl::arrive, "stage");
    if (base == 0) check_descriptors();
    if (rank_ != root) std::memcpy(buf + base * es, slot(root), m * es);
    phase(&RankControl::done, "copy");
    base += m;
  } while (base < count);
}

// Every rank publishes its send and receive sizes (two words per rank, in its small area), so
// every rank checks every pair before any byte moves and knows where its pieces sit in its
// peers' buffers. Then each rank reads its pieces straight from the peers (one copy), or, where
// the kernel does not allow that, the pieces go through the slots, slot_bytes / size() per pair
// and round.
void ShmCommunicator::do_alltoallv(const std::byte* send, const std::vector<std::size_t>& send_bytes, std::byte* recv,
                                   const std::vector<std::size_t>& recv_bytes) {
  const std::size_t words = 2 * std::size_t{size_};
  if (words * sizeof(std::uint64_t) > kSmallBytes)
    throw UsageError(fmt::format("alltoallv: {} ranks on one node; the shm backend exchanges sizes for at most {}", size_,
                                 kSmallBytes / 2 / sizeof(std::uint64_t)),
                     "shm");
  begin({0, 0, 0, Kind::Alltoallv, DType::F32, ReduceOp::Sum});
  std::vector<std::uint64_t> mine(words);
  for (unsigned r = 0; r < size_; ++r) mine[r] = send_bytes[r], mine[size_ + r] = recv_bytes[r];
  std::memcpy(small(rank_, seq_ + 1), mine.data(), words * sizeof(std::uint64_t));
  bool single = false;
  if (single_copy_ != SingleCopy::No) {
    single = arrive_for_single_copy(send);
  } else {
    phase(&RankControl::arrive, "stage");
    check_descriptors();
  }
  std::vector<std::uint64_t> table(size_ * words);
  for (unsigned r = 0; r < size_; ++r) std::memcpy(&table[r * words], small(r, seq_), words * sizeof(std::uint64_t));
  auto sent = [&](unsigned s, unsigned d) { return table[s * words + d]; };
  auto expected = [&](unsigned d, unsigned s) { return table[d * words + size_ + s]; };
  for (unsigned s = 0; s < size_; ++s)
    for (unsigned d = 0; d < size_; ++d)
      if (sent(s, d) != expected(d, s))
        throw UsageError({FailureKind::Mismatch, {s, d}},
                         fmt::format("alltoallv #{}: rank {} sends {} bytes to rank {}, which expects {}",
                                     current_.op_seq, s, sent(s, d), d, expected(d, s)),
                         "shm");
  std::vector<std::size_t> send_at(size_ + 1, 0), recv_at(size_ + 1, 0);
  for (unsigned r = 0; r < size_; ++r) send_at[r + 1] = send_at[r] + send_bytes[r], recv_at[r + 1] = recv_at[r] + recv_bytes[r];
  std::memcpy(recv + recv_at[rank_], send + send_at[rank_], recv_bytes[rank_]);
  if (single) {
    for (unsigned s = 0; s < size_; ++s) {
      if (s == rank_ || recv_bytes[s] == 0) continue;
      std::size_t at_peer = 0;  // where our piece starts in rank s's send buffer
      for (unsigned d = 0; d < rank_; ++d) at_peer += sent(s, d);
      read_peer(s, recv + recv_at[s], recv_bytes[s], at_peer);
    }
    phase(&RankControl::done, "exchange");  // our `send` must stay put until every peer has read it
    return;
  }
  const std::size_t per_pair = std::max<std::size_t>(slot_bytes_ / size_, 1);
  std::uint64_t rounds = 0;
  for (unsigned s = 0; s < size_; ++s)
    for (unsigned d = 0; d < size_; ++d)
      if (s != d) rounds = std::max<std::uint64_t>(rounds, (sent(s, d) + per_pair - 1) / per_pair);
  for (std::uint64_t k = 0; k < rounds; ++k) {
    const std::size_t lo = k * per_pair;
    for (unsigned d = 0; d < size_; ++d)
      if (d != rank_ && lo < send_bytes[d])
        std::memcpy(slot(rank_) + d * per_pair, send + send_at[d] + lo, std::min(per_pair, send_bytes[d] - lo));
    phase(&RankControl::arrive, "stage");
    for (unsigned s = 0; s < size_; ++s)
      if (s != rank_ && lo < recv_bytes[s])
        std::memcpy(recv + recv_at[s] + lo, slot(s) + rank_ * per_pair, std::min(per_pair, recv_bytes[s] - lo));
    phase(&RankControl::done, "exchange");  // slots are refilled only after every peer has read them
  }
}

}  // namespace trainrt::shm
