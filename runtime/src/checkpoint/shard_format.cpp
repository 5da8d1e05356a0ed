#include "shard_format.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "files.hpp"
#include "trainrt/error.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint::format {
namespace {

using json = nlohmann::json;

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

}  // namespace

std::string step_dir_name(std::uint64_t step) { return fmt::format("step_{:012}", step); }
std::string shard_name(unsigned rank) { return fmt::format("rank_{:05}.shard", rank); }

std::vector<std::uint64_t> list_steps(const std::string& directory) {
  std::vector<std::uint64_t> steps;
  DIR* d = ::opendir(directory.c_str());
  if (!d) return steps;
  while (dirent* e = ::readdir(d)) {
    unsigned long long s = 0;
    char tail = 0;
    if (std::sscanf(e->d_name, "step_%llu%c", &s, &tail) == 1) steps.push_back(s);
  }
  ::closedir(d);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

const ShardRecord* Manifest::shard_of(unsigned rank) const {
  for (const auto& s : shards)
    if (s.rank == rank) return &s;
  return nullptr;
}

std::string read_manifest(const std::string& step_dir, std::uint64_t step, Manifest& out) {
  try {
    auto m = read_file(step_dir + "/MANIFEST.json");
    json j = json::parse(std::string(m.begin(), m.end()));
    if (j.at("format").get<std::uint32_t>() != kVersion || j.at("step").get<std::uint64_t>() != step)
      return "MANIFEST.json has the wrong format or step";
    out.step = step;
    out.world_size = j.value("world_size", 0u);
    if (j.contains("metadata")) out.metadata = j.at("metadata").get<Metadata>();
    for (const auto& s : j.at("shards"))
      out.shards.push_back({s.at("rank").get<unsigned>(), s.at("file").get<std::string>(),
                            s.at("bytes").get<std::uint64_t>(), s.value("header_xxh3", std::string())});
  } catch (const Error& e) {
    return fmt::format("no committed manifest ({})", e.bare_what());
  } catch (const std::exception& e) {
    return fmt::format("MANIFEST.json is corrupt ({})", e.what());
  }
  return {};
}

bool ShardReader::read_at(void* dst, std::size_t bytes, std::uint64_t offset) const {
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t r = ::pread(fd_.get(), static_cast<char*>(dst) + got, bytes - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

std::string ShardReader::open(const std::string& step_dir, const ShardRecord& record) {
  name_ = shard_name(record.rank);
  entries_.clear();
  const std::string path = step_dir + "/" + name_;
  fd_ = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd_) return fmt::format("{}: cannot open: {}", name_, std::strerror(errno));
  ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead: disk reads overlap hashing
  size_ = static_cast<std::uint64_t>(::lseek(fd_.get(), 0, SEEK_END));
  if (size_ != record.bytes) return fmt::format("{} is {} bytes, the manifest says {}", name_, size_, record.bytes);
  char head[16];
  if (!read_at(head, 16, 0) || std::memcmp(head, kMagic, 8) != 0) return fmt::format("{} has no shard header", name_);
  std::uint32_t len = 0;
  std::memcpy(&len, head + 12, 4);
  if (16 + static_cast<std::uint64_t>(len) > size_) return fmt::format("{} header runs past the file", name_);
  std::string text(len, '\0');
  if (!read_at(text.data(), len, 16)) return fmt::format("{}: cannot read its header", name_);
  // The manifest pins the header (and so every entry's checksum and offset): a header altered
  // into other valid JSON is caught here, before any buffer is touched.
  if (!record.header_xxh3.empty() && fmt::format("{:016x}", XXH3_64bits(text.data(), text.size())) != record.header_xxh3)
    return fmt::format("{} header does not match its checksum in the manifest", name_);
  try {
    json header = json::parse(text);
    const std::uint64_t data_start = align_up(16 + len, kDataAlign);
    for (const auto& e : header.at("entries")) {
      ShardEntry s{e.at("name").get<std::string>(), e.at("kind").get<std::string>(),
                   e.at("dtype").get<std::string>(), e.at("shape").get<std::vector<std::int64_t>>(),
                   data_start + e.at("offset").get<std::uint64_t>(), e.at("bytes").get<std::uint64_t>(),
                   e.at("checksum").get<std::string>(), e.value("replicated", false)};
      if (s.offset + s.bytes > size_) return fmt::format("entry '{}' runs past the end of {}", s.name, name_);
      entries_.push_back(std::move(s));
    }
  } catch (const std::exception& e) {
    return fmt::format("{} header is corrupt ({})", name_, e.what());
  }
  return {};
}

const ShardEntry* ShardReader::find(const std::string& entry_name) const {
  for (const auto& e : entries_)
    if (e.name == entry_name) return &e;
  return nullptr;
}

std::string ShardReader::read_verified(const ShardEntry& entry, std::uint8_t* dst, bool reuse_piece) const {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset(state.get());
  for (std::uint64_t done = 0; done < entry.bytes; done += kPiece) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, entry.bytes - done));
    std::uint8_t* piece = reuse_piece ? dst : dst + done;
    if (!read_at(piece, n, entry.offset + done)) return fmt::format("{}: short read in entry '{}'", name_, entry.name);
    XXH3_64bits_update(state.get(), piece, n);
  }
  if (fmt::format("{:016x}", XXH3_64bits_digest(state.get())) != entry.checksum)
    return fmt::format("entry '{}' in {} fails its checksum", entry.name, name_);
  return {};
}

}  // namespace trainrt::checkpoint::format
