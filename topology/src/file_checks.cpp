#include "file_checks.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt::topo {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string read_topology_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; fstat then rejects it.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw Error(fmt::format("cannot open topology file: {}", std::strerror(errno)), path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw Error(fmt::format("cannot stat topology file: {}", std::strerror(errno)), path);
  if (!S_ISREG(st.st_mode)) throw Error("topology path is not a regular file", path);
  if (st.st_size == 0) throw Error("topology file is empty", path);
  if (static_cast<std::uint64_t>(st.st_size) > kMaxTopologyFileBytes)
    throw Error(fmt::format("topology file is {} bytes, more than the {} MiB limit", st.st_size,
                            kMaxTopologyFileBytes >> 20),
                path);
  // The size may change under us: read at most one byte beyond the cap, whatever fstat said.
  std::string text(static_cast<std::size_t>(st.st_size) + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot read topology file: {}", std::strerror(errno)), path);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got == text.size() && got <= kMaxTopologyFileBytes) text.resize(std::min(text.size() * 2, kMaxTopologyFileBytes + 1));
  }
  if (got > kMaxTopologyFileBytes)
    throw Error(fmt::format("topology file grew beyond the {} MiB limit while being read", kMaxTopologyFileBytes >> 20),
                path);
  text.resize(got);
  if (text.empty()) throw Error("topology file is empty", path);
  return text;
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
