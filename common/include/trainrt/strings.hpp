#pragma once
// Splitting delimited lists ("0-3,8", "kill:1:50", "mlx5_0,mlx5_3"), shared by every parser.
#include <string_view>
#include <vector>

namespace trainrt {

// Every part, empty ones included: "a,,b" -> {"a", "", "b"}, "" -> {""}. The views point into
// `text`. Callers decide whether an empty part is an error or is skipped.
inline std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t at = text.find(sep, pos);
    parts.push_back(text.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos));
    if (at == std::string_view::npos) return parts;
    pos = at + 1;
  }
}

}  // namespace trainrt
