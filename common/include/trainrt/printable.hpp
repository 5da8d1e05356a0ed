#pragma once
// The one escaper for text that came from a file (names, hostnames, metadata values) and is
// printed for a person: it can neither add lines nor drive the terminal.
#include <string>
#include <string_view>

namespace trainrt {

// How a backslash is written: as it is, as \x5c, or doubled (\\). Escaping it keeps "\x41" in the
// input apart from an escaped byte in the output.
enum class Backslash { keep, hex, doubled };

// ASCII printable characters and valid UTF-8 pass; C0 controls (a newline included), DEL, C1
// controls (U+0080..U+009F), the line and paragraph separators, bidirectional marks, overrides and
// isolates, the byte-order mark, and every byte that is not part of valid shortest-form UTF-8 are
// written as \xNN, one per byte.
std::string printable_line(std::string_view s, Backslash backslash);

}  // namespace trainrt
