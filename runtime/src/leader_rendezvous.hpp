#pragma once
// The node leaders' Gloo addresses without a PMIx fence (docs/scale-measured.md "The leaders' rendezvous"):
// each leader serves its own address blob on a TCP port that every node derives from the job's
// key, and fetches each peer's blob from that peer's node. A PMIx fence with data is a ring
// through every node in Slurm's plugin (O(nodes) hops); this costs a leader one connection per
// peer it uses (O(log nodes)) and no fence at all.
//
// What a server answers is checked, not trusted blindly: a reply counts only when it carries the
// same key (job and communicator) and the rank asked for. A port taken by someone else is skipped
// on both sides: the server binds the first free candidate, a client tries them in order.
//
// A leader that asks also offers its own blob, which the server keeps: the peer it asked then has
// it without asking back. So the last leader to start is not found by its peers' polling (a pause
// of up to 50 ms each) but hands them its address when it fetches theirs.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/fd.hpp"

namespace trainrt::rendezvous {

using bootstrap::Blob;

inline constexpr std::size_t kMaxKeyBytes = 256;
inline constexpr std::size_t kMaxBlobBytes = std::size_t{1} << 20;
inline constexpr unsigned kPortCandidates = 8;

struct PortRange {
  std::uint16_t first = 24000;
  std::uint16_t last = 27999;
};

// "FIRST-LAST" (1024 <= FIRST, FIRST + 7 <= LAST <= 65535); a UsageError naming the text otherwise.
PortRange parse_port_range(const std::string& text);
// TRAINRT_RENDEZVOUS_PORTS, or the default range when it is unset.
PortRange port_range_from_environment();
// kPortCandidates distinct ports of `range` for `key`: the same list on every node.
std::vector<std::uint16_t> candidate_ports(const std::string& key, PortRange range);

// The blobs peers offered with their requests, by rank; a fetch waiting for one wakes when it comes.
class Mailbox {
 public:
  void put(unsigned rank, Blob blob);
  // The blob of `rank` if it came, waiting up to `wait` for it.
  std::optional<Blob> take(unsigned rank, std::chrono::milliseconds wait);

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<unsigned, Blob> blobs_;
};

// Answers every request that carries `key` with (rank, blob), on the first candidate port it can
// bind (every address of the node), from its own thread, until destroyed. What the askers offer
// goes into its mailbox: one blob per rank of the group (ranks below `group_size`, this rank
// excepted), so a stranger's claims cannot grow it; with group_size 0 no offer is kept.
class Server {
 public:
  Server(std::string key, unsigned rank, Blob blob, const std::vector<std::uint16_t>& ports, unsigned group_size = 0);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  std::uint16_t port() const { return port_; }
  std::size_t served() const { return served_.load(); }
  unsigned rank() const { return rank_; }
  const Blob& blob() const { return blob_; }
  Mailbox& mailbox() { return mailbox_; }

 private:
  void run();
  void answer(Fd connection);
  std::string key_;
  unsigned rank_;
  Blob blob_;
  unsigned group_size_;
  Mailbox mailbox_;
  Fd listen_;
  Fd wake_;  // an eventfd: written once to stop the thread
  std::uint16_t port_ = 0;
  std::atomic<std::size_t> served_{0};
  std::thread thread_;
};

// `rank`'s blob from the server on `host`: each candidate port in turn until one answers with `key`
// and `rank`; while none does (the peer has not started yet), again after a pause growing to 50 ms,
// until `timeout`. An Error naming the host, the ports and the last problem after that.
// With `mine` (this rank's own server): its rank and blob go with every request, and a blob that
// `rank` offered to `mine` ends the fetch at once, asked or not.
Blob fetch(const std::string& key, unsigned rank, const std::string& host, const std::vector<std::uint16_t>& ports,
           std::chrono::milliseconds timeout, Server* mine = nullptr);

// fetch() of every rank in `ranks` (from `hosts[i]`), side by side: a leader waits for its slowest
// peer once, not for each in turn. The blobs in `ranks`' order; the first failure's Error.
std::vector<Blob> fetch_all(const std::string& key, const std::vector<unsigned>& ranks, const std::vector<std::string>& hosts,
                            const std::vector<std::uint16_t>& ports, std::chrono::milliseconds timeout,
                            Server* mine = nullptr);

}  // namespace trainrt::rendezvous
