#pragma once
// Boxes of a global tensor: the chunk each rank holds of a sharded entry (offsets + shape inside a
// global shape, row-major). Used at save (do the chunks tile the tensor?), at restore (which saved
// bytes does each new chunk need?) and by the content fingerprint (which global indices does a
// chunk hold?). Pure functions, no I/O; every product is checked against overflow.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainrt::checkpoint::geometry {

using Dims = std::vector<std::int64_t>;

struct Box {
  Dims offsets;
  Dims shape;
  bool operator==(const Box&) const = default;
};

// A box and the rank that holds it.
struct Owned {
  unsigned rank = 0;
  Box box;
};

// Elements in `shape`; nullopt when a size is negative or the product passes 2^62 (no tensor a
// checkpoint can hold is that large, and the margin keeps sums of volumes from overflowing).
std::optional<std::uint64_t> volume(const Dims& shape);

// "" when `box` has the dimensions of `global` and lies inside it (an empty box too: its offsets
// may reach the end of a dimension), else why not.
std::string check_inside(const Box& box, const Dims& global);

// "" when the boxes cover every element of `global` exactly once, else why not, naming ranks: a
// box outside the tensor, two ranks that overlap, or a gap (the elements covered and the ranks).
// Empty boxes are allowed anywhere inside. Overlaps are found by a sweep along the dimension
// with the most distinct offsets: O(n log n) for row, column and grid splits, O(n^2) only for
// layouts that are none of those.
std::string check_tiling(const std::vector<Owned>& boxes, const Dims& global);

std::optional<Box> intersect(const Box& a, const Box& b);

// Calls f(i, j, overlap) for every pair of a non-empty a[i] and b[j] that intersect, by the same
// sweep as check_tiling (never every pair when the layouts are splits along some dimension).
void for_each_overlap(const std::vector<Box>& a, const std::vector<Box>& b,
                      const std::function<void(std::size_t, std::size_t, const Box&)>& f);

// The elements of `part` as runs contiguous in every one of `layouts` (each a box that contains
// `part`, its elements stored row-major in its own shape): f(starts, length) gets, per layout, the
// linear index of the run's first element inside that layout. Runs come in row-major order of
// `part`. A layout of {zeros, global shape} gives global linear indices.
void for_each_run(const Box& part, const std::vector<const Box*>& layouts,
                  const std::function<void(const std::vector<std::uint64_t>& starts, std::uint64_t length)>& f);

// The same runs by number, for callers that walk a chunk's bytes in pieces: every run of a part has
// the same length, and run k starts at element k * length() of the first layout only when that
// layout is the part itself (a chunk walked in its own order).
class RunIndex {
 public:
  RunIndex(const Box& part, const std::vector<const Box*>& layouts);
  std::uint64_t length() const { return length_; }  // elements per run
  std::uint64_t count() const { return count_; }
  // Per layout, the linear index of run k's first element.
  void starts(std::uint64_t k, std::vector<std::uint64_t>& out) const;

 private:
  std::size_t outer_ = 0;  // dimensions [0, outer_) index the runs
  std::uint64_t length_ = 0, count_ = 0;
  Dims shape_;
  std::vector<std::vector<std::uint64_t>> strides_;
  std::vector<std::uint64_t> base_;
};

std::string to_string(const Dims& d);  // "[2, 3]"

}  // namespace trainrt::checkpoint::geometry
