#include <algorithm>

#include "trainrt/error.hpp"
#include "trainrt/runtime/gloo_communicator.hpp"

namespace trainrt {

std::vector<unsigned> gloo_peers(unsigned rank, unsigned size, GlooPeers peers) {
  if (rank >= size) throw UsageError("gloo_peers: rank " + std::to_string(rank) + " of a world of " + std::to_string(size));
  std::vector<unsigned> out;
  if (peers == GlooPeers::All) {
    for (unsigned p = 0; p < size; ++p)
      if (p != rank) out.push_back(p);
    return out;
  }
  // The relation is symmetric: p = rank + d means rank = p - d, so both ends make the same pair.
  for (unsigned long long d = 1; d < size; d <<= 1) {
    const auto dist = static_cast<unsigned>(d);
    out.push_back((rank + dist) % size);
    out.push_back((rank + size - dist) % size);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace trainrt
