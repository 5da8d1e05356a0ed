#include "trainrt/printable.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace trainrt {
namespace {

// The code point of the valid shortest-form UTF-8 sequence at s[i] and its length; length 0 if none.
std::size_t utf8_at(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  cp = c & (n == 2 ? 0x1f : n == 3 ? 0x0f : 0x07);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  const std::uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// Code points a terminal or an editor acts on instead of showing. The bidirectional ones are
// Unicode's whole Bidi_Control property (PropList.txt): U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069.
bool is_format_control(std::uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0x061c || cp == 0x200e ||
         cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

}  // namespace

std::string printable_line(std::string_view s, Backslash backslash) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [&](std::size_t at, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) out += fmt::format("\\x{:02x}", static_cast<unsigned char>(s[at + k]));
  };
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      if (backslash == Backslash::hex) hex(i, 1);
      else out += backslash == Backslash::doubled ? "\\\\" : "\\";
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (std::uint32_t cp = 0; c >= 0x80) {
      const std::size_t n = utf8_at(s, i, cp);
      if (n == 0) {
        hex(i, 1);  // not UTF-8: one byte at a time
        ++i;
      } else {
        if (is_format_control(cp)) hex(i, n);
        else out.append(s.substr(i, n));
        i += n;
      }
    } else {
      hex(i, 1);
      ++i;
    }
  }
  return out;
}

std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  std::size_t end = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = std::max<std::size_t>(1, utf8_at(s, i, cp));  // a stray byte is its own unit
    if (i + n > max_bytes) break;
    i += n;
    end = i;
  }
  return s.substr(0, end);
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    std::uint32_t cp = 0;
    const std::size_t n = c < 0x80 ? 1 : utf8_at(s, i, cp);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace trainrt
