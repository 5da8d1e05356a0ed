#include "trainrt/error.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"

namespace trainrt {

std::unique_ptr<Communicator> make_gloo_communicator(bootstrap::Session&, const CommOptions&, const std::string&,
                                                     const std::string&, GlooRendezvous, GlooPeers,
                                                     const std::vector<std::string>&) {
  throw Error("this build has no Gloo (install libgloo-dev and rebuild); multi-node host collectives need it", "gloo");
}

}  // namespace trainrt
