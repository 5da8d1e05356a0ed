#pragma once
// The host backend inside one node: a shared-memory segment created by local rank 0, named through
// the bootstrap and unlinked as soon as every rank has mapped it (so the kernel frees it even when
// a rank crashes). Reductions read the peers' staged data in rank order: bitwise identical results
// run to run and on every rank.
#include <memory>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

// All ranks of `session` must be on this node (session.size() == session.local_size()).
std::unique_ptr<Communicator> make_shm_communicator(bootstrap::Session& session, const CommOptions& options = {});

}  // namespace trainrt
