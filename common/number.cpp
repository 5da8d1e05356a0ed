#include "trainrt/number.hpp"

#include <fmt/format.h>

#include "trainrt/error.hpp"
#include "trainrt/printable.hpp"

namespace trainrt::detail {

void throw_not_a_number(std::string_view text, std::string_view what, std::string_view context, bool out_of_range,
                        const std::string& min, const std::string& max) {
  constexpr std::size_t kQuoted = 64;  // enough to recognise the value; a megabyte helps nobody
  std::string quoted = printable_line(text.substr(0, kQuoted), Backslash::hex);
  if (text.size() > kQuoted) quoted += "...";
  if (out_of_range)
    throw Error(fmt::format("'{}' is out of range: {} from {} to {}", quoted, what, min, max), std::string(context));
  throw Error(fmt::format("'{}' is not {}", quoted, what), std::string(context));
}

}  // namespace trainrt::detail
