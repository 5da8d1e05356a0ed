#pragma once
// The one way train-runtime creates a file under a temporary name in a directory that other people
// may be able to write (a Prometheus textfile folder shared with a group, a topology cache
// directory): nothing planted at the name is ever opened. checkpoint/ has its own equivalent
// (Dir::write_new) for names it chooses itself inside a checkpoint directory.
#include <sys/types.h>

#include <string>
#include <string_view>

#include "trainrt/fd.hpp"

namespace trainrt {

struct TempFile {
  Fd fd;             // open for writing
  std::string name;  // its name inside the directory (no slash)
};

// A new, empty regular file named `<stem>.tmp.<16 random hex digits>` in the directory open as
// `dir_fd`, created with O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC and `mode` (less the
// umask). O_EXCL: whatever exists at the name (a FIFO, a symbolic link, a file) makes the call fail
// with EEXIST instead of being opened, followed or truncated, and the next random name is tried, at
// most 16 of them. The name is unpredictable, so nobody can plant every name in advance. Throws
// trainrt::Error naming `dir_for_messages` and the errno text.
TempFile create_temp_file(int dir_fd, std::string_view stem, mode_t mode, const std::string& dir_for_messages);

// Replaces `path` with `bytes` atomically: its directory opened once (the last component of `path`
// is a name in it, never followed), a create_temp_file() there, fchmod to `mode` whatever the umask,
// write, fsync, close, renameat over the name, fsync of the directory. On any failure the temporary
// is removed and `path` is left as it was. Throws trainrt::Error naming the path, with `what`
// ("Prometheus textfile", "topology cache") in the message.
void replace_file(const std::string& path, std::string_view bytes, mode_t mode, const char* what);

}  // namespace trainrt
