#pragma once
// The host backend of a multi-node world: allreduce reduces inside each node over shared memory,
// across nodes among the node leaders over Gloo, and broadcasts back over shared memory, so only
// one rank per node touches the network. broadcast and barrier are staged the same way (root's node,
// leaders, other nodes), and so is allgather when every node holds the same number of consecutive
// ranks (Slurm's block distribution); otherwise allgather, and always reduce_scatter and
// alltoallv, use Gloo across all ranks. Start-up costs no exchange to find the nodes (the
// launcher's job data), one world barrier, lookups inside each node and the leaders' mesh; the
// all-rank Gloo mesh is built at the first collective that uses it. `session` must outlive the
// communicator.
#include <memory>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

std::unique_ptr<Communicator> make_hierarchical_communicator(bootstrap::Session& session, const CommOptions& options = {});

}  // namespace trainrt
