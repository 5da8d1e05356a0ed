#pragma once
// The host backend across nodes: Gloo's TCP collectives, rendezvoused through our bootstrap (no
// store server, no guessed ports). Gloo's algorithms are deterministic run to run, but their
// summation order is not the shared-memory backend's rank order.
#include <memory>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

bool gloo_available();
// `address`: the host name or IP this rank listens on (reachable from the other nodes); empty:
// SLURMD_NODENAME, else the host name.
std::unique_ptr<Communicator> make_gloo_communicator(bootstrap::Session& session, const CommOptions& options = {},
                                                     const std::string& address = {});

}  // namespace trainrt
