#include "file_checks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainrt/error.hpp"
#include "trainrt/temp_file.hpp"

namespace trainrt::topo {
namespace {

std::string parent_of(const std::string& path) {
  std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// Root's or ours, and nobody else may write it.
void check_owner_mode(const struct stat& st, const std::string& what, const std::string& path) {
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    throw Error(fmt::format("{} is owned by uid {}, neither root nor this user", what, st.st_uid), path);
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw Error(fmt::format("{} is writable by group or others (mode {:o})", what, st.st_mode & 07777), path);
}

}  // namespace

void check_trusted_directory(const std::string& dir, const char* what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw Error(fmt::format("cannot stat the {} directory: {}", what, std::strerror(errno)), dir);
  if (!S_ISDIR(st.st_mode)) throw Error(fmt::format("the {} directory is not a directory (or is a link)", what), dir);
  check_owner_mode(st, fmt::format("the {} directory", what), dir);
  // Ancestors: whoever may rename one may put another tree in its place. A sticky, group/world-
  // writable ancestor (/tmp) is fine: only its entries' owners (root or us, checked below) may.
  // Links among the ancestors are followed by stat (/run -> /var/run on some systems), each
  // target's owner and mode checked; at most 64 levels.
  std::filesystem::path p = std::filesystem::path(dir).parent_path();
  for (int depth = 0; depth < 64; ++depth) {
    if (::stat(p.c_str(), &st) != 0)
      throw Error(fmt::format("cannot stat an ancestor of the {} directory: {}", what, std::strerror(errno)), p.string());
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      throw Error(fmt::format("an ancestor of the {} directory is owned by uid {}, neither root nor this user", what,
                              st.st_uid),
                  p.string());
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      throw Error(fmt::format("an ancestor of the {} directory is writable by group or others (mode {:o})", what,
                              st.st_mode & 07777),
                  p.string());
    if (!p.has_parent_path() || p.parent_path() == p) return;
    p = p.parent_path();
  }
  throw Error(fmt::format("the {} directory is more than 64 levels deep", what), dir);
}

FileRead read_checked_file(const std::string& path, std::size_t max_bytes, const char* what, bool trusted) {
  if (trusted) {
    if (path.empty() || path.front() != '/') throw Error(fmt::format("the {} path must be absolute", what), path);
    check_trusted_directory(parent_of(path), what);
  }
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; fstat then rejects it.
  // O_NOFOLLOW (trusted): a link is refused, not followed.
  const int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (trusted ? O_NOFOLLOW : 0);
  Fd fd(::open(path.c_str(), flags));
  if (fd.get() < 0) throw Error(fmt::format("cannot open {}: {}", what, std::strerror(errno)), path);
  FileRead out;
  if (::fstat(fd.get(), &out.st) != 0) throw Error(fmt::format("cannot stat {}: {}", what, std::strerror(errno)), path);
  if (!S_ISREG(out.st.st_mode)) throw Error(fmt::format("{} is not a regular file", what), path);
  if (trusted) check_owner_mode(out.st, what, path);
  if (static_cast<std::uint64_t>(out.st.st_size) > max_bytes)
    throw Error(fmt::format("{} is {} bytes, more than the {} MiB limit", what, out.st.st_size, max_bytes >> 20), path);
  // One byte more than fstat said (procfs and sysfs say 0 or 4096), doubling up to one byte past
  // the cap: a file growing under us is caught rather than cut.
  std::string& text = out.bytes;
  text.resize(std::min(static_cast<std::size_t>(out.st.st_size) + 1, max_bytes + 1));
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot read {}: {}", what, std::strerror(errno)), path);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got == text.size() && got <= max_bytes) text.resize(std::min(text.size() * 2, max_bytes + 1));
  }
  if (got > max_bytes)
    throw Error(fmt::format("{} grew beyond the {} MiB limit while being read", what, max_bytes >> 20), path);
  text.resize(got);
  return out;
}

std::string read_topology_file(const std::string& path) {
  FileRead f = read_checked_file(path, kMaxTopologyFileBytes, "topology file", false);
  if (f.bytes.empty()) throw Error("topology file is empty", path);
  return std::move(f.bytes);
}

void write_file_atomic(const std::string& path, const std::string& bytes, const char* what) {
  if (path.empty() || path.front() != '/') throw Error(fmt::format("the {} path must be absolute", what), path);
  const std::string dir = parent_of(path);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(fmt::format("cannot create the {} directory: {}", what, std::strerror(errno)), dir);
  replace_file(path, bytes, 0644, what);
}

void parse_topology_xml(const std::string& text, const std::string& path, pugi::xml_document& doc) {
  if (text.size() > kMaxTopologyFileBytes)
    throw Error(fmt::format("topology text is more than the {} MiB limit", kMaxTopologyFileBytes >> 20), path);
  // XML has no NUL character; pugixml and hwloc's parsers would each stop or not at one differently.
  if (std::size_t nul = text.find('\0'); nul != std::string::npos)
    throw Error(fmt::format("a NUL byte at byte {}: not an XML text file", nul), path);
  const std::size_t markup = static_cast<std::size_t>(std::count(text.begin(), text.end(), '<'));
  if (markup > kMaxXmlMarkup)
    throw Error(fmt::format("{} tags is more than the {} a topology file may hold", markup, kMaxXmlMarkup), path);

  const unsigned options = pugi::parse_default | pugi::parse_doctype;
  pugi::xml_parse_result parsed = doc.load_buffer(text.data(), text.size(), options, pugi::encoding_utf8);
  if (!parsed)
    throw Error(fmt::format("malformed XML at byte {}: {}", parsed.offset, parsed.description()), path);

  for (pugi::xml_node n = doc.first_child(); n; n = n.next_sibling()) {
    // hwloc's exports name an external DTD (<!DOCTYPE topology SYSTEM "hwloc2.dtd">), which no
    // parser here loads. An internal subset could define entities for libxml2 to expand: refused.
    if (n.type() == pugi::node_doctype && std::strchr(n.value(), '['))
      throw Error("a DOCTYPE with an internal subset (entity definitions) is not a topology file", path);
  }

  for_each_element(doc, [&](const pugi::xml_node& el, unsigned depth) {
    if (depth > kMaxXmlDepth)
      throw Error(fmt::format("elements nested more than {} deep (<{}> at depth {})", kMaxXmlDepth,
                              std::string(el.name()).substr(0, 40), depth),
                  path);
    for (auto a : el.attributes()) {
      if (std::strlen(a.value()) > kMaxXmlAttributeBytes)
        throw Error(fmt::format("attribute {} of <{}> is longer than {} bytes", std::string(a.name()).substr(0, 40),
                                std::string(el.name()).substr(0, 40), kMaxXmlAttributeBytes),
                    path);
    }
  });
}

}  // namespace trainrt::topo
