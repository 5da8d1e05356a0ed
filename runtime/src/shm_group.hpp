#pragma once
// The shared-memory host backend's class, shared by its two units: shm_communicator.cpp (the
// segment, the phases, allreduce and reduce_scatter) and shm_exchange.cpp (allgather, broadcast,
// alltoallv). Internal to libtrainrt; the public face is trainrt/runtime/shm_communicator.hpp.
#include <fcntl.h>
#include <linux/futex.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mapping.hpp"
#include "trainrt/bootstrap/session.hpp"
#include "host_communicator.hpp"
#include "trainrt/cpu_count.hpp"
#include "trainrt/cpu_relax.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/reduce.hpp"

namespace trainrt::shm {


constexpr std::uint64_t kMagic = 0x74726e7274736d31ull;  // "trnrtsm1"
enum class Kind : std::uint8_t { Allreduce = 1, Allgather, Broadcast, Barrier, ReduceScatter, Alltoallv };

inline const char* to_string(Kind k) {
  switch (k) {
    case Kind::Allreduce: return "allreduce";
    case Kind::Allgather: return "allgather";
    case Kind::Broadcast: return "broadcast";
    case Kind::Barrier: return "barrier";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Alltoallv: return "alltoallv";
  }
  return "?";
}

struct Descriptor {
  std::uint64_t op_seq = 0;
  std::uint64_t count = 0;
  std::uint32_t root = 0;
  Kind kind{};
  DType dtype{};
  ReduceOp op{};
  bool operator==(const Descriptor&) const = default;
};

// One cache line per counter, so ranks spinning on each other do not share lines. Beside each
// counter, how many peers sleep on it (a futex on its low word), so the writer wakes only then.
struct alignas(64) RankControl {
  std::atomic<std::uint64_t> arrive{0};
  std::atomic<std::uint32_t> arrive_sleepers{0};
  char pad0[52];
  std::atomic<std::uint64_t> done{0};
  std::atomic<std::uint32_t> done_sleepers{0};
  char pad1[52];
  std::atomic<std::uint32_t> failed{0};
  std::int32_t pid = 0;
  std::uint64_t peer_read_addr = 0;  // single-copy collectives: where peers read this rank's data
  std::uint64_t probe_addr = 0;      // a word peers read once to learn whether they can read us
  std::atomic<std::uint32_t> can_read_peers{0};  // 1 yes, 2 no; written before the first large copy
  Descriptor desc[2];  // by sequence parity: a fast rank's next call never overwrites what a slow one reads
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(offsetof(RankControl, done) == 64 && offsetof(RankControl, failed) == 128, "one cache line per counter");

struct Header {
  std::uint64_t magic;
  std::uint32_t nranks;
  std::uint64_t slot_bytes;
  std::uint32_t attached;  // ranks that have mapped the segment and written their control block
};

// A futex on a word of the shared segment: not FUTEX_PRIVATE, since the waiters are other
// processes (std::atomic_ref::wait uses the private kind, and has no timeout).
inline void shared_futex_wait(std::uint32_t* word, std::uint32_t expected, std::chrono::nanoseconds limit) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1'000'000'000);
  ::syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);  // EAGAIN, EINTR, ETIMEDOUT: the caller rechecks
}
inline void shared_futex_wake_all(std::uint32_t* word) {
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// The low 32 bits of a counter, the word a futex compares: a counter moves by one at a time, so
// its low word changes whenever it does.
inline std::uint32_t* low_word(std::atomic<std::uint64_t>& counter) {
  static_assert(std::endian::native == std::endian::little, "the low word is the first on this layout");
  static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));
  return reinterpret_cast<std::uint32_t*>(&counter);
}

inline std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

// One-phase collectives up to these sizes; above, the two-phase chunked algorithms move less data.
constexpr std::size_t kSmallBytes = 64 << 10;
constexpr std::size_t kSmallAllreduce = 16 << 10;
// From this size per rank, allgather and broadcast read peers' buffers directly (process_vm_readv,
// one copy, as Open MPI's CMA path does) instead of going through the shared slots (two copies).
constexpr std::size_t kSingleCopyBytes = 256 << 10;

class ShmCommunicator final : public HostCommunicator {
 public:
  ShmCommunicator(bootstrap::Session& session, const CommOptions& options)
      : HostCommunicator("shm"), rank_(session.rank()), size_(session.size()), options_(options) {
    if (session.size() != session.local_size())
      throw UsageError(fmt::format("the shared-memory backend spans one node, but the world has {} ranks and {} are local",
                              session.size(), session.local_size()),
                  "host communicator");
    slot_bytes_ = round_up(std::max<std::size_t>(options.slot_bytes, 4096), 4096);
    ctl_offset_ = 4096;
    slots_offset_ = round_up(ctl_offset_ + size_ * sizeof(RankControl), 4096);
    result_offset_ = slots_offset_ + size_ * slot_bytes_;
    small_offset_ = result_offset_ + 2 * slot_bytes_;
    total_ = small_offset_ + size_ * 2 * kSmallBytes;
    // Spinning only pays while every rank has a core; oversubscribed ranks must yield at once.
    spins_before_yield_ = size_ <= std::max(affinity_cpu_count(), 1u) ? 4096 : 16;
    open_segment(session);
  }
  ~ShmCommunicator() override { stop_progress(); }

  unsigned rank() const override { return rank_; }
  unsigned size() const override { return size_; }
  std::string backend() const override { return "shm"; }

  Work start_allreduce(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op, Mode mode) override {
    return submit(mode, [=, this] { do_allreduce(in, out, count, dtype, op); });
  }

  Work start_reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                            Mode mode) override {
    return submit(mode, [=, this] { do_reduce_scatter(in, out, count, dtype, op); });
  }

  Work start_allgather(const void* in, void* out, std::size_t count, DType dtype, Mode mode) override {
    return submit(mode, [=, this] { do_allgather(in, out, count, dtype); });
  }

  Work start_broadcast(void* buf, std::size_t count, DType dtype, unsigned root, Mode mode) override {
    return submit(mode, [=, this] { do_broadcast(buf, count, dtype, root); });
  }

  Work start_alltoallv(const void* send, std::vector<std::size_t> send_bytes, void* recv,
                       std::vector<std::size_t> recv_bytes, Mode mode) override {
    return submit(mode, [=, this] {
      do_alltoallv(static_cast<const std::byte*>(send), send_bytes, static_cast<std::byte*>(recv), recv_bytes);
    });
  }

  Work start_barrier(Mode mode) override {
    return submit(mode, [this] {
      begin({0, 0, 0, Kind::Barrier, DType::F32, ReduceOp::Sum});
      phase(&RankControl::arrive, "barrier");
      check_descriptors();
    });
  }

  // Peers polling our flag stop waiting for us at once, with a PeerError naming this rank.
  void on_failure() noexcept override { ctl(rank_).failed.store(1, std::memory_order_release); }

 private:
  RankControl& ctl(unsigned r) const { return reinterpret_cast<RankControl*>(map_.data() + ctl_offset_)[r]; }
  std::byte* slot(unsigned r) const { return map_.data() + slots_offset_ + r * slot_bytes_; }
  std::byte* result(std::uint64_t seq) const { return map_.data() + result_offset_ + (seq % 2) * slot_bytes_; }
  // Per rank and sequence parity: one-phase collectives of at most kSmallBytes.
  std::byte* small(unsigned r, std::uint64_t seq) const {
    return map_.data() + small_offset_ + (r * 2 + seq % 2) * kSmallBytes;
  }

  void open_segment(bootstrap::Session& session);  // shm_communicator.cpp

  void wait_until_all_attached();
  void map(const Fd& fd, const std::string& name) {
    void* p = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) throw Error(fmt::format("mmap of {} failed: {}", name, std::strerror(errno)), "shm");
    new (&map_) Mapping(p, total_);
  }

  void begin(Descriptor d) {
    d.op_seq = ++op_seq_;
    current_ = d;
    ctl(rank_).desc[(seq_ + 1) % 2] = d;  // the parity of the arrive that follows
  }

  // Signals this rank reached `field` for a new sequence number, then waits for all peers: it
  // spins, yields (more ranks than cores is normal on small nodes), and a wait that lasts goes to
  // sleep on the peer's counter, so waiting ranks leave the cores to those still working.
  void phase(std::atomic<std::uint64_t> RankControl::*field, const char* what) {
    const std::uint64_t seq = field == &RankControl::arrive ? ++seq_ : seq_;
    const auto sleepers = field == &RankControl::arrive ? &RankControl::arrive_sleepers : &RankControl::done_sleepers;
    // No StoreLoad fence here (a full fence on every phase drains the copy's stores first): this
    // load may miss a peer that counts itself in at this very moment, and that peer's first sleep
    // is 1 ms long for that reason (sleep_on).
    (ctl(rank_).*field).store(seq, std::memory_order_release);
    if ((ctl(rank_).*sleepers).load(std::memory_order_relaxed) != 0) shared_futex_wake_all(low_word(ctl(rank_).*field));
    const auto start = std::chrono::steady_clock::now();
    auto next_check = start + std::chrono::milliseconds(20);
    for (unsigned r = 0; r < size_; ++r) {
      unsigned spins = 0;
      bool sleepy = false;
      SleeperCount counted;
      while ((ctl(r).*field).load(std::memory_order_acquire) < seq) {
        if (++spins < spins_before_yield_) {
          cpu_relax();
          continue;
        }
        if (!sleepy) {
          sched_yield();
          if (spins % 64) continue;
        } else {
          sleep_on(r, field, sleepers, seq, counted);
        }
        auto now = std::chrono::steady_clock::now();
        sleepy = now - start >= kYieldBeforeSleep;
        if (now < next_check) continue;
        next_check = now + std::chrono::milliseconds(20);
        fail_if_peer_gone(r, what);
        if (now - start > options_.timeout) {
          const std::vector<unsigned> late = missing(field, seq);
          throw PeerError({FailureKind::Timeout, late, std::chrono::duration<double>(options_.timeout).count()},
                          fmt::format("rank {}: {} #{} ({}) timed out after {} ms waiting for rank(s) {}", rank_,
                                      to_string(current_.kind), current_.op_seq, what, options_.timeout.count(),
                                      fmt::join(late, ",")),
                          "shm");
        }
      }
    }
  }

  // This rank among the sleepers on one peer's counter, for as long as it waits for that peer.
  struct SleeperCount {
    std::atomic<std::uint32_t>* count = nullptr;
    SleeperCount() = default;
    SleeperCount(const SleeperCount&) = delete;
    SleeperCount& operator=(const SleeperCount&) = delete;
    ~SleeperCount() {
      if (count) count->fetch_sub(1, std::memory_order_relaxed);
    }
  };

  // One slice of sleep until rank r's counter moves (woken by its write) or the slice ends, so the
  // caller's liveness and timeout checks still run every 20 ms. The first slice after counting in
  // is 1 ms: a peer writing at that moment may not have seen the count (phase() has no fence).
  void sleep_on(unsigned r, std::atomic<std::uint64_t> RankControl::*field, std::atomic<std::uint32_t> RankControl::*sleepers,
                std::uint64_t seq, SleeperCount& counted) {
    auto slice = std::chrono::milliseconds(20);
    if (!counted.count) {
      counted.count = &(ctl(r).*sleepers);
      counted.count->fetch_add(1, std::memory_order_seq_cst);
      slice = std::chrono::milliseconds(1);
    }
    const std::uint64_t seen = (ctl(r).*field).load(std::memory_order_seq_cst);
    if (seen < seq) shared_futex_wait(low_word(ctl(r).*field), static_cast<std::uint32_t>(seen), slice);
  }

  void fail_if_peer_gone(unsigned r, const char* what) {
    if (ctl(rank_).failed.load(std::memory_order_acquire))  // abort() from another thread
      throw PeerError({FailureKind::Aborted, {}},
                      fmt::format("rank {}: {} #{} ({}) aborted on this rank", rank_, to_string(current_.kind),
                                  current_.op_seq, what),
                      "shm");
    if (ctl(r).failed.load(std::memory_order_acquire))
      throw PeerError({FailureKind::Aborted, {r}},
                      fmt::format("rank {}: {} #{} ({}) aborted because rank {} failed", rank_,
                                  to_string(current_.kind), current_.op_seq, what, r),
                      "shm");
    if (::kill(ctl(r).pid, 0) != 0 && errno == ESRCH)
      throw PeerError({FailureKind::DeadPeer, {r}},
                      fmt::format("rank {}: {} #{} ({}): rank {} (pid {}) died", rank_, to_string(current_.kind),
                                  current_.op_seq, what, r, ctl(r).pid),
                      "shm");
  }

  std::vector<unsigned> missing(std::atomic<std::uint64_t> RankControl::*field, std::uint64_t seq) const {
    std::vector<unsigned> late;
    for (unsigned r = 0; r < size_; ++r)
      if ((ctl(r).*field).load(std::memory_order_acquire) < seq) late.push_back(r);
    return late;
  }

  void check_descriptors() const {
    for (unsigned r = 0; r < size_; ++r) {
      const Descriptor& d = ctl(r).desc[seq_ % 2];
      if (d == current_) continue;
      throw UsageError({FailureKind::Mismatch, {r}},
                       fmt::format("mismatched collectives: rank {} called {} #{} (count {}, {}, {}, root {}) while "
                                   "rank {} called {} #{} (count {}, {}, {}, root {})",
                                   rank_, to_string(current_.kind), current_.op_seq, current_.count,
                                   to_string(current_.dtype), to_string(current_.op), current_.root, r,
                                   to_string(d.kind), d.op_seq, d.count, to_string(d.dtype), to_string(d.op), d.root),
                       "shm");
    }
  }

  std::size_t chunk_elems(DType dtype) const { return slot_bytes_ / size_of(dtype); }

  // Single copies need the kernel to let us read our peers (same user, no ptrace restrictions, no
  // seccomp filter). Settled at the first large allgather/broadcast, so start-up pays nothing:
  // every rank probes every peer and all must succeed, because ranks on different paths would
  // never meet. TRAINRT_SHM_SINGLE_COPY=0 on any rank turns it off for all.
  bool can_read_every_peer() const {
    const char* env = std::getenv("TRAINRT_SHM_SINGLE_COPY");
    if (env && std::string(env) == "0") return false;
    for (unsigned r = 0; r < size_; ++r) {
      std::uint64_t seen = 0;
      iovec local{&seen, sizeof seen}, remote{reinterpret_cast<void*>(ctl(r).probe_addr), sizeof seen};
      if (::process_vm_readv(ctl(r).pid, &local, 1, &remote, 1, 0) != sizeof seen || seen != kMagic) return false;
    }
    return true;
  }

  // The first phase of a large allgather/broadcast: publish where peers read us, arrive, check
  // the calls match; on the first such call also settle single copies (flags written before the
  // arrive are visible after it). False: the caller runs the slot algorithm from its start.
  bool arrive_for_single_copy(const void* addr) {
    const bool deciding = single_copy_ == SingleCopy::Unknown;
    if (deciding) ctl(rank_).can_read_peers.store(can_read_every_peer() ? 1 : 2, std::memory_order_release);
    ctl(rank_).peer_read_addr = reinterpret_cast<std::uint64_t>(addr);
    phase(&RankControl::arrive, "stage");
    check_descriptors();
    if (deciding) {
      bool all = true;
      for (unsigned r = 0; r < size_; ++r) all = all && ctl(r).can_read_peers.load(std::memory_order_acquire) == 1;
      single_copy_ = all ? SingleCopy::Yes : SingleCopy::No;
      if (!all) {
        phase(&RankControl::done, "probe");  // close this round; the slot rounds follow
        ctl(rank_).desc[(seq_ + 1) % 2] = current_;  // for their first arrive, one parity on
      }
    }
    return single_copy_ == SingleCopy::Yes;
  }

  // Copies `bytes` from rank r's published address (plus `offset`) into `dst`.
  void read_peer(unsigned r, std::byte* dst, std::size_t bytes, std::size_t offset = 0) {
    const std::uint64_t base = ctl(r).peer_read_addr + offset;
    std::size_t done = 0;
    while (done < bytes) {
      iovec local{dst + done, bytes - done}, remote{reinterpret_cast<void*>(base + done), bytes - done};
      ssize_t n = ::process_vm_readv(ctl(r).pid, &local, 1, &remote, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw PeerError({FailureKind::Transport, {r}},
                        fmt::format("rank {}: {} #{}: reading rank {} (pid {}) failed: {}", rank_,
                                    to_string(current_.kind), current_.op_seq, r, ctl(r).pid,
                                    n < 0 ? std::strerror(errno) : "nothing read"),
                        "shm");
      done += static_cast<std::size_t>(n);
    }
  }

  // shm_communicator.cpp: the reductions.
  void do_allreduce(const void* in_v, void* out_v, std::size_t count, DType dtype, ReduceOp op);
  void do_reduce_scatter(const void* in_v, void* out_v, std::size_t count, DType dtype, ReduceOp op);

  // shm_exchange.cpp: the collectives that move data without reducing it.
  void do_allgather(const void* in_v, void* out_v, std::size_t count, DType dtype);
  void do_broadcast(void* buf_v, std::size_t count, DType dtype, unsigned root);
  void do_alltoallv(const std::byte* send, const std::vector<std::size_t>& send_bytes, std::byte* recv,
                    const std::vector<std::size_t>& recv_bytes);

  unsigned rank_, size_;
  CommOptions options_;
  std::size_t slot_bytes_ = 0, ctl_offset_ = 0, slots_offset_ = 0, result_offset_ = 0, small_offset_ = 0, total_ = 0;
  unsigned spins_before_yield_ = 16;
  // How long a wait yields before it sleeps: longer than a phase of a large collective among ranks
  // that all run (a sleeper's wake-up costs tens of us), far shorter than the waits of ranks that
  // share a few cores.
  static constexpr auto kYieldBeforeSleep = std::chrono::milliseconds(2);
  enum class SingleCopy { Unknown, Yes, No } single_copy_ = SingleCopy::Unknown;
  const std::uint64_t probe_ = kMagic;
  Mapping map_;
  std::uint64_t seq_ = 0, op_seq_ = 0;
  Descriptor current_;
};

}  // namespace trainrt::shm
