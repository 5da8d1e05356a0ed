// The PMIx session: Put/Commit/Fence/Get with a fresh key per operation, so repeated collectives
// never read a previous call's value.
#include <pmix.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "node_bundle.hpp"
#include "session_impl.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::bootstrap {
namespace {

std::string status(pmix_status_t rc) { return PMIx_Error_string(rc); }

// RAII for the values PMIx_Get hands out.
struct ValuePtr {
  pmix_value_t* v = nullptr;
  ~ValuePtr() {
    if (v) PMIX_VALUE_RELEASE(v);
  }
};

// RAII for one pmix_info_t array.
class InfoArray {
 public:
  explicit InfoArray(std::size_t n) : n_(n) { PMIX_INFO_CREATE(info_, n); }
  ~InfoArray() { PMIX_INFO_FREE(info_, n_); }
  InfoArray(const InfoArray&) = delete;
  InfoArray& operator=(const InfoArray&) = delete;
  pmix_info_t* get() { return info_; }
  std::size_t size() const { return n_; }

 private:
  pmix_info_t* info_ = nullptr;
  std::size_t n_;
};

class PmixSession final : public Session {
 public:
  explicit PmixSession(const SessionOptions& options) : timeout_(static_cast<int>(options.timeout.count())) {
    pmix_status_t rc = PMIx_Init(&me_, nullptr, 0);
    if (rc != PMIX_SUCCESS)
      throw Error(fmt::format("PMIx variables are set but PMIx_Init failed ({}); is the PMIx server (srun "
                              "--mpi=pmix, mpirun) still running?",
                              status(rc)),
                  "bootstrap");
    initialized_ = true;
    PMIX_LOAD_PROCID(&all_, me_.nspace, PMIX_RANK_WILDCARD);
    size_ = get_u32(all_, PMIX_JOB_SIZE);
    local_size_ = get_u32(all_, PMIX_LOCAL_SIZE);
    local_rank_ = get_u16(me_, PMIX_LOCAL_RANK);
    node_id_ = get_u32(me_, PMIX_NODEID);
    ValuePtr peers;
    if (PMIx_Get(&all_, PMIX_LOCAL_PEERS, nullptr, 0, &peers.v) == PMIX_SUCCESS && peers.v->type == PMIX_STRING) {
      auto parts = split(peers.v->data.string, ',');
      if (parts.back().empty()) parts.pop_back();  // "" and a trailing comma name no rank
      for (auto part : parts) local_peers_.push_back(parse_number<unsigned>(part, "a rank", 0, ~0u, "PMIX_LOCAL_PEERS"));
    }
    peers_known_ = !local_peers_.empty();
    if (local_peers_.empty()) local_peers_ = {me_.rank};
  }

  ~PmixSession() override {
    if (initialized_) PMIx_Finalize(nullptr, 0);
  }

  unsigned rank() const override { return me_.rank; }
  unsigned size() const override { return size_; }
  unsigned local_rank() const override { return local_rank_; }
  unsigned local_size() const override { return local_size_; }
  unsigned node_id() const override { return node_id_; }
  std::vector<unsigned> local_peers() const override { return local_peers_; }

  std::vector<std::vector<unsigned>> ranks_by_node() override {
    std::vector<std::vector<unsigned>> out;
    for (auto& node : resolve_nodes()) out.push_back(std::move(node.second));
    return out;
  }
  std::vector<std::string> node_names() override {
    std::vector<std::string> out;
    for (auto& node : resolve_nodes()) out.push_back(std::move(node.first));
    return out;
  }
  std::string job_id() const override { return me_.nspace; }
  bool is_single_process() const override { return false; }
  SessionCounts counts() const override {
    return {fences_.load(), fences_with_data_.load(), puts_.load(), gets_remote_.load(), gets_local_.load()};
  }

 private:
  // Every node of the job holding a rank (its name, its ranks ascending), in the launcher's order.
  // The job's map does not change: asked of PMIx once (init needs both ranks_by_node and
  // node_names), kept after that.
  std::vector<std::pair<std::string, std::vector<unsigned>>> resolve_nodes() {
    std::lock_guard lock(mutex_);
    if (!nodes_) nodes_ = resolve_nodes_locked();
    return *nodes_;
  }

  std::vector<std::pair<std::string, std::vector<unsigned>>> resolve_nodes_locked() {
    char* list = nullptr;
    pmix_status_t rc = PMIx_Resolve_nodes(me_.nspace, &list);
    if (rc != PMIX_SUCCESS || !list)
      throw Error(fmt::format("PMIx_Resolve_nodes({}) failed: {}", me_.nspace, status(rc)), "bootstrap");
    const std::string names = list;
    std::free(list);
    std::vector<std::pair<std::string, std::vector<unsigned>>> out;
    std::vector<int> seen(size_, 0);
    for (auto name : split(names, ',')) {
      if (name.empty()) continue;
      const std::string node(name);
      pmix_proc_t* procs = nullptr;
      std::size_t n = 0;
      rc = PMIx_Resolve_peers(node.c_str(), me_.nspace, &procs, &n);
      if (rc != PMIX_SUCCESS)
        throw Error(fmt::format("PMIx_Resolve_peers({}) failed: {}", node, status(rc)), "bootstrap");
      std::vector<unsigned> ranks;
      for (std::size_t i = 0; i < n; ++i) ranks.push_back(procs[i].rank);
      if (procs) PMIX_PROC_FREE(procs, n);
      std::sort(ranks.begin(), ranks.end());
      for (unsigned r : ranks) {
        if (r >= size_ || seen[r]++)
          throw Error(fmt::format("PMIx places rank {} on node {} {}", r, node,
                                  r >= size_ ? fmt::format("in a world of {}", size_) : "a second time"),
                      "bootstrap");
      }
      if (!ranks.empty()) out.emplace_back(node, std::move(ranks));
    }
    for (unsigned r = 0; r < size_; ++r)
      if (!seen[r]) throw Error(fmt::format("PMIx's node list ({}) places no node for rank {}", names, r), "bootstrap");
    for (const auto& [node, ranks] : out)
      if (peers_known_ && std::find(ranks.begin(), ranks.end(), me_.rank) != ranks.end() && ranks != local_peers_)
        throw Error(fmt::format("PMIx places rank {} with {} other ranks, but its local peers are {}", me_.rank,
                                ranks.size() - 1, local_peers_.size() - 1),
                    "bootstrap");
    return out;
  }

 public:

  // Beyond a few ranks: a gather to rank 0 through the node leaders and one broadcast of every
  // blob in a bundle, so each rank reads one value instead of N (N^2 reads over the world: 1.1-1.6 s
  // for 8 bytes at 256 ranks here, minutes at 2,048).
  std::vector<Blob> allgather(std::span<const std::uint8_t> mine) override {
    if (size_ <= kDirectAllgatherRanks || !peers_known_) {
      std::lock_guard lock(mutex_);
      const std::string key = next_key();
      put(key, mine);
      fence(true, key);
      std::vector<Blob> out(size_);
      for (unsigned r = 0; r < size_; ++r) out[r] = get_blob(r, key);
      return out;
    }
    const std::vector<unsigned> leaders = me_.rank == 0 ? node_leaders() : std::vector<unsigned>{};
    std::lock_guard lock(mutex_);  // one collective: no other thread's call between its two fences
    // On rank 0 the leaders' bundles one after another are one bundle of every rank's blob: passed
    // on as they came, checked by every rank alike after the broadcast.
    Blob all;
    for (const auto& [leader, bundle] : leader_bundles_locked(mine, 0, leaders)) all.insert(all.end(), bundle.begin(), bundle.end());
    return unpack_node_bundles({{0, broadcast_locked(all, 0)}}, size_, "allgather");
  }

  Blob broadcast(std::span<const std::uint8_t> data, unsigned root) override {
    if (root >= size_) throw Error(fmt::format("broadcast root {} outside a world of {}", root, size_), "bootstrap");
    std::lock_guard lock(mutex_);
    return broadcast_locked(data, root);
  }

  Blob broadcast_locked(std::span<const std::uint8_t> data, unsigned root) {
    const std::string key = next_key();
    if (me_.rank == root) put(key, data);
    fence(true, key);
    return me_.rank == root ? Blob(data.begin(), data.end()) : get_blob(root, key);
  }

  // Through the node leaders: every rank hands its blob to its node's lowest rank inside the node
  // (PMIX_LOCAL, so it stays out of the fence), each leader puts one bundle of its node's blobs, and
  // after the fence the root reads one bundle per node: n reads at the root instead of N.
  std::vector<Blob> gather(std::span<const std::uint8_t> mine, unsigned root) override {
    if (root >= size_) throw Error(fmt::format("gather root {} outside a world of {}", root, size_), "bootstrap");
    const std::vector<unsigned> leaders = me_.rank == root && peers_known_ ? node_leaders() : std::vector<unsigned>{};
    std::lock_guard lock(mutex_);
    if (!peers_known_) {  // no node map from PMIx: every rank's blob goes to the root itself
      const std::string key = next_key();
      put(key, mine);
      fence(true, key);
      std::vector<Blob> out;
      if (me_.rank == root)
        for (unsigned r = 0; r < size_; ++r) out.push_back(get_blob(r, key));
      return out;
    }
    const auto bundles = leader_bundles_locked(mine, root, leaders);
    if (me_.rank != root) return {};
    return unpack_node_bundles(bundles, size_, fmt::format("gather to {}", root));
  }

  // Every rank hands its blob to its node's leader, every leader puts its node's bundle into one
  // fence; the root returns each leader's bundle beside the leader (`leaders`: every node's lowest
  // rank, node_leaders(), read before the lock), the others nothing.
  std::vector<std::pair<unsigned, Blob>> leader_bundles_locked(std::span<const std::uint8_t> mine, unsigned root,
                                                               const std::vector<unsigned>& leaders) {
    const std::string key = next_key();
    const unsigned my_leader = *std::min_element(local_peers_.begin(), local_peers_.end());
    if (me_.rank != my_leader) {
      put(key + ".own", mine, PMIX_LOCAL);
    } else {
      std::vector<std::pair<unsigned, Blob>> node;
      for (unsigned peer : local_peers_)
        node.emplace_back(peer, peer == me_.rank ? Blob(mine.begin(), mine.end()) : wait_for_local(peer, key + ".own"));
      put(key, pack_node_bundle(node));
    }
    fence(true, key);
    std::vector<std::pair<unsigned, Blob>> out;
    if (me_.rank == root)
      for (unsigned leader : leaders) out.emplace_back(leader, get_blob(leader, key));
    return out;
  }

  std::vector<Blob> gather_from(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources) override {
    return gather_some(mine, sources, sources);
  }

  std::vector<Blob> gather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources,
                                const std::vector<unsigned>& reads) override {
    check_reads(sources, reads, size_);
    std::lock_guard lock(mutex_);
    const std::string key = next_key();
    if (std::binary_search(sources.begin(), sources.end(), me_.rank)) put(key, mine);
    fence(true, key);
    std::vector<Blob> out;
    for (unsigned r : reads) out.push_back(get_blob(r, key));
    return out;
  }

  void join_gather_from(const std::vector<unsigned>& sources) override {
    check_joiner(sources, size_, me_.rank);
    std::lock_guard lock(mutex_);
    fence(true, next_key());  // the same key sequence as the sources' gather_from
  }

  // A fence with data, never one without: Slurm's PMIx plugin carries a fence without data on its
  // tree, and since Slurm 20.11 that tree is every node on its own when the step has fewer nodes
  // than TreeWidth (reverse_tree_info gives each node no parent and no child): the fence returns
  // on each node as soon as that node's ranks arrive. A fence with data takes Slurm's ring, which
  // every node of the step joins (session_mp's late-rank check on 4 nodes guards this). The byte
  // put gives the fence data of this rank's own to carry.
  void barrier() override {
    std::lock_guard lock(mutex_);
    const std::uint8_t arrived = 1;
    put("trainrt.barrier", std::span<const std::uint8_t>(&arrived, 1));
    fence(true, "barrier");
  }

  void publish(const std::string& key, std::span<const std::uint8_t> data) override {
    std::lock_guard lock(mutex_);
    put("trainrt.kv." + key, data);
  }

  Blob lookup(unsigned owner, const std::string& key) override {
    // Slurm's direct modex answers NOT-FOUND at once for a key the owner has not committed yet
    // (mpirun's waits): poll, refreshing the cache, until it appears or the timeout passes. The
    // lock is held for one Get at a time, never across a pause: another thread of this process
    // (a communicator built at its first use, a checkpoint's agreement) may need the session to
    // publish what the owner is waiting for, or to join a fence the owner is in.
    return poll_key(owner, "trainrt.kv." + key, false, std::chrono::microseconds(1000), std::chrono::microseconds(50000),
                    [&](pmix_status_t rc) {
                      return fmt::format("rank {} could not look up '{}' from rank {}: {}", me_.rank, key, owner, status(rc));
                    },
                    [&] { return fmt::format("rank {} never published '{}' (waited {} s for rank {})", owner, key, timeout_, me_.rank); });
  }

 private:
  std::string next_key() { return fmt::format("trainrt.{}", counter_++); }

  std::uint32_t get_u32(const pmix_proc_t& proc, const char* key) {
    ValuePtr v;
    pmix_status_t rc = PMIx_Get(&proc, key, nullptr, 0, &v.v);
    if (rc != PMIX_SUCCESS) throw Error(fmt::format("PMIx_Get({}) failed: {}", key, status(rc)), "bootstrap");
    switch (v.v->type) {
      case PMIX_UINT32: return v.v->data.uint32;
      case PMIX_UINT16: return v.v->data.uint16;
      case PMIX_INT: return static_cast<std::uint32_t>(v.v->data.integer);
      default: throw Error(fmt::format("PMIx key {} has unexpected type {}", key, v.v->type), "bootstrap");
    }
  }
  unsigned get_u16(const pmix_proc_t& proc, const char* key) { return get_u32(proc, key); }

  // The lowest rank of every node, from the job data (no exchange); read once.
  std::vector<unsigned> node_leaders() {
    if (node_leaders_.empty())
      for (const auto& node : ranks_by_node()) node_leaders_.push_back(node.front());
    return node_leaders_;
  }

  // A local peer's PMIX_LOCAL value: polled like lookup(), since the peer may not have put it yet.
  Blob wait_for_local(unsigned peer_rank, const std::string& key) {
    return poll_key(peer_rank, key, true, std::chrono::microseconds(100), std::chrono::microseconds(20000),
                    [&](pmix_status_t rc) {
                      return fmt::format("node leader {} could not read '{}' of rank {}: {}", me_.rank, key, peer_rank, status(rc));
                    },
                    [&] {
                      return fmt::format("rank {} never handed '{}' to its node leader {} (waited {} s)", peer_rank, key,
                                         me_.rank, timeout_);
                    });
  }

  // Polls rank `owner`'s `key`, refreshing the cache, until it appears (an empty value counts) or
  // the session's timeout passes; the pause doubles up to `max_pause`. `locked`: the caller holds
  // the mutex, else it is taken for each Get alone, never across a pause.
  template <typename Failed, typename Never>
  Blob poll_key(unsigned owner, const std::string& key, bool locked, std::chrono::microseconds pause,
                std::chrono::microseconds max_pause, Failed failed, Never never) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_);
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, me_.nspace, owner);
    while (true) {
      InfoArray info(2);
      bool refresh = true;
      PMIX_INFO_LOAD(&info.get()[0], PMIX_TIMEOUT, &timeout_, PMIX_INT);
      PMIX_INFO_LOAD(&info.get()[1], PMIX_GET_REFRESH_CACHE, &refresh, PMIX_BOOL);
      ValuePtr v;
      pmix_status_t rc;
      count_get(owner);
      if (locked) {
        rc = PMIx_Get(&peer, key.c_str(), info.get(), info.size(), &v.v);
      } else {
        std::lock_guard lock(mutex_);
        rc = PMIx_Get(&peer, key.c_str(), info.get(), info.size(), &v.v);
      }
      if (rc == PMIX_SUCCESS && v.v->type == PMIX_BYTE_OBJECT) {
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(v.v->data.bo.bytes);
        return Blob(bytes, bytes + v.v->data.bo.size);
      }
      if (rc == PMIX_SUCCESS && v.v->type == PMIX_UNDEF) return {};
      if (rc != PMIX_ERR_NOT_FOUND && rc != PMIX_SUCCESS) throw Error(failed(rc), "bootstrap");
      if (std::chrono::steady_clock::now() > deadline) throw Error(never(), "bootstrap");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, max_pause);
    }
  }

  void put(const std::string& key, std::span<const std::uint8_t> data, pmix_scope_t scope = PMIX_GLOBAL) {
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_BYTE_OBJECT;
    // PMIx copies the value in PMIx_Put; it never writes through this pointer.
    value.data.bo.bytes = reinterpret_cast<char*>(const_cast<std::uint8_t*>(data.data()));
    value.data.bo.size = data.size();
    ++puts_;
    pmix_status_t rc = PMIx_Put(scope, key.c_str(), &value);
    if (rc != PMIX_SUCCESS) throw Error(fmt::format("PMIx_Put({}) failed: {}", key, status(rc)), "bootstrap");
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) throw Error(fmt::format("PMIx_Commit failed: {}", status(rc)), "bootstrap");
  }

  void fence(bool collect, const std::string& what) {
    InfoArray info(2);
    bool yes = collect;
    PMIX_INFO_LOAD(&info.get()[0], PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    PMIX_INFO_LOAD(&info.get()[1], PMIX_TIMEOUT, &timeout_, PMIX_INT);
    ++(collect ? fences_with_data_ : fences_);
    pmix_status_t rc = PMIx_Fence(&all_, 1, info.get(), info.size());
    if (rc != PMIX_SUCCESS)
      throw Error(fmt::format("rank {}: fence for '{}' failed after at most {} s: {} (a rank of the {} died or never "
                              "arrived)",
                              me_.rank, what, timeout_, status(rc), size_),
                  "bootstrap");
  }

  Blob get_blob(unsigned from, const std::string& key) {
    pmix_proc_t peer;
    PMIX_LOAD_PROCID(&peer, me_.nspace, from);
    InfoArray info(1);
    PMIX_INFO_LOAD(&info.get()[0], PMIX_TIMEOUT, &timeout_, PMIX_INT);
    ValuePtr v;
    count_get(from);
    pmix_status_t rc = PMIx_Get(&peer, key.c_str(), info.get(), info.size(), &v.v);
    if (rc != PMIX_SUCCESS || v.v->type != PMIX_BYTE_OBJECT) {
      if (rc == PMIX_SUCCESS && v.v->type == PMIX_UNDEF) return {};
      throw Error(fmt::format("rank {} did not deliver '{}' to rank {}: {}", from, key, me_.rank, status(rc)),
                  "bootstrap");
    }
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(v.v->data.bo.bytes);
    return Blob(bytes, bytes + v.v->data.bo.size);
  }

  void count_get(unsigned owner) {
    ++(std::binary_search(local_peers_.begin(), local_peers_.end(), owner) ? gets_local_ : gets_remote_);
  }

  pmix_proc_t me_{};
  pmix_proc_t all_{};
  bool initialized_ = false;
  int timeout_;
  unsigned size_ = 1, local_size_ = 1, local_rank_ = 0, node_id_ = 0;
  std::vector<unsigned> local_peers_;
  std::vector<unsigned> node_leaders_;
  // Up to this many ranks an allgather reads every rank's blob itself (one fence, N reads each);
  // beyond, a gather and a broadcast (two fences, one read each) cost less.
  static constexpr unsigned kDirectAllgatherRanks = 16;
  bool peers_known_ = false;  // PMIx named the local peers (else local_peers_ is this rank alone)
  std::uint64_t counter_ = 0;
  std::atomic<std::uint64_t> fences_{0}, fences_with_data_{0}, puts_{0}, gets_remote_{0}, gets_local_{0};
  std::mutex mutex_;
  std::optional<std::vector<std::pair<std::string, std::vector<unsigned>>>> nodes_;  // resolve_nodes(), once
};

}  // namespace

std::unique_ptr<Session> open_pmix_session(const SessionOptions& options) {
  return std::make_unique<PmixSession>(options);
}

}  // namespace trainrt::bootstrap
