#pragma once
// A node leader's bundle of its node's blobs, for a gather through the node leaders: the root reads
// one bundle per node instead of one blob per rank. Layout: per blob, its rank and its size (4 bytes
// each, little-endian as written by this machine) and then its bytes.
#include <string>
#include <utility>
#include <vector>

#include "trainrt/bootstrap/session.hpp"

namespace trainrt::bootstrap {

Blob pack_node_bundle(const std::vector<std::pair<unsigned, Blob>>& blobs);

// Puts every blob of `bundle` (sent by rank `leader`) at its rank in `out`. A rank outside `out`, a
// rank already filled (`filled` marks them) or a size running past the bundle is an Error naming
// the leader: nothing from a malformed bundle is trusted.
void unpack_node_bundle(const Blob& bundle, unsigned leader, std::vector<Blob>& out, std::vector<bool>& filled);

// Every rank's blob of a world of `world` from `bundles` (each beside the rank that sent it); a rank
// that no bundle carries is an Error saying `what` and naming the rank.
std::vector<Blob> unpack_node_bundles(const std::vector<std::pair<unsigned, Blob>>& bundles, unsigned world,
                                      const std::string& what);

}  // namespace trainrt::bootstrap
