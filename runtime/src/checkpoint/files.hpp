#pragma once
// Durable file operations for checkpoints: every failure names the path and the errno text.
#include <cstdint>
#include <string>
#include <vector>

namespace trainrt::checkpoint {

// Writes `data` to `path` (created/truncated, mode 0644) and fsyncs it.
void write_file_durably(const std::string& path, const void* data, std::size_t bytes);
// Writes several pieces in order to one file, then fsyncs it.
struct Piece {
  const void* data;
  std::size_t bytes;
};
// Pieces of at least 1 MiB whose address, size and file offset are multiples of kDirectAlign are
// written around the page cache (O_DIRECT) where the filesystem allows it.
constexpr std::size_t kDirectAlign = 4096;
void write_pieces_durably(const std::string& path, const std::vector<Piece>& pieces);
void fsync_directory(const std::string& dir);
// rename() then fsync of the directory that holds `to`.
void rename_durably(const std::string& from, const std::string& to);
std::vector<std::uint8_t> read_file(const std::string& path);
void make_directory(const std::string& path);  // EEXIST is fine

}  // namespace trainrt::checkpoint
