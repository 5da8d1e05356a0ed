#pragma once
// Restoring sharded tensors at another world size or split (docs/checkpoint.md "Sharded
// tensors"). Every saved byte is read once in the whole job: each saved chunk has one reader, the
// new rank that needs most of it, which streams it from its shard file in segments (verifying the
// chunk's XXH3 as it goes) and sends each new rank the part of the segment that rank holds,
// through the host communicator's alltoallv. Memory in flight per rank is bounded: a segment is at
// most transfer_bytes / world size, and a rank receives at most one segment's part from each peer
// per round. Every rank computes the same plan from the manifest and the new layout, so pieces
// travel without headers.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "geometry.hpp"
#include "shard_format.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt::checkpoint {

class Reshard {
 public:
  // `wanted`: the new layout (every rank's chunks, tensors in name order) of the tensors to load.
  Reshard(const format::Manifest& saved, const std::vector<format::TensorRecord>& wanted, unsigned rank,
          unsigned world, std::size_t transfer_bytes);
  ~Reshard();
  Reshard(const Reshard&) = delete;
  Reshard& operator=(const Reshard&) = delete;

  // "" or why the step cannot give the wanted tensors (missing, another dtype or global shape).
  // The same answer on every rank.
  const std::string& problem() const { return problem_; }
  // Opens and checks the shard files this rank reads; "" or why not.
  std::string open(const Dir& step_dir);
  // Moves every chunk to its new owner: `dest(i)` is where this rank's chunk of wanted tensor i
  // goes (its own row-major layout). Collective: every rank calls it, whatever open() said (a
  // rank that could not open its files sends nothing useful and reports why), and keeps taking
  // part after a bad read. "" or this rank's first problem; the caller agrees on them.
  std::string run(Communicator& comm, const std::function<std::byte*(std::size_t)>& dest);
  std::uint64_t bytes_read() const { return bytes_read_; }
  // The saved ranks whose shards new rank `new_rank` reads (ascending): a memory-tier restore
  // brings those to its node first.
  std::vector<unsigned> sources(unsigned new_rank) const;
  std::size_t rounds() const { return rounds_; }

 private:
  struct Tensor;
  struct Chunk;
  struct Segment;
  void plan(const format::Manifest& saved, const std::vector<format::TensorRecord>& wanted);

  unsigned rank_, world_;
  std::size_t segment_bytes_;
  std::string problem_;
  std::vector<Tensor> tensors_;
  std::vector<std::vector<Segment>> queue_;  // per new rank: the segments it reads, in order
  std::size_t rounds_ = 0;
  std::vector<std::unique_ptr<format::ShardReader>> readers_;  // by saved rank, those this rank reads
  const format::Manifest* saved_ = nullptr;
  std::uint64_t bytes_read_ = 0;
};

}  // namespace trainrt::checkpoint
