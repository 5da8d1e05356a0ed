#pragma once
// The sharded layout: which rank holds which chunk of which global tensor. Each rank knows its own
// chunks; save() and restore() gather everyone's through the bootstrap and check that the chunks
// of every tensor agree on its dtype and global shape and tile it exactly.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include <functional>

#include "fingerprint.hpp"
#include "geometry.hpp"
#include "manager_impl.hpp"

namespace trainrt::checkpoint::layout {

// This rank's sharded entries, for an allgather: [{name, dtype, global_shape, offsets, shape}].
bootstrap::Blob mine(const std::vector<Entry>& entries);

// Every rank's chunks per tensor (tensors in name order, chunks in rank order) from the gathered
// blobs; throws UsageError naming the tensor and the ranks when the chunks disagree on the dtype
// or global shape or do not tile the tensor. `when` starts the message ("save", "restore").
std::vector<format::TensorRecord> combine(const std::vector<bootstrap::Blob>& gathered, const char* when);

// This rank's share of the fingerprint of `e`'s global tensor, its chunk's bytes at `data`.
// `threads`: as the threaded overload below (restore passes the rank's CPUs; 1 is the one-thread walk).
std::uint64_t chunk_fingerprint(const Entry& e, const std::byte* data, unsigned threads = 1);
std::uint64_t chunk_fingerprint(const std::string& name, const format::Sharded& where,
                                const std::vector<std::int64_t>& shape, DType dtype, const std::byte* data);

// The same share, the chunk's bytes cut into pieces of `piece_bytes` and summed on up to `threads`
// threads: restore() verifies with the cores the rank may use while training waits. The sum is mod
// p and linear in every byte, so any cut gives the value above. threads <= 1, or a chunk of one
// piece: the one-thread walk. A thread that cannot start leaves its pieces to the others.
constexpr std::uint64_t kFingerprintPiece = std::uint64_t{16} << 20;
std::uint64_t chunk_fingerprint(const std::string& name, const format::Sharded& where,
                                const std::vector<std::int64_t>& shape, DType dtype, const std::byte* data,
                                unsigned threads, std::uint64_t piece_bytes = kFingerprintPiece);

// The CPUs this process may run on (its affinity mask; the plugin binds a rank to its cores), at
// most `cap`, at least 1.
unsigned usable_cpus(unsigned cap);

// A chunk's bytes walked in pieces, in the chunk's own order (as a shard stores it): where each
// piece lands in the global tensor's row-major bytes. For verifying and exporting without
// holding a whole chunk.
class ChunkBytes {
 public:
  ChunkBytes(const format::Sharded& where, const std::vector<std::int64_t>& shape, std::size_t element_bytes);
  // f(global_byte, data, n) for every globally contiguous part of the `n` bytes at `data`, which
  // sit at byte `local` of the chunk.
  void map(std::uint64_t local, const std::uint8_t* data, std::size_t n,
           const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& f) const;
  // The fingerprint terms (mod p) of those `n` bytes, each part at its place in the global tensor.
  std::uint64_t fingerprint_terms(const fingerprint::Powers& powers, std::uint64_t local, const std::uint8_t* data,
                                  std::size_t n) const;

 private:
  geometry::Box chunk_, whole_;
  geometry::RunIndex runs_;
  std::uint64_t run_bytes_;
  std::size_t es_;
};

std::string hex(std::uint64_t v);
std::uint64_t parse_hex(const std::string& s);  // 16 lowercase hex digits, already validated

}  // namespace trainrt::checkpoint::layout
