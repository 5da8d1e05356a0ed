// Boxes (tiling, overlaps, runs) and the content fingerprint, against brute force on small
// tensors: every split must give the same fingerprint, every misplacement a different one.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "fingerprint.hpp"
#include "geometry.hpp"
#include "layout.hpp"

using namespace trainrt::checkpoint;
using geometry::Box;
using geometry::Dims;
using geometry::Owned;

namespace {

// Splits `global` into a grid with the given cut points per dimension (cuts exclude 0 and end).
std::vector<Owned> grid(const Dims& global, const std::vector<std::vector<std::int64_t>>& cuts) {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> spans(global.size());
  for (std::size_t d = 0; d < global.size(); ++d) {
    std::int64_t at = 0;
    for (auto c : cuts[d]) spans[d].push_back({at, c - at}), at = c;
    spans[d].push_back({at, global[d] - at});
  }
  std::vector<Owned> out;
  std::vector<std::size_t> idx(global.size(), 0);
  while (true) {
    Box b;
    for (std::size_t d = 0; d < global.size(); ++d) b.offsets.push_back(spans[d][idx[d]].first), b.shape.push_back(spans[d][idx[d]].second);
    out.push_back({static_cast<unsigned>(out.size()), b});
    std::size_t d = global.size();
    while (d > 0 && ++idx[d - 1] == spans[d - 1].size()) idx[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

std::uint64_t linear(const Dims& at, const Dims& shape) {
  std::uint64_t i = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) i = i * static_cast<std::uint64_t>(shape[d]) + static_cast<std::uint64_t>(at[d]);
  return i;
}

// Every element of `box` with its global linear index, brute force.
void each_element(const Box& box, const Dims& global, const std::function<void(std::uint64_t local, std::uint64_t global)>& f) {
  Dims at = box.offsets;
  auto v = geometry::volume(box.shape).value();
  for (std::uint64_t local = 0; local < v; ++local) {
    f(local, linear(at, global));
    for (std::size_t d = box.shape.size(); d-- > 0;) {
      if (++at[d] < box.offsets[d] + box.shape[d]) break;
      at[d] = box.offsets[d];
    }
  }
}

// The fingerprint of a chunk (its elements stored row-major in `data`), through for_each_run.
std::uint64_t chunk_fp(const std::string& name, const Box& box, const Dims& global, const float* data) {
  fingerprint::Powers pw(fingerprint::point_for(name));
  const Box whole{Dims(global.size(), 0), global};
  std::uint64_t sum = 0;
  geometry::for_each_run(box, {&box, &whole}, [&](const std::vector<std::uint64_t>& s, std::uint64_t n) {
    sum = fingerprint::add(sum, fingerprint::run(pw, data + s[0], 4 * n, 4 * s[1]));
  });
  return sum;
}

}  // namespace

TEST_CASE("tiling: splits along each dimension, grids, uneven and empty chunks", "[geometry]") {
  const Dims g{10, 7, 3};
  CHECK(geometry::check_tiling(grid(g, {{3, 5}, {}, {}}), g).empty());
  CHECK(geometry::check_tiling(grid(g, {{}, {1, 2, 6}, {}}), g).empty());
  CHECK(geometry::check_tiling(grid(g, {{4}, {2}, {1}}), g).empty());
  auto with_empty = grid(g, {{5}, {}, {}});
  with_empty.push_back({7, {{10, 0, 0}, {0, 7, 3}}});  // a rank with nothing, at the end
  CHECK(geometry::check_tiling(with_empty, g).empty());
  CHECK(geometry::check_tiling({{0, {{}, {}}}}, Dims{}).empty());  // a scalar held by one rank
}

TEST_CASE("tiling: overlaps, gaps and boxes outside are named with their ranks", "[geometry]") {
  const Dims g{8, 4};
  auto boxes = grid(g, {{4}, {}});
  auto overlap = boxes;
  overlap[1].box.offsets[0] = 3, overlap[1].box.shape[0] = 5;
  CHECK_THAT(geometry::check_tiling(overlap, g), Catch::Contains("ranks 0 and 1 both hold"));
  auto gap = boxes;
  gap[1].box.offsets[0] = 5, gap[1].box.shape[0] = 3;
  CHECK_THAT(geometry::check_tiling(gap, g), Catch::Contains("a gap") && Catch::Contains("28 of the 32"));
  auto outside = boxes;
  outside[1].box.shape[0] = 5;
  CHECK_THAT(geometry::check_tiling(outside, g), Catch::Contains("rank 1") && Catch::Contains("outside"));
  auto dims = boxes;
  dims[0].box.shape.push_back(1);
  CHECK_THAT(geometry::check_tiling(dims, g), Catch::Contains("rank 0"));
  // Same volume, one overlap and one gap: the overlap is what is named.
  auto moved = boxes;
  moved[0].box.offsets[1] = 0, moved[0].box.shape = {4, 4};
  moved[1].box = {{2, 0}, {4, 4}};
  CHECK_THAT(geometry::check_tiling(moved, g), Catch::Contains("both hold"));
  CHECK_THAT(geometry::check_tiling({{0, {{}, {}}}, {3, {{}, {}}}}, Dims{}), Catch::Contains("ranks 0 and 3"));
}

TEST_CASE("overlaps of two layouts equal brute force", "[geometry]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const Dims g{1 + static_cast<std::int64_t>(rng() % 9), 1 + static_cast<std::int64_t>(rng() % 9)};
    auto cuts = [&](std::int64_t n) {
      std::set<std::int64_t> c;
      for (int i = 0; i < 3; ++i)
        if (n > 1) c.insert(1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n - 1)));
      return std::vector<std::int64_t>(c.begin(), c.end());
    };
    std::vector<Box> a, b;
    for (auto& o : grid(g, {cuts(g[0]), cuts(g[1])})) a.push_back(o.box);
    for (auto& o : grid(g, {cuts(g[0]), cuts(g[1])})) b.push_back(o.box);
    std::set<std::pair<std::size_t, std::size_t>> swept, brute;
    std::uint64_t cells = 0;
    geometry::for_each_overlap(a, b, [&](std::size_t i, std::size_t j, const Box& o) {
      swept.insert({i, j});
      cells += geometry::volume(o.shape).value();
      CHECK(geometry::intersect(a[i], b[j]) == o);
    });
    for (std::size_t i = 0; i < a.size(); ++i)
      for (std::size_t j = 0; j < b.size(); ++j)
        if (geometry::intersect(a[i], b[j])) brute.insert({i, j});
    CHECK(swept == brute);
    CHECK(cells == geometry::volume(g).value());
  }
}

TEST_CASE("runs cover a part exactly, contiguous in every layout", "[geometry]") {
  const Dims g{6, 5, 4};
  const Box whole{{0, 0, 0}, g};
  const Box chunk{{1, 1, 0}, {4, 3, 4}};
  const Box part{{2, 1, 0}, {2, 3, 4}};  // whole rows of the chunk: one run per dimension-0 index
  std::map<std::uint64_t, std::uint64_t> seen;  // global index -> local index in the chunk
  std::size_t runs = 0;
  geometry::for_each_run(part, {&chunk, &whole}, [&](const std::vector<std::uint64_t>& s, std::uint64_t n) {
    ++runs;
    for (std::uint64_t k = 0; k < n; ++k) CHECK(seen.emplace(s[1] + k, s[0] + k).second);
  });
  CHECK(runs == 2);  // per index of dimension 0: 3 x 4 elements, contiguous in the chunk and globally
  std::map<std::uint64_t, std::uint64_t> want;
  each_element(part, g, [&](std::uint64_t, std::uint64_t gi) { want[gi] = 0; });
  CHECK(seen.size() == want.size());
  for (auto& [gi, li] : seen) {
    // local index li in the chunk must be the element with global index gi
    Dims at(3);
    std::uint64_t rest = li;
    for (std::size_t d = 3; d-- > 0;) {
      const auto n = static_cast<std::uint64_t>(chunk.shape[d]);
      at[d] = chunk.offsets[d] + static_cast<std::int64_t>(rest % n);
      rest /= n;
    }
    CHECK(linear(at, g) == gi);
  }
  std::size_t one = 0;
  geometry::for_each_run(whole, {&whole}, [&](const std::vector<std::uint64_t>& s, std::uint64_t n) {
    ++one;
    CHECK(s[0] == 0);
    CHECK(n == 120);
  });
  CHECK(one == 1);
}

TEST_CASE("fingerprint: every split of a tensor gives the same value; misplacements do not", "[fingerprint]") {
  const Dims g{9, 8};
  std::vector<float> global(72);
  std::mt19937 rng(3);
  for (auto& x : global) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  auto fp_of = [&](const std::vector<Owned>& split, bool swap_first_two = false) {
    std::uint64_t total = 0;
    std::vector<std::vector<float>> chunks;
    for (const auto& o : split) {
      std::vector<float> c;
      each_element(o.box, g, [&](std::uint64_t, std::uint64_t gi) { c.push_back(global[gi]); });
      chunks.push_back(std::move(c));
    }
    if (swap_first_two) std::swap(chunks[0], chunks[1]);
    for (std::size_t i = 0; i < split.size(); ++i) total = fingerprint::add(total, chunk_fp("w", split[i].box, g, chunks[i].data()));
    return total;
  };
  const auto reference = fp_of({{0, {{0, 0}, g}}});
  CHECK(fp_of(grid(g, {{4}, {}})) == reference);
  CHECK(fp_of(grid(g, {{}, {3}})) == reference);
  CHECK(fp_of(grid(g, {{2, 5, 8}, {1, 6}})) == reference);
  // Two equal-shaped chunks exchanged: same bytes, wrong places.
  CHECK(fp_of(grid(g, {{}, {4}}), true) != reference);
  // One word changed by one bit: certain.
  for (int bit = 0; bit < 32; ++bit) {
    auto saved = global;
    std::uint32_t w;
    std::memcpy(&w, &global[17], 4);
    w ^= 1u << bit;
    std::memcpy(&global[17], &w, 4);
    CHECK(fp_of(grid(g, {{4}, {}})) != reference);
    global = saved;
  }
  CHECK(fingerprint::point_for("w") != fingerprint::point_for("v"));
}

TEST_CASE("fingerprint: runs of any length and start equal the definition", "[fingerprint]") {
  fingerprint::Powers pw(fingerprint::point_for("t"));
  std::mt19937_64 rng(11);
  // 301 bytes: runs shorter than a block of Powers::kBlockWords words; 4,099: runs of several
  // blocks, half the words all ones (the largest products the block sums hold).
  const std::size_t size = GENERATE(std::size_t{301}, std::size_t{4099});
  std::vector<unsigned char> tensor(size);
  for (auto& b : tensor) b = static_cast<unsigned char>(rng());
  if (size > 301)
    for (std::size_t i = 0; i < size; ++i)
      if ((i / 8) % 2 == 0) tensor[i] = 0xff;
  auto word = [&](std::uint64_t m) {  // c_m, zero-padded past the end
    std::uint64_t w = 0;
    for (unsigned i = 0; i < 8 && 8 * m + i < tensor.size(); ++i) w |= std::uint64_t{tensor[8 * m + i]} << (8 * i);
    return w;
  };
  std::uint64_t want = 0;
  for (std::uint64_t m = 0; 8 * m < tensor.size(); ++m)
    want = fingerprint::add(want, fingerprint::mul(word(m) % fingerprint::kPrime, pw.pow(m)));
  // Any cut into runs, at any byte, sums to the definition; misaligned data on purpose.
  for (int trial = 0; trial < 300; ++trial) {
    std::set<std::uint64_t> cuts{0, tensor.size()};
    for (int i = 0; i < 1 + trial % 7; ++i) cuts.insert(rng() % tensor.size());
    std::uint64_t sum = 0;
    for (auto it = cuts.begin(); std::next(it) != cuts.end(); ++it) {
      std::vector<unsigned char> copy(tensor.begin() + static_cast<std::ptrdiff_t>(*it),
                                      tensor.begin() + static_cast<std::ptrdiff_t>(*std::next(it)));
      copy.insert(copy.begin(), 0);
      sum = fingerprint::add(sum, fingerprint::run(pw, copy.data() + 1, *std::next(it) - *it, *it));
    }
    CHECK(sum == want);
  }
}

// The block sums add 8 products a lane: with words of all ones and r near p (point_for can give
// p - 1) they pass 2^125, where a 64-bit fold wraps (found in review: r = p - 1 gave a wrong value).
TEST_CASE("fingerprint: the largest words and points equal the definition", "[fingerprint]") {
  std::vector<unsigned char> tensor(8 * 200 + 5, 0xff);
  std::mt19937_64 rng(5);
  for (std::size_t i = 8 * 150; i < tensor.size(); ++i) tensor[i] = static_cast<unsigned char>(rng());
  for (std::uint64_t r : {fingerprint::kPrime - 1, fingerprint::kPrime - 2, std::uint64_t{2}, std::uint64_t{1486115343427298950},
                          fingerprint::point_for("w")}) {
    fingerprint::Powers pw(r);
    std::uint64_t want = 0;
    for (std::uint64_t m = 0; 8 * m < tensor.size(); ++m) {
      std::uint64_t w = 0;
      for (unsigned i = 0; i < 8 && 8 * m + i < tensor.size(); ++i) w |= std::uint64_t{tensor[8 * m + i]} << (8 * i);
      want = fingerprint::add(want, fingerprint::mul(w % fingerprint::kPrime, pw.pow(m)));
    }
    INFO("r = " << r);
    CHECK(fingerprint::run(pw, tensor.data(), tensor.size(), 0) == want);
    CHECK(fingerprint::add(fingerprint::run(pw, tensor.data(), 8 * 64 + 3, 0),
                           fingerprint::run(pw, tensor.data() + 8 * 64 + 3, tensor.size() - 8 * 64 - 3, 8 * 64 + 3)) == want);
  }
}

TEST_CASE("fingerprint: a chunk summed in pieces on threads equals the one-thread walk", "[fingerprint]") {
  std::mt19937_64 rng(5);
  struct Case {
    Dims global, offsets, shape;
    trainrt::DType dtype;
  };
  // A strided 2-D chunk (runs of 997 f32, pieces cut inside runs and words), a 1-D bf16 chunk at
  // an odd element offset, and a column of width 1 (runs of one element).
  const std::vector<Case> cases{{{37, 1001}, {5, 3}, {20, 997}, trainrt::DType::F32},
                                {{100003}, {7}, {99990}, trainrt::DType::BF16},
                                {{300, 9}, {10, 4}, {250, 1}, trainrt::DType::F32}};
  for (const auto& c : cases) {
    std::uint64_t bytes = trainrt::size_of(c.dtype);
    for (auto d : c.shape) bytes *= static_cast<std::uint64_t>(d);
    std::vector<std::byte> data(bytes);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    const format::Sharded where{c.global, c.offsets};
    const std::uint64_t one = layout::chunk_fingerprint("t", where, c.shape, c.dtype, data.data());
    CHECK(one != 0);
    for (std::uint64_t piece : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{4096}, std::uint64_t{8191}, bytes - 1,
                                bytes, bytes + 1})
      for (unsigned threads : {1u, 2u, 3u, 8u}) {
        INFO("bytes " << bytes << ", piece " << piece << ", threads " << threads);
        CHECK(layout::chunk_fingerprint("t", where, c.shape, c.dtype, data.data(), threads, piece) == one);
      }
    // A flipped bit in the last piece changes the threaded sum as it changes the one-thread one.
    data[bytes - 1] ^= std::byte{1};
    const std::uint64_t flipped = layout::chunk_fingerprint("t", where, c.shape, c.dtype, data.data());
    CHECK(flipped != one);
    CHECK(layout::chunk_fingerprint("t", where, c.shape, c.dtype, data.data(), 4, 4096) == flipped);
  }
  CHECK(layout::usable_cpus(1) == 1);
  CHECK(layout::usable_cpus(16) >= 1);
  CHECK(layout::usable_cpus(16) <= 16);
}
