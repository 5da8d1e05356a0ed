#include "reshard.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt::checkpoint {

using geometry::Box;

struct Reshard::Chunk {
  unsigned saved_rank = 0;
  Box box;
  unsigned reader = 0;
  std::vector<std::pair<unsigned, Box>> overlaps;  // the new ranks that need part of it, in rank order
  const format::ShardEntry* entry = nullptr;       // in its shard, on the reader once open() found it
};

struct Reshard::Tensor {
  std::string name;
  std::size_t element_bytes = 0;
  std::vector<std::optional<Box>> wanted;  // by new rank
  std::vector<Chunk> chunks;               // the saved chunks that hold anything
};

// A part of a saved chunk that one round moves: contiguous in the chunk's own layout.
struct Reshard::Segment {
  std::size_t tensor = 0, chunk = 0;
  Box box;
  std::uint64_t first = 0;  // linear index of its first element inside the chunk
  bool first_of_chunk = false, last_of_chunk = false;
};

namespace {

std::uint64_t bytes_of(const Box& b, std::size_t es) { return *geometry::volume(b.shape) * es; }

// Splits `chunk` into boxes of at most `limit` bytes, each contiguous in the chunk's layout and in
// its linear order: ranges along the outermost dimension whose slabs fit, whole below it.
void split(const Box& chunk, std::size_t es, std::size_t limit, const std::function<void(Box, std::uint64_t)>& f) {
  const std::size_t n = chunk.shape.size();
  if (n == 0) return f(chunk, 0);
  std::vector<std::uint64_t> slab(n);  // bytes of one step along each dimension
  slab[n - 1] = es;
  for (std::size_t d = n - 1; d-- > 0;) slab[d] = slab[d + 1] * static_cast<std::uint64_t>(chunk.shape[d + 1]);
  std::size_t d = 0;
  while (slab[d] > limit && d + 1 < n) ++d;
  const auto step = static_cast<std::int64_t>(std::max<std::uint64_t>(1, limit / slab[d]));
  std::vector<std::int64_t> prefix(d, 0);
  while (true) {
    for (std::int64_t i = 0; i < chunk.shape[d]; i += step) {
      Box b = chunk;
      std::uint64_t first = 0;
      for (std::size_t k = 0; k < d; ++k) {
        b.offsets[k] += prefix[k], b.shape[k] = 1;
        first += static_cast<std::uint64_t>(prefix[k]) * (slab[k] / es);
      }
      b.offsets[d] += i, b.shape[d] = std::min(step, chunk.shape[d] - i);
      f(std::move(b), first + static_cast<std::uint64_t>(i) * (slab[d] / es));
    }
    std::size_t k = d;
    while (k > 0 && ++prefix[k - 1] == chunk.shape[k - 1]) prefix[--k] = 0;
    if (k == 0) return;
  }
}

}  // namespace

Reshard::Reshard(const format::Manifest& saved, const std::vector<format::TensorRecord>& wanted, unsigned rank,
                 unsigned world, std::size_t transfer_bytes)
    : rank_(rank), world_(world), segment_bytes_(std::max<std::size_t>(transfer_bytes / std::max(world, 1u), 1 << 20)),
      saved_(&saved) {
  plan(saved, wanted);
}

Reshard::~Reshard() = default;

void Reshard::plan(const format::Manifest& saved, const std::vector<format::TensorRecord>& wanted) {
  queue_.assign(world_, {});
  for (const auto& w : wanted) {
    const format::TensorRecord* t = saved.tensor(w.name);
    if (!t) {
      problem_ = fmt::format("tensor '{}' is not in the step (it was not saved as a sharded tensor)", w.name);
      return;
    }
    if (t->dtype != w.dtype || t->global_shape != w.global_shape) {
      problem_ = fmt::format("tensor '{}' was saved as {} of global shape {}; this job registers {} of {}", w.name, t->dtype,
                             geometry::to_string(t->global_shape), w.dtype, geometry::to_string(w.global_shape));
      return;
    }
    Tensor tensor;
    tensor.name = w.name;
    tensor.element_bytes = size_of(parse_dtype(w.dtype));
    tensor.wanted.resize(world_);
    std::vector<Box> saved_boxes, wanted_boxes;
    std::vector<unsigned> wanted_ranks;
    for (const auto& c : w.chunks) {
      tensor.wanted[c.rank] = Box{c.offsets, c.shape};
      wanted_boxes.push_back({c.offsets, c.shape});
      wanted_ranks.push_back(c.rank);
    }
    for (const auto& c : t->chunks) {
      if (*geometry::volume(c.shape) == 0) continue;
      tensor.chunks.push_back({c.rank, {c.offsets, c.shape}, 0, {}, nullptr});
      saved_boxes.push_back({c.offsets, c.shape});
    }
    geometry::for_each_overlap(saved_boxes, wanted_boxes, [&](std::size_t i, std::size_t j, const Box& o) {
      tensor.chunks[i].overlaps.emplace_back(wanted_ranks[j], o);
    });
    const std::size_t index = tensors_.size();
    for (std::size_t i = 0; i < tensor.chunks.size(); ++i) {
      Chunk& c = tensor.chunks[i];
      std::sort(c.overlaps.begin(), c.overlaps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      // The reader is the new rank that keeps most of the chunk (the old owner on a tie): the
      // fewest bytes cross to other ranks, and an unchanged layout moves nothing.
      std::uint64_t best = 0;
      bool chosen = false;
      for (const auto& [r, o] : c.overlaps) {
        const std::uint64_t b = bytes_of(o, tensor.element_bytes);
        if (!chosen || b > best || (b == best && r == c.saved_rank)) c.reader = r, best = b, chosen = true;
      }
      std::vector<Segment>& q = queue_[c.reader];
      const std::size_t before = q.size();
      split(c.box, tensor.element_bytes, segment_bytes_, [&](Box b, std::uint64_t first) {
        q.push_back({index, i, std::move(b), first, false, false});
      });
      q[before].first_of_chunk = true;
      q.back().last_of_chunk = true;
    }
    tensors_.push_back(std::move(tensor));
  }
  for (const auto& q : queue_) rounds_ = std::max(rounds_, q.size());
}

std::vector<unsigned> Reshard::sources(unsigned new_rank) const {
  std::vector<unsigned> out;
  for (const auto& t : tensors_)
    for (const auto& c : t.chunks)
      if (c.reader == new_rank) out.push_back(c.saved_rank);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Reshard::open(const Dir& step_dir) {
  readers_.resize(saved_->world_size);
  for (auto& t : tensors_) {
    for (auto& c : t.chunks) {
      if (c.reader != rank_) continue;
      auto& reader = readers_[c.saved_rank];
      if (!reader) {
        reader = std::make_unique<format::ShardReader>();
        if (std::string why = reader->open(step_dir, *saved_, *saved_->shard_of(c.saved_rank)); !why.empty()) {
          reader.reset();
          return why;
        }
      }
      c.entry = reader->find(t.name);
      if (!c.entry || !c.entry->sharded || c.entry->bytes != bytes_of(c.box, t.element_bytes))
        return fmt::format("tensor '{}': {} lacks the chunk the manifest lists", t.name, reader->name());
    }
  }
  return {};
}

std::string Reshard::run(Communicator& comm, const std::function<std::byte*(std::size_t)>& dest) {
  std::string why;
  std::vector<std::byte> segment(segment_bytes_), send, recv;
  std::vector<std::size_t> send_bytes(world_), recv_bytes(world_);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), XXH3_freeState);
  if (!hash) throw Error("out of memory for a hash state", "checkpoint restore");
  auto mine = [&](std::size_t t) -> const std::optional<Box>& { return tensors_[t].wanted[rank_]; };
  for (std::size_t round = 0; round < rounds_; ++round) {
    std::fill(send_bytes.begin(), send_bytes.end(), 0);
    std::fill(recv_bytes.begin(), recv_bytes.end(), 0);
    send.clear();
    if (round < queue_[rank_].size()) {
      const Segment& s = queue_[rank_][round];
      const Tensor& t = tensors_[s.tensor];
      const Chunk& c = t.chunks[s.chunk];
      const std::size_t es = t.element_bytes, n = bytes_of(s.box, es);
      if (c.entry) {
        if (s.first_of_chunk) XXH3_64bits_reset(hash.get());
        const format::ShardReader& reader = *readers_[c.saved_rank];
        if (!reader.read_piece(*c.entry, s.first * es, reinterpret_cast<std::uint8_t*>(segment.data()), n, hash.get()) &&
            why.empty())
          why = fmt::format("{}: short read in tensor '{}'", reader.name(), t.name);
        bytes_read_ += n;
        // The next segment this rank reads starts coming from the disk while this one travels.
        if (round + 1 < queue_[rank_].size()) {
          const Segment& next = queue_[rank_][round + 1];
          const Tensor& nt = tensors_[next.tensor];
          const Chunk& nc = nt.chunks[next.chunk];
          if (nc.entry) readers_[nc.saved_rank]->prefetch(*nc.entry, next.first * nt.element_bytes, bytes_of(next.box, nt.element_bytes));
        }
        if (s.last_of_chunk && fmt::format("{:016x}", XXH3_64bits_digest(hash.get())) != c.entry->checksum && why.empty())
          why = fmt::format("entry '{}' in {} fails its checksum", t.name, reader.name());
      }
      for (const auto& [r, overlap] : c.overlaps) {
        auto piece = geometry::intersect(s.box, overlap);
        if (!piece) continue;
        std::byte* out = r == rank_ ? dest(s.tensor) : nullptr;
        if (r != rank_) send_bytes[r] = bytes_of(*piece, es);
        const Box& target = *t.wanted[r];
        geometry::for_each_run(*piece, {&c.box, &target}, [&](const std::vector<std::uint64_t>& at, std::uint64_t len) {
          const std::byte* from = segment.data() + (at[0] - s.first) * es;
          if (out) std::memcpy(out + at[1] * es, from, len * es);
          else send.insert(send.end(), from, from + len * es);
        });
      }
    }
    for (unsigned q = 0; q < world_; ++q) {
      if (q == rank_ || round >= queue_[q].size()) continue;
      const Segment& s = queue_[q][round];
      if (!mine(s.tensor)) continue;
      if (auto piece = geometry::intersect(s.box, *mine(s.tensor))) recv_bytes[q] = bytes_of(*piece, tensors_[s.tensor].element_bytes);
    }
    std::size_t total = 0;
    for (auto n : recv_bytes) total += n;
    recv.resize(total);
    comm.alltoallv(send.data(), send_bytes, recv.data(), recv_bytes);
    std::size_t at = 0;
    for (unsigned q = 0; q < world_; ++q) {
      if (recv_bytes[q] == 0) continue;
      const Segment& s = queue_[q][round];
      const Tensor& t = tensors_[s.tensor];
      const Box& target = *mine(s.tensor);
      std::byte* out = dest(s.tensor);
      geometry::for_each_run(*geometry::intersect(s.box, target), {&t.chunks[s.chunk].box, &target},
                             [&](const std::vector<std::uint64_t>& pos, std::uint64_t len) {
                               std::memcpy(out + pos[1] * t.element_bytes, recv.data() + at, len * t.element_bytes);
                               at += len * t.element_bytes;
                             });
    }
  }
  return why;
}

}  // namespace trainrt::checkpoint
