#pragma once
// Telling "could not be read" from "holds something wrong" in a problem text: a tool that answers a
// question about a folder (is this checkpoint intact, can this world shrink) must not take a file it
// was kept from for a file that is absent or damaged. The problem texts that reach the tools carry
// the errno text (checkpoint/inspect.hpp reports problems as text).
#include <cerrno>
#include <cstring>
#include <string_view>

namespace trainrt {

// Whether `problem` says the reader was refused (EACCES, EPERM) or the device failed (EIO).
inline bool reports_access_error(std::string_view problem) {
  for (int e : {EACCES, EPERM, EIO})
    if (problem.find(std::strerror(e)) != std::string_view::npos) return true;
  return false;
}

}  // namespace trainrt
