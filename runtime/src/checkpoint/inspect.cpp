#include "trainrt/checkpoint/inspect.hpp"

#include <dirent.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "files.hpp"
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
  return out;
}

bool StepReport::intact() const { return committed && problems().empty(); }

std::optional<std::uint64_t> latest_step(const std::string& directory) {
  try {
    auto text = read_file(directory + "/latest");
    unsigned long long step = 0;
    if (std::sscanf(std::string(text.begin(), text.end()).c_str(), "step_%llu", &step) == 1) return step;
  } catch (const Error&) {
  }
  return std::nullopt;
}

std::vector<StepReport> inspect(const std::string& directory, const InspectOptions& options) {
  if (DIR* d = ::opendir(directory.c_str())) {
    ::closedir(d);
  } else {
    throw Error(fmt::format("cannot read checkpoint directory: {}", std::strerror(errno)), directory);
  }
  auto say = [&](const std::string& m) {
    if (options.progress) options.progress(m);
  };
  std::unique_ptr<std::uint8_t[]> piece;  // checking reads through one reused 1 MiB piece
  std::vector<StepReport> reports;
  for (std::uint64_t step : format::list_steps(directory)) {
    if (options.step && *options.step != step) continue;
    StepReport r;
    r.step = step;
    const std::string dir = directory + "/" + format::step_dir_name(step);
    format::Manifest manifest;
    r.problem = format::read_manifest(dir, step, manifest);
    r.committed = r.problem.empty();
    if (r.committed) {
      r.world_size = manifest.world_size;
      r.metadata = manifest.metadata;
      r.data_checked = options.check_data;
      for (unsigned rank = 0; rank < manifest.world_size; ++rank)
        if (!manifest.shard_of(rank)) r.problem = fmt::format("the manifest lists no shard for rank {}", rank);
    }
    for (const auto& record : manifest.shards) {
      ShardReport s;
      s.rank = record.rank;
      s.file = record.file;
      s.bytes = record.bytes;
      format::ShardReader reader;
      s.problem = reader.open(dir, record);
      for (const auto& e : reader.entries()) {
        EntryReport er{e.name, e.kind, e.dtype, e.shape, e.bytes, e.replicated, {}};
        if (s.problem.empty() && options.check_data) {
          if (!piece) piece = std::make_unique<std::uint8_t[]>(format::ShardReader::kPiece);
          er.problem = reader.read_verified(e, piece.get(), true);
        }
        s.entries.push_back(std::move(er));
      }
      if (options.check_data && s.problem.empty())
        say(fmt::format("step {}: {} checked ({} entries, {} bytes)", step, reader.name(), s.entries.size(), s.bytes));
      r.shards.push_back(std::move(s));
    }
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace trainrt::checkpoint
