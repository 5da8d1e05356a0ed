#pragma once
// Strict reading of the JSON in manifests and shard headers: nesting is bounded before parsing,
// and every field is checked for its type and range before it is converted (nlohmann's get<>()
// would wrap -1 into 2^64-1, truncate 2^40 into an unsigned, or convert 1e300 with undefined
// behaviour). Parse errors report the byte offset, never the bytes read (they may be anything).
#include <fmt/format.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace trainrt::checkpoint::format::detail {

using json = nlohmann::json;

// Why a document is unusable; callers turn it into their "why" string.
struct Bad : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Deepest nesting of arrays and objects in `text`, scanning no further than `limit` + 1.
inline unsigned json_depth_exceeds(std::string_view text, unsigned limit) {
  unsigned depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit) return depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return 0;
}

inline json parse_bounded(std::string_view text, unsigned max_depth) {
  if (json_depth_exceeds(text, max_depth)) throw Bad(fmt::format("nested deeper than {} levels", max_depth));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw Bad(fmt::format("not valid JSON (at byte {})", e.byte));
  }
}

inline const json& field(const json& obj, const char* key) {
  if (!obj.is_object()) throw Bad("not a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) throw Bad(fmt::format("lacks \"{}\"", key));
  return *it;
}

inline std::uint64_t u64(const json& obj, const char* key, std::uint64_t max) {
  const json& v = field(obj, key);
  if (!v.is_number_unsigned()) throw Bad(fmt::format("\"{}\" is not a non-negative integer", key));
  const std::uint64_t x = v.get<std::uint64_t>();
  if (x > max) throw Bad(fmt::format("\"{}\" is {}, above the limit of {}", key, x, max));
  return x;
}

inline const std::string& str(const json& obj, const char* key, std::size_t max_bytes) {
  const json& v = field(obj, key);
  if (!v.is_string()) throw Bad(fmt::format("\"{}\" is not a string", key));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes) throw Bad(fmt::format("\"{}\" is longer than {} bytes", key, max_bytes));
  return s;
}

// A list of at most `max_dims` non-negative integers below 2^63 (sizes, offsets).
inline std::vector<std::int64_t> dims(const json& obj, const char* key, std::size_t max_dims) {
  const json& v = field(obj, key);
  if (!v.is_array() || v.size() > max_dims)
    throw Bad(fmt::format("\"{}\" is not a list of at most {} sizes", key, max_dims));
  std::vector<std::int64_t> out;
  for (const auto& d : v) {
    if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      throw Bad(fmt::format("\"{}\" holds a value that is not a non-negative integer", key));
    out.push_back(d.get<std::int64_t>());
  }
  return out;
}

inline bool is_hex16(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// Serialization that cannot throw on bytes that are not UTF-8 (they become U+FFFD).
inline std::string dump_safe(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace trainrt::checkpoint::format::detail
