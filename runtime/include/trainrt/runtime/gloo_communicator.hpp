#pragma once
// The host backend across nodes: Gloo's TCP collectives, rendezvoused through our bootstrap (no
// store server, no guessed ports). Gloo's algorithms are deterministic run to run, but their
// summation order is not the shared-memory backend's rank order.
#include <memory>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

// How the members learn each other's Gloo addresses.
//  Exchange: one allgather of `session` (a PMIx fence with data; through a SubSession every rank of
//    the parent makes it, members or not). No per-peer lookups: a leader of n nodes costs one fence,
//    where lookups cost n - 1 direct-modex round trips (64 ranks on 32 nodes: init 0.4-0.5 s
//    against 1.2-2.3 s with lookups, docs/scale.md).
//  Lookups: every member publishes its addresses and reads the others' keys; no fence, so it may run
//    while other threads of the process use the session (a group built at its first use).
//  Tcp: every member serves its addresses from a TCP port derived from the job and `tag`, and
//    fetches each peer's from that peer's host (`hosts[i]` names member i's); no PMIx call at all,
//    and the parent's other ranks take no part. No barrier at the end: every pair is connected
//    when it returns, and the member's server answers any peer still asking until it is destroyed.
//    TRAINRT_RENDEZVOUS_PORTS=FIRST-LAST chooses the ports (default 24000-27999).
enum class GlooRendezvous { Exchange, Lookups, Tcp };

// Which members connect to each other.
//  All: every pair (Gloo's full mesh): size - 1 connections per member; every collective works.
//  PowersOfTwo: only the pairs at distance 2^k in either direction (mod size), at most
//    2 ceil(log2 size) per member: every pair that Gloo's ring allreduce and allgather, its
//    dissemination barrier and its binomial-tree broadcast (from any root) use; reduce_scatter
//    too (an allreduce here). alltoallv needs every pair and is refused with a UsageError where a
//    pair is missing. Needs the Exchange or Tcp rendezvous.
enum class GlooPeers { All, PowersOfTwo };

// The members `rank` of `size` connects to, ascending, without itself.
std::vector<unsigned> gloo_peers(unsigned rank, unsigned size, GlooPeers peers);

// `address`: the host name or IP this rank listens on (reachable from the other nodes); empty:
// SLURMD_NODENAME, else the host name. `tag` names the rendezvous keys of Lookups; every member must
// pass the same one (empty: a per-process counter, right when every rank creates the same
// communicators in the same order).
std::unique_ptr<Communicator> make_gloo_communicator(bootstrap::Session& session, const CommOptions& options = {},
                                                     const std::string& address = {}, const std::string& tag = {},
                                                     GlooRendezvous rendezvous = GlooRendezvous::Exchange,
                                                     GlooPeers peers = GlooPeers::All,
                                                     const std::vector<std::string>& hosts = {});

}  // namespace trainrt
