#pragma once
// How trainrt-doctor touches a run folder that someone else may write: the folder opened once, each
// rank file opened once relative to it (never following a link, never blocking, a regular file
// checked on the very descriptor that is read), and every read bounded in bytes. Nothing is
// reopened by path, so a file replaced by a FIFO or a link after the listing is refused, not read.
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/fd.hpp"

namespace trainrt::doctor {

// The run folder. open() throws trainrt::Error naming the folder and the errno text (a missing
// folder, "Permission denied", "Not a directory").
class RunDir {
 public:
  static RunDir open(const std::filesystem::path& path);
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  // Entry names (not "." or ".."), at most `max`; `more` says whether entries were left. Throws
  // trainrt::Error with the errno text when the listing fails part way: a partial listing would
  // make present ranks look absent.
  std::vector<std::string> names(std::size_t max, bool& more) const;

 private:
  RunDir(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  Fd fd_;
  std::string path_;
};

// One rank file, opened for reading. Exactly one of: `fd` open (a regular file, `st` its fstat);
// `not_regular` (a FIFO, a link, a directory, a device: what someone put there, said in `why`,
// never opened); `err` (the errno that kept the reader from it, e.g. EACCES, in `why`).
struct RankFile {
  Fd fd;
  struct stat st {};
  bool not_regular = false;
  int err = 0;
  std::string why;
};
RankFile open_rank_file(const RunDir& dir, const std::string& name);

// Buffered reads of [offset, offset + limit) of a descriptor through one 64 KiB buffer: memory does
// not grow with the file. A failed read stops the source and keeps its errno.
class ByteSource {
 public:
  ByteSource(int fd, std::uint64_t offset, std::uint64_t limit);
  // The next byte, or -1 at the end of the file, at the limit, or after a failed read.
  int next() {
    if (pos_ == len_ && !fill()) return -1;
    return static_cast<unsigned char>(buf_[pos_++]);
  }
  bool at_end() { return pos_ == len_ && !fill(); }
  char peek() const { return buf_[pos_]; }  // only after at_end() said false
  void advance() { ++pos_; }
  // The bytes buffered and not yet taken (empty only at the end), for scanning a line at a time.
  std::string_view buffered() {
    if (pos_ == len_ && !fill()) return {};
    return {buf_.get() + pos_, len_ - pos_};
  }
  void take(std::size_t n) { pos_ += n; }
  int error() const { return err_; }
  std::uint64_t consumed() const { return consumed_ - (len_ - pos_); }

 private:
  bool fill();
  int fd_;
  std::uint64_t offset_, left_;
  std::unique_ptr<char[]> buf_;
  std::size_t pos_ = 0, len_ = 0;
  std::uint64_t consumed_ = 0;
  int err_ = 0;
};

// An input iterator over a ByteSource, for nlohmann::json::sax_parse(first, last, ...): the
// document is parsed as it is read, never held whole. A default-constructed one is the end.
class SourceIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = char;

  SourceIterator() = default;
  explicit SourceIterator(ByteSource& s) : s_(&s) {}
  char operator*() const { return s_->peek(); }
  SourceIterator& operator++() {
    s_->advance();
    return *this;
  }
  SourceIterator operator++(int) {
    SourceIterator t = *this;
    ++*this;
    return t;
  }
  friend bool operator==(const SourceIterator& a, const SourceIterator& b) { return a.done() == b.done(); }
  friend bool operator!=(const SourceIterator& a, const SourceIterator& b) { return !(a == b); }

 private:
  bool done() const { return !s_ || s_->at_end(); }
  ByteSource* s_ = nullptr;
};

}  // namespace trainrt::doctor
