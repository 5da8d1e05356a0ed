#include "node_bundle.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt::bootstrap {

Blob pack_node_bundle(const std::vector<std::pair<unsigned, Blob>>& blobs) {
  Blob out;
  for (const auto& [rank, blob] : blobs) {
    const std::uint32_t head[2] = {rank, static_cast<std::uint32_t>(blob.size())};
    const auto* h = reinterpret_cast<const std::uint8_t*>(head);
    out.insert(out.end(), h, h + sizeof head);
    out.insert(out.end(), blob.begin(), blob.end());
  }
  return out;
}

void unpack_node_bundle(const Blob& bundle, unsigned leader, std::vector<Blob>& out, std::vector<bool>& filled) {
  std::size_t at = 0;
  while (at < bundle.size()) {
    std::uint32_t head[2];
    if (bundle.size() - at < sizeof head)
      throw Error(fmt::format("node leader {} sent a bundle cut inside a header at byte {} of {}", leader, at,
                              bundle.size()),
                  "bootstrap");
    std::memcpy(head, bundle.data() + at, sizeof head);
    at += sizeof head;
    const auto [rank, bytes] = std::pair{head[0], head[1]};
    if (rank >= out.size() || filled[rank])
      throw Error(fmt::format("node leader {} sent a blob for rank {} ({})", leader, rank,
                              rank >= out.size() ? fmt::format("outside a world of {}", out.size()) : "already received"),
                  "bootstrap");
    if (bundle.size() - at < bytes)
      throw Error(fmt::format("node leader {} sent {} bytes for rank {} with {} left in its bundle", leader, bytes, rank,
                              bundle.size() - at),
                  "bootstrap");
    out[rank].assign(bundle.begin() + static_cast<std::ptrdiff_t>(at), bundle.begin() + static_cast<std::ptrdiff_t>(at + bytes));
    filled[rank] = true;
    at += bytes;
  }
}

std::vector<Blob> unpack_node_bundles(const std::vector<std::pair<unsigned, Blob>>& bundles, unsigned world,
                                      const std::string& what) {
  std::vector<Blob> out(world);
  std::vector<bool> filled(world, false);
  for (const auto& [sender, bundle] : bundles) unpack_node_bundle(bundle, sender, out, filled);
  if (const auto gap = std::find(filled.begin(), filled.end(), false); gap != filled.end())
    throw Error(fmt::format("{}: no bundle carried rank {}'s blob", what, gap - filled.begin()), "bootstrap");
  return out;
}

}  // namespace trainrt::bootstrap
