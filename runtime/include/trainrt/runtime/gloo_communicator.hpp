#pragma once
// The host backend across nodes: Gloo's TCP collectives, rendezvoused through our bootstrap (no
// store server, no guessed ports). Gloo's algorithms are deterministic run to run, but their
// summation order is not the shared-memory backend's rank order.
#include <memory>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

// `address`: the host name or IP this rank listens on (reachable from the other nodes); empty:
// SLURMD_NODENAME, else the host name. `tag` names the rendezvous keys; every member must pass the
// same one (empty: a per-process counter, right when every rank creates the same communicators in
// the same order).
std::unique_ptr<Communicator> make_gloo_communicator(bootstrap::Session& session, const CommOptions& options = {},
                                                     const std::string& address = {}, const std::string& tag = {});

}  // namespace trainrt
