#include "trainrt/error.hpp"
#include "trainrt/runtime/hierarchical_communicator.hpp"

namespace trainrt {

std::unique_ptr<Communicator> make_hierarchical_communicator(bootstrap::Session&, const CommOptions&) {
  throw Error("this build has no Gloo (install libgloo-dev and rebuild); multi-node host collectives need it", "hierarchical");
}

}  // namespace trainrt
