#pragma once
// The one way numbers are read from text (environment variables, option values, files the kernel
// or a tool wrote): the whole text is the number, in range, or it is an error that quotes it.
// What it replaces would accept "12abc" as 12 (atoi, strtoul), "-1" as the largest value (strtoul),
// "" as 0 (atoi), or throw std::invalid_argument with no word of what was read (std::stoul).
//
// Accepted: digits of `base` only, with a leading '-' for a signed type. No sign on an unsigned
// type, no '+', no whitespace, no "0x" (a caller that allows a prefix strips it first).
#include <charconv>
#include <concepts>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace trainrt {

// The value, or nullopt when `text` is not wholly a number of T in [min, max].
template <std::integral T>
std::optional<T> to_number(std::string_view text, T min = std::numeric_limits<T>::min(),
                           T max = std::numeric_limits<T>::max(), int base = 10) noexcept {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || value < min || value > max)
    return std::nullopt;
  return value;
}

namespace detail {
// Throws parse_number's Error. TEXT is escaped and cut to 64 bytes: it may come from a hostile file.
[[noreturn]] void throw_not_a_number(std::string_view text, std::string_view what, std::string_view context,
                                     bool out_of_range, const std::string& min, const std::string& max);
}  // namespace detail

// The value, or trainrt::Error("CONTEXT: 'TEXT' is not WHAT"), or, for a number outside [min, max]
// (T's own limits included), "CONTEXT: 'TEXT' is out of range: WHAT from MIN to MAX". `what` names
// the kind of number ("a port number", "a CPU number"); `context` the input at fault (a variable,
// a file, an option), as trainrt::Error's context does.
template <std::integral T>
T parse_number(std::string_view text, std::string_view what, T min = std::numeric_limits<T>::min(),
               T max = std::numeric_limits<T>::max(), std::string_view context = {}, int base = 10) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  const bool whole = !text.empty() && end == text.data() + text.size();
  if (whole && ec == std::errc{} && value >= min && value <= max) return value;
  const bool out_of_range = whole && (ec == std::errc::result_out_of_range || ec == std::errc{});
  detail::throw_not_a_number(text, what, context, out_of_range, std::to_string(min), std::to_string(max));
}

}  // namespace trainrt
