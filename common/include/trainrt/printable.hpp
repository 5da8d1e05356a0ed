#pragma once
// The one escaper for text that came from a file (names, hostnames, metadata values) and is
// printed for a person: it can neither add lines nor drive the terminal.
#include <cstddef>
#include <string>
#include <string_view>

namespace trainrt {

// How a backslash is written: as it is, as \x5c, or doubled (\\). Escaping it keeps "\x41" in the
// input apart from an escaped byte in the output.
enum class Backslash { keep, hex, doubled };

// ASCII printable characters and valid UTF-8 pass; C0 controls (a newline included), DEL, C1
// controls (U+0080..U+009F), the line and paragraph separators, every Bidi_Control code point
// (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), the byte-order mark, and every byte that
// is not part of valid shortest-form UTF-8 are written as \xNN, one per byte.
std::string printable_line(std::string_view s, Backslash backslash);

// The longest prefix of `s` of at most `max_bytes` that does not end inside a valid UTF-8
// sequence: a name cut to fit a field stays valid UTF-8 when it was (a byte that is not UTF-8
// counts as one unit).
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes);

// `s` with every byte that is not part of valid shortest-form UTF-8 replaced by U+FFFD: for formats
// that must be UTF-8 (Prometheus label values) and escape nothing else on their own.
std::string valid_utf8(std::string_view s);

}  // namespace trainrt
