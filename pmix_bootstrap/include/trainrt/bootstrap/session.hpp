#pragma once
// Rank discovery and byte-blob exchange for the processes of one job, over PMIx (the server is
// srun --mpi=pmix or Open MPI's mpirun). Outside any PMIx server the session is a one-process
// world and says so once; with PMIx variables set but no reachable server it is an error.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace trainrt::bootstrap {

using Blob = std::vector<std::uint8_t>;

struct SessionOptions {
  std::chrono::seconds timeout{120};  // for every fence and every get
  bool quiet = false;                 // do not announce the single-process fallback
};

// What this process has asked of the launcher's key-value service since the session opened: the
// per-rank message counts of docs/scale.md. Each is a request to this node's PMIx server; a fence
// with data is a ring through the nodes in Slurm's PMIx plugin, a data-free one its tree. Reads of
// the job's own data (sizes, node map) are not counted.
struct SessionCounts {
  std::uint64_t fences = 0;            // data-free
  std::uint64_t fences_with_data = 0;
  std::uint64_t puts = 0;
  std::uint64_t gets_remote = 0;       // of a key put by a rank on another node (every poll attempt)
  std::uint64_t gets_local = 0;        // of a key put by a rank on this node
};

class Session {
 public:
  // PMIx when the environment names a PMIx server, else the single-process world.
  static std::unique_ptr<Session> open(const SessionOptions& options = {});
  static std::unique_ptr<Session> single_process();

  virtual ~Session() = default;
  virtual unsigned rank() const = 0;
  virtual unsigned size() const = 0;
  virtual unsigned local_rank() const = 0;
  virtual unsigned local_size() const = 0;
  virtual unsigned node_id() const = 0;
  virtual std::vector<unsigned> local_peers() const = 0;  // ranks on this node, ascending
  // The ranks of every node of the job (nodes in the launcher's order, ranks ascending), read from
  // the launcher's job data without any exchange: grouping ranks by node costs no fence.
  virtual std::vector<std::vector<unsigned>> ranks_by_node() = 0;
  // Those nodes' names as the launcher knows them (Slurm's node names), in the same order; empty
  // where the launcher names none.
  virtual std::vector<std::string> node_names() { return {}; }
  virtual std::string job_id() const = 0;                 // the PMIx namespace, "single" otherwise
  virtual bool is_single_process() const = 0;
  virtual SessionCounts counts() const { return {}; }  // zero where nothing is asked of a server

  // Every rank contributes one blob (sizes may differ); all get every blob, indexed by rank.
  virtual std::vector<Blob> allgather(std::span<const std::uint8_t> mine) = 0;
  // `data` matters on `root` only; every rank returns root's blob.
  virtual Blob broadcast(std::span<const std::uint8_t> data, unsigned root) = 0;
  // Every rank contributes a blob; `root` returns all of them (indexed by rank), every other rank
  // an empty vector. Where one rank needs the blobs, cheaper than allgather: with PMIx the others
  // read nothing (an allgather costs every rank one read per rank: O(N^2) over the world).
  virtual std::vector<Blob> gather(std::span<const std::uint8_t> mine, unsigned root);
  // Only the ranks in `sources` (ascending, the same list on every rank) contribute; every rank
  // returns their blobs in that order. For a few roots' data (NCCL's unique ids): every rank
  // reads |sources| blobs, not N.
  virtual std::vector<Blob> gather_from(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources);
  // gather_from by a rank that is none of `sources` and needs none of their blobs (a node's other
  // ranks while its leader meets the other leaders): it joins the fence and reads nothing.
  virtual void join_gather_from(const std::vector<unsigned>& sources);
  // gather_from where this rank reads only `reads` (ascending, each one of `sources`; the lists
  // may differ from rank to rank): one fence for all, |reads| reads here, their blobs in order.
  // (A node leader that connects to O(log nodes) other leaders reads only theirs.)
  virtual std::vector<Blob> gather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& sources,
                                        const std::vector<unsigned>& reads);
  // allgather where this rank needs only the blobs of `reads` (ascending ranks; the lists may
  // differ from rank to rank). Indexed by rank, as allgather; the blobs not read stay empty.
  virtual std::vector<Blob> allgather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& reads);
  virtual void barrier() = 0;

  // Point-to-point key-value exchange without a collective: `publish` makes a blob visible under
  // `key`; `lookup` waits (up to the session timeout) until rank `owner` has published `key`. For
  // protocols whose ranks do not all take part in every round (Gloo's rendezvous).
  virtual void publish(const std::string& key, std::span<const std::uint8_t> data) = 0;
  virtual Blob lookup(unsigned owner, const std::string& key) = 0;
};

// NCCL's unique id is 128 opaque bytes: root creates it, everyone receives it.
Blob exchange_unique_id(Session& session, const Blob& id_on_root, unsigned root = 0);

}  // namespace trainrt::bootstrap
