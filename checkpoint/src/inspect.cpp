#include "trainrt/checkpoint/inspect.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>

#include "files.hpp"
#include "fingerprint.hpp"
#include "geometry.hpp"
#include "layout.hpp"
#include "shard_format.hpp"
#include "trainrt/error.hpp"

namespace trainrt::checkpoint {

std::uint64_t StepReport::bytes() const {
  std::uint64_t total = 0;
  for (const auto& s : shards) total += s.bytes;
  return total;
}

std::vector<std::string> StepReport::problems() const {
  std::vector<std::string> out;
  if (!problem.empty()) out.push_back(problem);
  for (const auto& s : shards) {
    if (!s.problem.empty()) out.push_back(s.problem);
    for (const auto& e : s.entries)
      if (!e.problem.empty()) out.push_back(e.problem);
  }
  for (const auto& t : tensors)
    if (!t.problem.empty()) out.push_back(t.problem);
  if (unchecked_shards > 0)
    out.push_back(fmt::format("{} more shards not checked after {} with problems", unchecked_shards, kMaxProblemShards));
  return out;
}

bool StepReport::intact() const { return committed && !shards.empty() && problems().empty(); }

std::optional<std::uint64_t> latest_step(const std::string& directory) {
  try {
    return format::parse_latest(Dir::open(directory).read_small(format::kLatestName, format::kMaxLatestBytes));
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::vector<StepReport> inspect(const std::string& directory, const InspectOptions& options) {
  const Dir root = Dir::open(directory);
  auto say = [&](const std::string& m) {
    if (options.progress) options.progress(m);
  };
  std::unique_ptr<std::uint8_t[]> piece;  // checking reads through one reused 1 MiB piece
  std::vector<StepReport> reports;
  for (std::uint64_t step : format::list_steps(root)) {
    if (options.step && *options.step != step) continue;
    StepReport r;
    r.step = step;
    std::string why;
    auto dir = root.sub(format::step_dir_name(step), &why);
    if (!dir) {  // replaced since it was listed
      r.problem = why;
      reports.push_back(std::move(r));
      continue;
    }
    r.committed = dir->exists(format::kManifestName);
    format::Manifest manifest;
    r.problem = format::read_manifest(*dir, step, manifest);
    if (!r.problem.empty()) {
      reports.push_back(std::move(r));
      continue;
    }
    r.world_size = manifest.world_size;
    r.metadata = manifest.metadata;
    r.data_checked = options.check_data;
    std::map<std::string, std::uint64_t> fingerprints;  // per tensor, summed over the chunks read
    for (const auto& t : manifest.tensors) {
      std::uint64_t elements = 0;
      for (const auto& c : t.chunks) elements += *geometry::volume(c.shape);
      r.tensors.push_back({t.name, t.dtype, t.global_shape, t.chunks.size(), elements * size_of(parse_dtype(t.dtype)), {}});
    }
    std::size_t problem_shards = 0;
    for (const auto& record : manifest.shards) {
      if (problem_shards >= kMaxProblemShards) {
        ++r.unchecked_shards;
        continue;
      }
      ShardReport s;
      s.rank = record.rank;
      s.file = record.file;
      s.bytes = record.bytes;
      format::ShardReader reader;
      s.problem = reader.open(*dir, manifest, record);
      bool bad = !s.problem.empty();
      for (const auto& e : reader.entries()) {
        EntryReport er{e.name, e.kind, e.dtype, e.shape, e.bytes, e.replicated, e.sharded.has_value(), {}};
        if (s.problem.empty() && options.check_data) {
          if (!piece) piece = std::make_unique<std::uint8_t[]>(format::ShardReader::kPiece);
          if (e.sharded) {  // its share of the tensor's fingerprint, from the same reads
            const layout::ChunkBytes map(*e.sharded, e.shape, size_of(parse_dtype(e.dtype)));
            const fingerprint::Powers powers(fingerprint::point_for(e.name));
            std::uint64_t& sum = fingerprints[e.name];
            er.problem = reader.read_verified(e, piece.get(), true, [&](std::uint64_t at, const std::uint8_t* p, std::size_t n) {
              sum = fingerprint::add(sum, map.fingerprint_terms(powers, at, p, n));
            });
          } else {
            er.problem = reader.read_verified(e, piece.get(), true);
          }
          bad = bad || !er.problem.empty();
        }
        s.entries.push_back(std::move(er));
      }
      if (options.check_data && s.problem.empty())
        say(fmt::format("step {}: {} checked ({} entries, {} bytes)", step, reader.name(), s.entries.size(), s.bytes));
      problem_shards += bad ? 1 : 0;
      r.shards.push_back(std::move(s));
    }
    // Content against the saved fingerprint, when every chunk was read whole.
    if (options.check_data && problem_shards == 0 && r.unchecked_shards == 0)
      for (std::size_t i = 0; i < r.tensors.size(); ++i)
        if (layout::hex(fingerprints[r.tensors[i].name]) != manifest.tensors[i].fingerprint)
          r.tensors[i].problem = fmt::format("tensor '{}': its chunks do not match its fingerprint (saved {}, read {})",
                                             r.tensors[i].name, manifest.tensors[i].fingerprint,
                                             layout::hex(fingerprints[r.tensors[i].name]));
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace trainrt::checkpoint
