// trainrt-ckpt export: one sharded tensor of a step, from the chunks of whatever world size saved
// it, as a NumPy .npy file; read in 1 MiB pieces, each chunk checked against its checksum and the
// whole against the tensor's fingerprint before the file appears under its name.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "files.hpp"
#include "fingerprint.hpp"
#include "layout.hpp"
#include "shard_format.hpp"
#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/error.hpp"
#include "trainrt/fd.hpp"

namespace trainrt::checkpoint {
namespace {

// NumPy's format, version 1.0: magic, header length, a Python dict literal padded to 64 bytes.
std::string npy_header(const format::TensorRecord& t) {
  const DType dtype = parse_dtype(t.dtype);
  const char* descr = dtype == DType::F32 ? "<f4" : dtype == DType::F64 ? "<f8" : dtype == DType::F16 ? "<f2"
                      : dtype == DType::I32 ? "<i4" : dtype == DType::I64 ? "<i8" : "<u2";  // bf16: its bits
  std::string shape = fmt::format("{}", fmt::join(t.global_shape, ", "));
  if (t.global_shape.size() == 1) shape += ',';  // a Python tuple of one: (3,)
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, shape);
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

void write_at(int fd, const void* data, std::size_t n, std::uint64_t at, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw Error(fmt::format("cannot write: {}", std::strerror(errno)), path);
    p += w, n -= static_cast<std::size_t>(w), at += static_cast<std::uint64_t>(w);
  }
}

// The output's temporary name: created new (never through a link or over anything), and removed
// on every way out unless the export completed.
struct Temporary {
  std::string path;
  Fd fd;
  bool keep = false;
  explicit Temporary(const std::string& output) : path(fmt::format("{}.tmp.{}", output, ::getpid())) {
    fd = Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) throw Error(fmt::format("cannot create {}: {}", path, std::strerror(errno)), "export");
  }
  ~Temporary() {
    if (!keep) ::unlink(path.c_str());
  }
};

}  // namespace

std::uint64_t export_tensor(const std::string& directory, const std::string& name, std::optional<std::uint64_t> step,
                            const std::string& output, const std::function<void(const std::string&)>& progress) {
  struct stat st {};
  if (::lstat(output.c_str(), &st) == 0) throw UsageError("exists; remove it or name another file", output);
  const Dir root = Dir::open(directory);
  format::Manifest manifest;
  std::optional<Dir> dir;
  std::string last_problem = "no committed step";
  for (std::uint64_t s : format::list_steps(root)) {
    if (step && *step != s) continue;
    std::string why;
    dir = root.sub(format::step_dir_name(s), &why);
    if (dir && (why = format::read_manifest(*dir, s, manifest)).empty() && manifest.tensor(name)) break;
    last_problem = why.empty() ? fmt::format("step {} has no sharded tensor '{}'", s, name) : fmt::format("step {}: {}", s, why);
    dir.reset();
    if (step) break;
  }
  if (!dir)
    throw CheckpointError(
        step ? last_problem : fmt::format("no committed step holds a sharded tensor '{}' ({})", name, last_problem),
        directory);
  const format::TensorRecord& t = *manifest.tensor(name);
  const std::size_t es = size_of(parse_dtype(t.dtype));
  const std::string header = npy_header(t);
  const std::uint64_t total = *geometry::volume(t.global_shape) * es;
  Temporary tmp(output);
  if (::ftruncate(tmp.fd.get(), static_cast<off_t>(header.size() + total)) != 0)
    throw Error(fmt::format("cannot size to {} bytes: {}", header.size() + total, std::strerror(errno)), tmp.path);
  write_at(tmp.fd.get(), header.data(), header.size(), 0, tmp.path);
  const fingerprint::Powers powers(fingerprint::point_for(name));
  std::uint64_t sum = 0;
  auto piece = std::make_unique<std::uint8_t[]>(format::ShardReader::kPiece);
  for (const auto& c : t.chunks) {
    if (*geometry::volume(c.shape) == 0) continue;
    format::ShardReader reader;
    if (std::string why = reader.open(*dir, manifest, *manifest.shard_of(c.rank)); !why.empty())
      throw CheckpointError(why, fmt::format("step {}", manifest.step));
    const format::ShardEntry* e = reader.find(name);
    if (!e || !e->sharded)
      throw CheckpointError(fmt::format("{} lacks its chunk of '{}'", reader.name(), name),
                            fmt::format("step {}", manifest.step));
    const layout::ChunkBytes map(*e->sharded, e->shape, es);
    std::string why = reader.read_verified(*e, piece.get(), true, [&](std::uint64_t at, const std::uint8_t* p, std::size_t n) {
      map.map(at, p, n, [&](std::uint64_t global, const std::uint8_t* q, std::size_t m) {
        write_at(tmp.fd.get(), q, m, header.size() + global, tmp.path);
        sum = fingerprint::add(sum, fingerprint::run(powers, q, m, global));
      });
    });
    if (!why.empty()) throw CheckpointError(why, fmt::format("step {}", manifest.step));
    if (progress) progress(fmt::format("step {}: {} chunk at {} of {} read and checked", manifest.step, reader.name(),
                                       geometry::to_string(c.offsets), geometry::to_string(t.global_shape)));
  }
  if (layout::hex(sum) != t.fingerprint)
    throw CheckpointError(fmt::format("tensor '{}': the chunks do not match its fingerprint (saved {}, read {}); "
                                      "nothing written",
                                      name, t.fingerprint, layout::hex(sum)),
                          fmt::format("step {}", manifest.step));
  if (::fsync(tmp.fd.get()) != 0) throw Error(fmt::format("fsync failed: {}", std::strerror(errno)), tmp.path);
  // link() never replaces: a file that appeared at `output` meanwhile is left alone.
  if (::link(tmp.path.c_str(), output.c_str()) != 0)
    throw Error(fmt::format("cannot create it: {}", std::strerror(errno)), output);
  return manifest.step;
}

}  // namespace trainrt::checkpoint
