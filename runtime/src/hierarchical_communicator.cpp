#include "trainrt/runtime/hierarchical_communicator.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <vector>

#include "host_communicator.hpp"
#include "leader_rendezvous.hpp"
#include "sub_session.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/reduce.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

namespace trainrt {
namespace {

// Runs one stage on a group's communicator, which numbers ranks within the group (a node's ranks,
// the leaders): a failure it throws leaves naming the ranks of the whole world, `members`.
template <typename F>
void in_group(const std::vector<unsigned>& members, F&& stage) {
  try {
    stage();
  } catch (const Error& e) {
    if (!e.failure() || e.failure()->ranks.empty()) throw;
    CollectiveFailure f = *e.failure();
    for (unsigned& r : f.ranks) r = r < members.size() ? members[r] : r;
    if (dynamic_cast<const PeerError*>(&e)) throw PeerError(std::move(f), e.what());
    if (dynamic_cast<const UsageError*>(&e)) throw UsageError(std::move(f), e.what());
    throw Error(std::move(f), e.what());
  }
}

// TRAINRT_LEADER_EXCHANGE: "tcp" (the default) or "pmix"; anything else is a UsageError naming it.
// Every rank of a job must see the same value (srun passes the submitting environment to all).
std::string leader_exchange() {
  const char* v = std::getenv("TRAINRT_LEADER_EXCHANGE");
  const std::string s = v && *v ? v : "tcp";
  if (s != "tcp" && s != "pmix")
    throw UsageError(fmt::format("TRAINRT_LEADER_EXCHANGE='{}': use tcp (the default) or pmix", s), "hierarchical");
  return s;
}

class HierarchicalCommunicator final : public HostCommunicator {
 public:
  HierarchicalCommunicator(bootstrap::Session& session, const CommOptions& options)
      : HostCommunicator("shm+gloo"), rank_(session.rank()), size_(session.size()), session_(session), options_(options) {
    // Ranks grouped by node from the launcher's job data: no exchange.
    const auto by_node = session.ranks_by_node();
    std::vector<unsigned> leaders;
    where_.resize(size_);
    // allgather can go node by node when every node holds the same number of consecutive ranks
    // (Slurm's default block distribution); otherwise it goes to Gloo across all ranks.
    node_blocks_ = true;
    unsigned next = 0;
    const std::vector<unsigned>* mine = nullptr;
    for (const auto& ranks : by_node) {
      node_blocks_ = node_blocks_ && ranks.size() == by_node.front().size();
      for (unsigned r : ranks) node_blocks_ = node_blocks_ && r == next++;
    }
    for (const auto& ranks : by_node) {
      for (unsigned i = 0; i < ranks.size(); ++i) {
        where_[ranks[i]] = {static_cast<unsigned>(leaders.size()), i};
        if (ranks[i] == rank_) mine = &ranks;
      }
      leaders.push_back(ranks.front());
    }
    if (!mine) throw Error(fmt::format("rank {} is on none of the job's {} nodes", rank_, by_node.size()), "hierarchical");
    node_ranks_ = *mine;
    leader_ranks_ = leaders;
    local_session_ = std::make_unique<SubSession>(session, node_ranks_);
    leader_session_ = std::make_unique<SubSession>(session, leaders);
    static unsigned instances = 0;  // every rank builds the same hierarchical communicators in order
    id_ = instances++;
    // The leaders run only ring, dissemination and binomial-tree collectives (alltoallv and
    // reduce_scatter go to all()), so each connects to the leaders at distance 2^k: O(log nodes)
    // sockets and addresses, not O(nodes). Their addresses go from leader to leader over TCP
    // (each serves its own, fetched from its node by name): no PMIx fence, whose data Slurm's
    // plugin carries round a ring of every node. With TRAINRT_LEADER_EXCHANGE=pmix, or a launcher
    // that names no nodes, they go round in one fence of the world that every rank joins.
    const std::string tag = fmt::format("hier{}-leaders", id_);
    const std::vector<std::string> names = session.node_names();
    const bool tcp = leader_exchange() == "tcp" && names.size() == by_node.size();
    // Read on every rank, so a bad range fails the whole job alike, not the leaders alone.
    if (tcp) (void)rendezvous::port_range_from_environment();
    // Over TCP a leader connects to the other leaders while its node's ranks are still starting
    // (PMIx_Init under load takes them hundreds of ms): the two waits overlap, so the node that
    // starts last is ready once its last rank attaches, not a fetch and a connect later.
    std::future<std::unique_ptr<Communicator>> leaders_connecting;
    if (tcp && leader_session_->is_member())
      leaders_connecting = std::async(std::launch::async, [&] {
        return make_gloo_communicator(*leader_session_, options, {}, tag, GlooRendezvous::Tcp, GlooPeers::PowersOfTwo, names);
      });
    // Every rank takes part in building its node's shared-memory group. (On a throw here the
    // future's destructor waits for the connecting thread: its fetches and its connect are each
    // bounded by the timeout, so a leader whose node failed reports it up to ~2x the timeout late.)
    local_ = make_shm_communicator(*local_session_, options);
    if (leaders_connecting.valid()) leaders_ = leaders_connecting.get();
    else if (leader_session_->is_member())
      leaders_ = make_gloo_communicator(*leader_session_, options, {}, tag, GlooRendezvous::Exchange, GlooPeers::PowersOfTwo);
    else if (!tcp)
      leader_session_->allgather({});
    // With tcp the other ranks leave now, their leader maybe still connecting: their first
    // collective waits for it. (Waiting here would be a shared-memory barrier, which yields in a
    // loop: 64 ranks of a node doing that starve the leader's connections on a small node.)
  }
  ~HierarchicalCommunicator() override { stop_progress(); }

  unsigned rank() const override { return rank_; }
  unsigned size() const override { return size_; }
  std::string backend() const override { return "shm+gloo"; }

  Work start_allreduce(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return submit(mode, [=, this] {
      const ReduceOp phase_op = op == ReduceOp::Avg ? ReduceOp::Sum : op;
      on_node([&] { local_->allreduce(in, out, count, t, phase_op); });
      if (leaders_) on_leaders([&] { leaders_->allreduce(out, out, count, t, phase_op); });
      on_node([&] { local_->broadcast(out, count, t, 0); });
      if (op == ReduceOp::Avg) divide_in_place(out, count, t, size_);
    });
  }
  Work start_reduce_scatter(const void* in, void* out, std::size_t count, DType t, ReduceOp op, Mode mode) override {
    return submit(mode, [=, this] { all().reduce_scatter(in, out, count, t, op); });
  }
  Work start_allgather(const void* in, void* out, std::size_t count, DType t, Mode mode) override {
    if (!node_blocks_) return submit(mode, [=, this] { all().allgather(in, out, count, t); });
    return submit(mode, [=, this] {
      // This node's ranks fill its block in place, the leaders exchange whole node blocks, and
      // every node receives the result from its leader.
      const std::size_t node_elems = count * local_->size(), es = size_of(t);
      auto* o = static_cast<std::byte*>(out);
      std::byte* mine = o + where_[rank_].node * node_elems * es;
      on_node([&] { local_->allgather(in, mine, count, t); });
      if (leaders_) {
        std::vector<std::byte> block(mine, mine + node_elems * es);  // Gloo wants input apart from output
        on_leaders([&] { leaders_->allgather(block.data(), o, node_elems, t); });
      }
      on_node([&] { local_->broadcast(o, count * size_, t, 0); });
    });
  }
  // Over the network once per node, not once per rank: the root's node first, then the leaders,
  // then every other node from its leader (local index 0).
  Work start_broadcast(void* buf, std::size_t count, DType t, unsigned root, Mode mode) override {
    return submit(mode, [=, this] {
      const Place from = where_[root];
      const bool root_node = where_[rank_].node == from.node;
      if (root_node) on_node([&] { local_->broadcast(buf, count, t, from.local); });
      if (leaders_) on_leaders([&] { leaders_->broadcast(buf, count, t, from.node); });
      if (!root_node) on_node([&] { local_->broadcast(buf, count, t, 0); });
    });
  }
  // Pieces go straight between the ranks that hold them: Gloo across all ranks, as reduce_scatter.
  Work start_alltoallv(const void* send, std::vector<std::size_t> send_bytes, void* recv,
                       std::vector<std::size_t> recv_bytes, Mode mode) override {
    return submit(mode, [=, this] { all().alltoallv(send, send_bytes, recv, recv_bytes); });
  }

  Work start_barrier(Mode mode) override {
    return submit(mode, [this] {
      on_node([&] { local_->barrier(); });  // everyone here has arrived
      if (leaders_) on_leaders([&] { leaders_->barrier(); });
      on_node([&] { local_->barrier(); });  // released once our leader saw every node arrive
    });
  }

  // A failure in one stage must reach the ranks waiting in another: a leader whose Gloo exchange
  // failed aborts its node's shared-memory group, which its local ranks are waiting in.
  void on_failure() noexcept override {
    for (auto* c : {local_.get(), leaders_.get(), all_.load()})
      if (c) c->abort(abort_reason_);
  }

 private:
  // The all-rank Gloo group: a full mesh, every rank connected to every other, so it is built at
  // the first collective that needs it, not at start-up. That collective runs in issue order
  // (progress thread or caller), every rank reaches it, and building it only publishes and looks
  // up keys: no fence that other threads' collectives could interleave with.
  Communicator& all() {
    if (!all_) {
      all_owner_ = make_gloo_communicator(session_, options_, {}, fmt::format("hier{}-all", id_), GlooRendezvous::Lookups);
      all_ = all_owner_.get();  // on_failure() may read it from another thread
    }
    return *all_;
  }

  struct Place {
    unsigned node = 0;   // index among the node leaders
    unsigned local = 0;  // index inside its node
  };
  template <typename F>
  void on_node(F&& stage) {
    in_group(node_ranks_, stage);
  }
  template <typename F>
  void on_leaders(F&& stage) {
    in_group(leader_ranks_, stage);
  }

  unsigned rank_, size_;
  bootstrap::Session& session_;  // outlives this communicator (Runtime owns both)
  CommOptions options_;
  unsigned id_ = 0;
  std::vector<Place> where_;  // of every rank
  std::vector<unsigned> node_ranks_, leader_ranks_;  // the world's ranks of this node's group and the leaders
  bool node_blocks_ = false;
  std::unique_ptr<SubSession> local_session_, leader_session_;
  std::unique_ptr<Communicator> local_, leaders_, all_owner_;
  std::atomic<Communicator*> all_{nullptr};
  std::string abort_reason_ = "the hierarchical communicator failed on rank " + std::to_string(rank_);
};

}  // namespace

std::unique_ptr<Communicator> make_hierarchical_communicator(bootstrap::Session& session, const CommOptions& options) {
  return std::make_unique<HierarchicalCommunicator>(session, options);
}

}  // namespace trainrt
