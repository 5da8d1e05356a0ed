#include "trainrt/runtime/shm_communicator.hpp"

#include <algorithm>
#include <thread>

#include "shm_group.hpp"

namespace trainrt {
namespace shm {

void ShmCommunicator::open_segment(bootstrap::Session& session) {
  std::string name;
  // Rank 0 removes the name on every way out of here: once all have mapped it, or on any failure
  // (a mapping that fails after ftruncate, a peer that never maps), so /dev/shm never keeps it.
  struct Unlink {
    std::string name;
    ~Unlink() {
      if (!name.empty()) ::shm_unlink(name.c_str());
    }
  } unlink_on_exit;
  if (rank_ == 0) {
    std::random_device rd;
    name = fmt::format("/trainrt-{}-{:08x}", ::getpid(), rd());
    Fd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
    if (!fd) throw Error(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)), "shm");
    unlink_on_exit.name = name;
    if (::ftruncate(fd.get(), static_cast<off_t>(total_)) != 0)
      throw Error(fmt::format("cannot size {} to {} bytes: {}", name, total_, std::strerror(errno)), "shm");
    map(fd, name);
    auto* h = reinterpret_cast<Header*>(map_.data());
    h->nranks = size_;
    h->slot_bytes = slot_bytes_;
    h->magic = kMagic;
  }
  std::vector<std::uint8_t> blob(name.begin(), name.end());
  auto got = session.broadcast(blob, 0);
  name.assign(got.begin(), got.end());
  if (rank_ != 0) {
    Fd fd(::shm_open(name.c_str(), O_RDWR, 0600));
    if (!fd) throw Error(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)), "shm");
    map(fd, name);
    auto* h = reinterpret_cast<Header*>(map_.data());
    if (h->magic != kMagic || h->nranks != size_ || h->slot_bytes != slot_bytes_)
      throw Error(fmt::format("segment {} does not match this communicator", name), "shm");
  }
  ctl(rank_).pid = static_cast<std::int32_t>(::getpid());
  ctl(rank_).probe_addr = reinterpret_cast<std::uint64_t>(&probe_);
  wait_until_all_attached();  // everyone has it mapped: the name goes now, so a crash can never leak it
}

// The node's own barrier, through the segment: the group is one node, so a fence of the launcher
// (which a SubSession makes a fence of the whole world, two per group before) is not needed. Every
// rank counts itself in once its pid is written, so liveness checks see every pid afterwards.
// Ranks still starting (PMIx_Init, loading) need the cores, and at start-up the early ranks may wait
// seconds for the late ones: they sleep in the kernel on the counter (a futex in the shared
// segment) and the last rank to arrive wakes them. Polling with a sleep cost each waiting rank ~500
// wake-ups a second; at 2,048 ranks on 2 cores that tripled the CPU init used (docs/scale.md).
void ShmCommunicator::wait_until_all_attached() {
  auto* word = &reinterpret_cast<Header*>(map_.data())->attached;
  std::atomic_ref<std::uint32_t> attached(*word);
  if (attached.fetch_add(1, std::memory_order_acq_rel) + 1 >= size_) {
    shared_futex_wake_all(word);
    return;
  }
  for (unsigned spins = 0; spins < spins_before_yield_; ++spins) {
    if (attached.load(std::memory_order_acquire) >= size_) return;
    cpu_relax();
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (std::uint32_t seen; (seen = attached.load(std::memory_order_acquire)) < size_;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero())
      throw PeerError({FailureKind::Timeout, {}, std::chrono::duration<double>(options_.timeout).count()},
                      fmt::format("rank {}: only {} of the node's {} ranks attached the shared-memory segment within {} ms",
                                  rank_, seen, size_, options_.timeout.count()),
                      "shm");
    // Returns at the wake, at once if the count moved since `seen`, or after the bounded sleep.
    shared_futex_wait(word, seen, std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(500)));
  }
}

void ShmCommunicator::do_allreduce(const void* in_v, void* out_v, std::size_t count, DType dtype, ReduceOp op) {
  begin({0, count, 0, Kind::Allreduce, dtype, op});
  const std::size_t es = size_of(dtype), chunk = chunk_elems(dtype);
  const auto* in = static_cast<const std::byte*>(in_v);
  auto* out = static_cast<std::byte*>(out_v);
  std::vector<const void*> inputs(size_);
  if (count * es <= kSmallAllreduce) {
    // One phase: everyone stages everything and reduces everything, in the same rank order.
    std::memcpy(small(rank_, seq_ + 1), in, count * es);
    phase(&RankControl::arrive, "stage");
    check_descriptors();
    for (unsigned r = 0; r < size_; ++r) inputs[r] = small(r, seq_);
    reduce_inputs(inputs.data(), size_, out, count, dtype, op, size_);
    return;
  }
  std::size_t base = 0;
  do {
    const std::size_t m = std::min(chunk, count - base);
    auto lo = [&](unsigned r) { return m * r / size_; };
    const std::size_t my_lo = lo(rank_), my_hi = lo(rank_ + 1);
    // Stage what the peers reduce; our own slice is read straight from `in`.
    std::memcpy(slot(rank_), in + base * es, my_lo * es);
    std::memcpy(slot(rank_) + my_hi * es, in + (base + my_hi) * es, (m - my_hi) * es);
    phase(&RankControl::arrive, "stage");
    if (base == 0) check_descriptors();
    for (unsigned r = 0; r < size_; ++r)
      inputs[r] = r == rank_ ? static_cast<const void*>(in + (base + my_lo) * es) : slot(r) + my_lo * es;
    std::byte* mine = out + (base + my_lo) * es;
    reduce_inputs(inputs.data(), size_, mine, my_hi - my_lo, dtype, op, size_);
    std::byte* res = result(seq_);
    std::memcpy(res + my_lo * es, mine, (my_hi - my_lo) * es);
    phase(&RankControl::done, "reduce");
    for (unsigned r = 0; r < size_; ++r)
      if (r != rank_) std::memcpy(out + (base + lo(r)) * es, res + lo(r) * es, (lo(r + 1) - lo(r)) * es);
    base += m;
  } while (base < count);
}

// Rank r's output is block r of the reduction of every rank's size()*count inputs. Each rank
// stages only the blocks its peers reduce and reduces only its own block, in rank order (so the
// result equals the same block of an allreduce, bit for bit).
void ShmCommunicator::do_reduce_scatter(const void* in_v, void* out_v, std::size_t count, DType dtype, ReduceOp op) {
  begin({0, count, 0, Kind::ReduceScatter, dtype, op});
  const std::size_t es = size_of(dtype);
  const auto* in = static_cast<const std::byte*>(in_v);
  auto* out = static_cast<std::byte*>(out_v);
  std::vector<const void*> inputs(size_);
  if (count * size_ * es <= kSmallBytes) {
    std::memcpy(small(rank_, seq_ + 1), in, count * size_ * es);
    phase(&RankControl::arrive, "stage");
    check_descriptors();
    for (unsigned r = 0; r < size_; ++r) inputs[r] = small(r, seq_) + rank_ * count * es;
    reduce_inputs(inputs.data(), size_, out, count, dtype, op, size_);
    return;
  }
  const std::size_t chunk = chunk_elems(dtype) / size_;  // a slot holds one piece per destination
  std::size_t base = 0;
  do {
    const std::size_t m = std::min(chunk, count - base);
    for (unsigned d = 0; d < size_; ++d)
      if (d != rank_) std::memcpy(slot(rank_) + d * m * es, in + (d * count + base) * es, m * es);
    phase(&RankControl::arrive, "stage");
    if (base == 0) check_descriptors();
    for (unsigned r = 0; r < size_; ++r)
      inputs[r] = r == rank_ ? static_cast<const void*>(in + (rank_ * count + base) * es) : slot(r) + rank_ * m * es;
    reduce_inputs(inputs.data(), size_, out + base * es, m, dtype, op, size_);
    phase(&RankControl::done, "reduce");  // peers may refill their slots only after everyone read
    base += m;
  } while (base < count);
}

}  // namespace shm


std::unique_ptr<Communicator> make_shm_communicator(bootstrap::Session& session, const CommOptions& options) {
  return std::make_unique<shm::ShmCommunicator>(session, options);
}

}  // namespace trainrt
