#include "geometry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace trainrt::checkpoint::geometry {
namespace {

constexpr std::uint64_t kMaxVolume = std::uint64_t{1} << 62;

bool empty(const Box& b) {
  return std::any_of(b.shape.begin(), b.shape.end(), [](std::int64_t s) { return s == 0; });
}

std::int64_t end_of(const Box& b, std::size_t d) { return b.offsets[d] + b.shape[d]; }

// The dimension whose offsets differ most among the boxes: sweeping along it keeps the set of
// boxes open at any point small for splits along any one dimension (and for grids).
std::size_t sweep_dimension(const std::vector<const Box*>& boxes, std::size_t ndim) {
  std::size_t best = 0, best_distinct = 0;
  std::vector<std::int64_t> starts;
  for (std::size_t d = 0; d < ndim; ++d) {
    starts.clear();
    for (const Box* b : boxes) starts.push_back(b->offsets[d]);
    std::sort(starts.begin(), starts.end());
    const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > best_distinct) best = d, best_distinct = distinct;
  }
  return best;
}

// Sweeps the non-empty boxes of two sets (tags 0 and 1) along one dimension and calls
// f(tag_a, i, tag_b, j) for each intersecting pair with different tags, or with any tags when
// `same_set` (one set against itself). Stops early when f returns false.
template <typename F>
void sweep(const std::vector<const Box*>& boxes, const std::vector<int>& tags, std::size_t ndim, bool same_set, F f) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < boxes.size(); ++i)
    if (!empty(*boxes[i])) order.push_back(i);
  if (ndim == 0) {  // scalars: every non-empty pair meets
    for (std::size_t x = 0; x < order.size(); ++x)
      for (std::size_t y = x + 1; y < order.size(); ++y)
        if ((same_set || tags[order[x]] != tags[order[y]]) && !f(order[x], order[y])) return;
    return;
  }
  std::vector<const Box*> live;
  for (std::size_t i : order) live.push_back(boxes[i]);
  const std::size_t d = sweep_dimension(live, ndim);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return boxes[x]->offsets[d] < boxes[y]->offsets[d]; });
  std::vector<std::size_t> open;
  for (std::size_t i : order) {
    const std::int64_t start = boxes[i]->offsets[d];
    std::erase_if(open, [&](std::size_t j) { return end_of(*boxes[j], d) <= start; });
    for (std::size_t j : open)
      if ((same_set || tags[i] != tags[j]) && intersect(*boxes[i], *boxes[j]) && !f(j, i)) return;
    open.push_back(i);
  }
}

}  // namespace

std::optional<std::uint64_t> volume(const Dims& shape) {
  std::uint64_t v = 1;
  for (std::int64_t s : shape) {
    if (s < 0) return std::nullopt;
    if (s != 0 && v > kMaxVolume / static_cast<std::uint64_t>(s)) return std::nullopt;
    v *= static_cast<std::uint64_t>(s);
  }
  return v;
}

std::string to_string(const Dims& d) { return fmt::format("[{}]", fmt::join(d, ", ")); }

std::string check_inside(const Box& box, const Dims& global) {
  if (box.offsets.size() != global.size() || box.shape.size() != global.size())
    return fmt::format("has {} offsets and {} sizes for a tensor of {} dimensions", box.offsets.size(), box.shape.size(),
                       global.size());
  if (!volume(box.shape)) return fmt::format("has the impossible shape {}", to_string(box.shape));
  for (std::size_t d = 0; d < global.size(); ++d)
    if (box.offsets[d] < 0 || box.offsets[d] > global[d] || box.shape[d] > global[d] - box.offsets[d])
      return fmt::format("chunk {} at offsets {} lies outside the global shape {}", to_string(box.shape),
                         to_string(box.offsets), to_string(global));
  return {};
}

std::string check_tiling(const std::vector<Owned>& boxes, const Dims& global) {
  const auto total = volume(global);
  if (!total) return fmt::format("the global shape {} is impossible", to_string(global));
  __extension__ unsigned __int128 covered = 0;  // a sum of up to 2^20 volumes below 2^62
  std::vector<const Box*> all;
  std::vector<int> tags;
  for (const auto& o : boxes) {
    if (std::string why = check_inside(o.box, global); !why.empty()) return fmt::format("rank {}: {}", o.rank, why);
    covered += *volume(o.box.shape);
    all.push_back(&o.box);
    tags.push_back(0);
  }
  std::string overlap;
  sweep(all, tags, global.size(), true, [&](std::size_t a, std::size_t b) {
    const Box both = *intersect(boxes[a].box, boxes[b].box);
    overlap = fmt::format("ranks {} and {} both hold the elements at offsets {} (shape {})",
                          std::min(boxes[a].rank, boxes[b].rank), std::max(boxes[a].rank, boxes[b].rank),
                          to_string(both.offsets), to_string(both.shape));
    return false;
  });
  if (!overlap.empty()) return overlap;
  if (covered != *total) {
    std::vector<unsigned> ranks;
    for (const auto& o : boxes) ranks.push_back(o.rank);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return fmt::format("a gap: the chunks of ranks [{}] cover {} of the {} elements of the global shape {}",
                       fmt::join(ranks, ", "), static_cast<std::uint64_t>(covered), *total, to_string(global));
  }
  return {};
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  if (a.offsets.size() != b.offsets.size()) return std::nullopt;
  Box r;
  for (std::size_t d = 0; d < a.offsets.size(); ++d) {
    const std::int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const std::int64_t hi = std::min(end_of(a, d), end_of(b, d));
    if (hi <= lo) return std::nullopt;
    r.offsets.push_back(lo);
    r.shape.push_back(hi - lo);
  }
  if (a.offsets.empty() && (empty(a) || empty(b))) return std::nullopt;
  return r;
}

void for_each_overlap(const std::vector<Box>& a, const std::vector<Box>& b,
                      const std::function<void(std::size_t, std::size_t, const Box&)>& f) {
  if (a.empty() || b.empty()) return;
  std::vector<const Box*> all;
  std::vector<int> tags;
  for (const auto& x : a) all.push_back(&x), tags.push_back(0);
  for (const auto& x : b) all.push_back(&x), tags.push_back(1);
  const std::size_t ndim = a.front().offsets.size();
  sweep(all, tags, ndim, false, [&](std::size_t x, std::size_t y) {
    if (tags[x] == 1) std::swap(x, y);
    f(x, y - a.size(), *intersect(*all[x], *all[y]));
    return true;
  });
}

void for_each_run(const Box& part, const std::vector<const Box*>& layouts,
                  const std::function<void(const std::vector<std::uint64_t>&, std::uint64_t)>& f) {
  const RunIndex runs(part, layouts);
  std::vector<std::uint64_t> starts;
  for (std::uint64_t k = 0; k < runs.count(); ++k) {
    runs.starts(k, starts);
    f(starts, runs.length());
  }
}

RunIndex::RunIndex(const Box& part, const std::vector<const Box*>& layouts) : shape_(part.shape) {
  const std::size_t n = part.shape.size();
  if (empty(part)) return;
  std::size_t m = n == 0 ? 0 : n - 1;
  auto whole_in_all = [&](std::size_t d) {
    return std::all_of(layouts.begin(), layouts.end(), [&](const Box* l) { return l->shape[d] == part.shape[d]; });
  };
  while (m > 0 && whole_in_all(m)) --m;
  outer_ = m;
  length_ = 1;
  for (std::size_t d = m; d < n; ++d) length_ *= static_cast<std::uint64_t>(part.shape[d]);
  count_ = 1;
  for (std::size_t d = 0; d < m; ++d) count_ *= static_cast<std::uint64_t>(part.shape[d]);
  strides_.assign(layouts.size(), std::vector<std::uint64_t>(n, 1));
  base_.assign(layouts.size(), 0);
  for (std::size_t l = 0; l < layouts.size(); ++l) {
    for (std::size_t d = n; d-- > 1;) strides_[l][d - 1] = strides_[l][d] * static_cast<std::uint64_t>(layouts[l]->shape[d]);
    for (std::size_t d = 0; d < n; ++d)
      base_[l] += static_cast<std::uint64_t>(part.offsets[d] - layouts[l]->offsets[d]) * strides_[l][d];
  }
}

void RunIndex::starts(std::uint64_t k, std::vector<std::uint64_t>& out) const {
  out = base_;
  for (std::size_t d = outer_; d-- > 0;) {
    const auto extent = static_cast<std::uint64_t>(shape_[d]);
    const std::uint64_t i = k % extent;
    k /= extent;
    for (std::size_t l = 0; l < out.size(); ++l) out[l] += i * strides_[l][d];
  }
}

}  // namespace trainrt::checkpoint::geometry
