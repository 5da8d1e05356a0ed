#include "layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <system_error>
#include <thread>

#include "fingerprint.hpp"
#include "geometry.hpp"
#include "json_fields.hpp"
#include "trainrt/cpu_count.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"

namespace trainrt::checkpoint::layout {

using json = nlohmann::json;

bootstrap::Blob mine(const std::vector<Entry>& entries) {
  json list = json::array();
  for (const auto& e : entries)
    if (e.shard)
      list.push_back({{"name", e.name}, {"dtype", to_string(e.dtype)}, {"global_shape", e.shard->global_shape},
                      {"offsets", e.shard->offsets}, {"shape", e.shape}});
  return to_blob(list);
}

std::vector<format::TensorRecord> combine(const std::vector<bootstrap::Blob>& gathered, const char* when) {
  std::map<std::string, format::TensorRecord> tensors;
  std::map<std::string, unsigned> first_rank;  // who first named each tensor, for messages
  for (unsigned rank = 0; rank < gathered.size(); ++rank) {
    for (const auto& c : from_blob(gathered[rank])) {
      const std::string name = c.at("name").get<std::string>();
      auto [it, fresh] = tensors.try_emplace(name);
      format::TensorRecord& t = it->second;
      const auto dtype = c.at("dtype").get<std::string>();
      const auto global = c.at("global_shape").get<std::vector<std::int64_t>>();
      if (fresh) {
        t.name = name, t.dtype = dtype, t.global_shape = global;
        first_rank[name] = rank;
      } else if (t.dtype != dtype || t.global_shape != global) {
        throw UsageError(fmt::format("{}: tensor '{}' is {} of global shape {} on rank {} but {} of {} on rank {}", when,
                                     name, t.dtype, geometry::to_string(t.global_shape), first_rank[name], dtype,
                                     geometry::to_string(global), rank),
                         "checkpoint");
      }
      t.chunks.push_back({rank, c.at("offsets").get<std::vector<std::int64_t>>(), c.at("shape").get<std::vector<std::int64_t>>()});
    }
  }
  std::vector<format::TensorRecord> out;
  for (auto& [name, t] : tensors) {
    std::vector<geometry::Owned> boxes;
    for (const auto& c : t.chunks) boxes.push_back({c.rank, {c.offsets, c.shape}});
    if (std::string why = geometry::check_tiling(boxes, t.global_shape); !why.empty())
      throw UsageError(fmt::format("{}: tensor '{}': the registered chunks do not tile it: {}", when, name, why), "checkpoint");
    out.push_back(std::move(t));
  }
  return out;
}

std::uint64_t chunk_fingerprint(const std::string& name, const format::Sharded& where, const std::vector<std::int64_t>& shape,
                                DType dtype, const std::byte* data) {
  const fingerprint::Powers powers(fingerprint::point_for(name));
  const geometry::Box chunk{where.offsets, shape}, whole{std::vector<std::int64_t>(shape.size(), 0), where.global_shape};
  const std::uint64_t es = size_of(dtype);
  std::uint64_t sum = 0;
  geometry::for_each_run(chunk, {&chunk, &whole}, [&](const std::vector<std::uint64_t>& at, std::uint64_t n) {
    sum = fingerprint::add(sum, fingerprint::run(powers, data + at[0] * es, n * es, at[1] * es));
  });
  return sum;
}

std::uint64_t chunk_fingerprint(const std::string& name, const format::Sharded& where, const std::vector<std::int64_t>& shape,
                                DType dtype, const std::byte* data, unsigned threads, std::uint64_t piece_bytes) {
  std::uint64_t total = size_of(dtype);
  for (auto d : shape) total *= static_cast<std::uint64_t>(d);
  const std::uint64_t pieces = piece_bytes == 0 ? 0 : (total + piece_bytes - 1) / piece_bytes;
  if (threads <= 1 || pieces < 2) return chunk_fingerprint(name, where, shape, dtype, data);
  const fingerprint::Powers powers(fingerprint::point_for(name));
  const ChunkBytes walk(where, shape, size_of(dtype));
  std::atomic<std::uint64_t> next{0};
  std::vector<std::uint64_t> sums(std::min<std::uint64_t>(threads, pieces), 0);
  std::vector<std::exception_ptr> failed(sums.size());  // a helper's throw, rethrown here after the join
  auto work = [&](std::size_t t) {
    try {
      std::uint64_t sum = 0;
      for (std::uint64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < pieces;) {
        const std::uint64_t local = k * piece_bytes;
        const auto n = static_cast<std::size_t>(std::min(piece_bytes, total - local));
        sum = fingerprint::add(sum, walk.fingerprint_terms(powers, local, reinterpret_cast<const std::uint8_t*>(data) + local, n));
      }
      sums[t] = sum;
    } catch (...) {
      failed[t] = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> helpers;
    helpers.reserve(sums.size() - 1);
    try {
      for (std::size_t t = 1; t < sums.size(); ++t) helpers.emplace_back(work, t);
    } catch (const std::system_error&) {  // no thread to be had: the started ones and this one finish
    }
    work(0);
  }
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
  std::uint64_t sum = 0;
  for (auto s : sums) sum = fingerprint::add(sum, s);
  return sum;
}

unsigned usable_cpus(unsigned cap) {
  unsigned n = affinity_cpu_count();
  if (n == 0) n = std::thread::hardware_concurrency();
  return std::clamp(n, 1u, std::max(1u, cap));
}

std::uint64_t chunk_fingerprint(const Entry& e, const std::byte* data, unsigned threads) {
  return chunk_fingerprint(e.name, *e.shard, e.shape, e.dtype, data, threads);
}

ChunkBytes::ChunkBytes(const format::Sharded& where, const std::vector<std::int64_t>& shape, std::size_t element_bytes)
    : chunk_{where.offsets, shape},
      whole_{std::vector<std::int64_t>(shape.size(), 0), where.global_shape},
      runs_(chunk_, {&chunk_, &whole_}),
      run_bytes_(runs_.length() * element_bytes),
      es_(element_bytes) {}

void ChunkBytes::map(std::uint64_t local, const std::uint8_t* data, std::size_t n,
                     const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& f) const {
  std::vector<std::uint64_t> at;
  while (n > 0 && run_bytes_ > 0) {
    const std::uint64_t k = local / run_bytes_, into = local % run_bytes_;
    const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(n, run_bytes_ - into));
    runs_.starts(k, at);
    f(at[1] * es_ + into, data, take);
    local += take, data += take, n -= take;
  }
}

std::uint64_t ChunkBytes::fingerprint_terms(const fingerprint::Powers& powers, std::uint64_t local,
                                            const std::uint8_t* data, std::size_t n) const {
  std::uint64_t sum = 0;
  map(local, data, n, [&](std::uint64_t global, const std::uint8_t* p, std::size_t m) {
    sum = fingerprint::add(sum, fingerprint::run(powers, p, m, global));
  });
  return sum;
}

std::string hex(std::uint64_t v) { return fmt::format("{:016x}", v); }
std::uint64_t parse_hex(const std::string& s) {
  return parse_number<std::uint64_t>(s, "a fingerprint", 0, fingerprint::kPrime - 1, "checkpoint", 16);
}

}  // namespace trainrt::checkpoint::layout
