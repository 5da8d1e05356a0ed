#pragma once
// The doctor's JSON reading without a document: nlohmann's SAX parser (iterative, so nesting costs
// no stack) feeds a handler that keeps only the scalar fields it was asked for, each string cut to
// a cap, hands over the objects of one list (the flight recorder's "ops") one at a time, and keeps
// one list of unsigned numbers (its "failure_ranks") up to a cap. Memory
// is the kept fields plus the parser's current token, whatever the document holds; time is linear
// in its bytes. A duplicated key keeps its last value, as a parsed document would.
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainrt/printable.hpp"

namespace trainrt::doctor {

// One field as read: absent, or a scalar of a kind, or something else (an object, an array, null).
struct Scalar {
  enum class Kind : std::uint8_t { absent, unsigned_int, signed_int, floating, string, boolean, other };
  Kind kind = Kind::absent;
  std::uint64_t u = 0;
  double f = 0;
  std::string s;

  static Scalar of(Kind k, std::uint64_t u = 0, double f = 0) {
    Scalar x;
    x.kind = k, x.u = u, x.f = f;
    return x;
  }
};

// The fields of one object, indexed by their position in the key list given to the reader.
class Fields {
 public:
  static constexpr std::size_t kMax = 16;
  Scalar& at(std::size_t i) { return f_[i]; }
  void clear() {
    for (auto& x : f_) x = Scalar();
  }
  // The typed readers: a field of the wrong type, out of range or not finite reads as absent.
  std::optional<std::uint64_t> u64(std::size_t i) const {
    if (f_[i].kind != Scalar::Kind::unsigned_int) return std::nullopt;
    return f_[i].u;
  }
  std::optional<double> f64(std::size_t i) const {
    const Scalar& x = f_[i];
    double v = 0;
    if (x.kind == Scalar::Kind::unsigned_int) v = static_cast<double>(x.u);
    else if (x.kind == Scalar::Kind::signed_int) v = static_cast<double>(static_cast<std::int64_t>(x.u));
    else if (x.kind == Scalar::Kind::floating) v = x.f;
    else return std::nullopt;
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  }
  std::optional<std::string> str(std::size_t i) const {
    if (f_[i].kind != Scalar::Kind::string) return std::nullopt;
    return f_[i].s;
  }
  bool present(std::size_t i) const { return f_[i].kind != Scalar::Kind::absent; }

 private:
  std::array<Scalar, kMax> f_;
};

// The SAX handler. `keys`: the top-level fields kept. `list_key` (may be empty): a top-level field
// whose array elements are objects; their `item_keys` are kept and each finished element goes to
// `on_item` (a non-object element goes there as std::nullopt). A later `list_key` replaces an
// earlier one: `on_list` is called when one starts. Nesting deeper than `max_depth` stops the parse.
class FieldReader {
 public:
  using string_t = std::string;
  using binary_t = nlohmann::json::binary_t;

  FieldReader(std::vector<std::string_view> keys, std::string_view list_key, std::vector<std::string_view> item_keys,
              unsigned max_depth, std::size_t max_string)
      : keys_(std::move(keys)), list_key_(list_key), item_keys_(std::move(item_keys)), max_depth_(max_depth),
        max_string_(max_string) {}

  std::function<void(const std::optional<Fields>&)> on_item;
  std::function<void()> on_list;

  // A top-level field whose value is a list of unsigned integers, kept up to `max_numbers` (the
  // rest dropped, `numbers_cut` set). Anything else there (another type, a nested value) leaves
  // `numbers_ok` false. A later `numbers_key` replaces an earlier one.
  std::string_view numbers_key;
  std::size_t max_numbers = 64;
  std::vector<std::uint64_t> numbers;
  bool numbers_seen = false, numbers_ok = false, numbers_cut = false;

  // Ready for the next document (one reader serves every line of a metrics file).
  void reset() {
    top.clear();
    top_is_object = list_is_array = false;
    depth_ = 0;
    key_ = item_key_ = -1;
    in_list_key_ = in_list_ = item_open_ = false;
    numbers.clear();
    numbers_seen = numbers_ok = numbers_cut = in_numbers_key_ = in_numbers_ = false;
  }

  Fields top;
  bool top_is_object = false;  // the document is an object (false: an array, a scalar, nothing)
  bool list_is_array = false;  // the last `list_key` value was an array

  // nlohmann's SAX interface.
  bool null() { return scalar(Scalar::of(Scalar::Kind::other)); }
  bool boolean(bool) { return scalar(Scalar::of(Scalar::Kind::boolean)); }
  bool number_integer(std::int64_t v) { return scalar(Scalar::of(Scalar::Kind::signed_int, static_cast<std::uint64_t>(v))); }
  bool number_unsigned(std::uint64_t v) { return scalar(Scalar::of(Scalar::Kind::unsigned_int, v)); }
  bool number_float(double v, const std::string&) { return scalar(Scalar::of(Scalar::Kind::floating, 0, v)); }
  bool string(std::string& v) {
    Scalar x = Scalar::of(Scalar::Kind::string);
    // Cut on a character boundary: a kept name stays valid UTF-8 when it was.
    x.s = v.size() > max_string_ ? std::string(utf8_prefix(v, max_string_)) : std::move(v);
    return scalar(std::move(x));
  }
  bool binary(binary_t&) { return scalar(Scalar::of(Scalar::Kind::other)); }
  bool start_object(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    if (depth_ == 1) {
      key_ = find(keys_, k);
      in_list_key_ = !list_key_.empty() && k == list_key_;
      in_numbers_key_ = !numbers_key.empty() && k == numbers_key;
    } else if (depth_ == 3 && in_list_) {
      item_key_ = find(item_keys_, k);
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  static int find(const std::vector<std::string_view>& keys, const std::string& k) {
    for (std::size_t i = 0; i < keys.size() && i < Fields::kMax; ++i)
      if (keys[i] == k) return static_cast<int>(i);
    return -1;
  }
  // A scalar value at the current place: a kept field, a list element that is not an object, or
  // nothing of interest.
  bool scalar(Scalar x) {
    if (depth_ == 0) return true;  // a document that is a bare scalar: top_is_object stays false
    if (depth_ == 1 && in_numbers_key_) start_numbers(false);
    else if (depth_ == 2 && in_numbers_) number(x);
    else if (depth_ == 1 && !in_list_key_ && key_ >= 0) top.at(static_cast<std::size_t>(key_)) = std::move(x);
    else if (depth_ == 1 && in_list_key_) start_list(false);
    else if (depth_ == 2 && in_list_ && on_item) on_item(std::nullopt);
    else if (depth_ == 3 && in_list_ && item_key_ >= 0) item_.at(static_cast<std::size_t>(item_key_)) = std::move(x);
    return true;
  }
  bool open(bool object) {
    if (depth_ == 0) {
      top_is_object = object;
      if (!object) return false;  // not an object: nothing to read
    } else if (depth_ == 1) {
      if (in_numbers_key_) start_numbers(!object);
      else if (in_list_key_) start_list(!object);
      else if (key_ >= 0) top.at(static_cast<std::size_t>(key_)) = Scalar::of(Scalar::Kind::other);
    } else if (depth_ == 2 && in_numbers_) {
      numbers_ok = false;  // a nested value is no rank
    } else if (depth_ == 2 && in_list_) {
      item_.clear();
      item_key_ = -1;
      if (!object && on_item) on_item(std::nullopt);
    } else if (depth_ == 3 && in_list_ && item_key_ >= 0) {
      item_.at(static_cast<std::size_t>(item_key_)) = Scalar::of(Scalar::Kind::other);
    }
    ++depth_;
    if (depth_ == 3 && in_list_) item_open_ = object;
    return depth_ <= max_depth_;
  }
  bool close() {
    if (depth_ == 3 && in_list_ && item_open_ && on_item) on_item(item_), item_open_ = false;
    if (depth_ == 2 && in_list_) in_list_ = false;
    if (depth_ == 2 && in_numbers_) in_numbers_ = false;
    if (depth_ > 0) --depth_;
    return true;
  }
  void start_numbers(bool array) {
    numbers.clear();
    numbers_seen = true;
    numbers_ok = in_numbers_ = array;
    numbers_cut = false;
  }
  void number(const Scalar& x) {
    if (x.kind != Scalar::Kind::unsigned_int) numbers_ok = false;
    else if (numbers.size() < max_numbers) numbers.push_back(x.u);
    else numbers_cut = true;
  }
  void start_list(bool array) {
    list_is_array = array;
    in_list_ = array;
    if (on_list) on_list();
  }

  std::vector<std::string_view> keys_;
  std::string_view list_key_;
  std::vector<std::string_view> item_keys_;
  unsigned max_depth_;
  std::size_t max_string_;
  unsigned depth_ = 0;
  int key_ = -1, item_key_ = -1;
  bool in_list_key_ = false, in_list_ = false, item_open_ = false;
  bool in_numbers_key_ = false, in_numbers_ = false;
  Fields item_;
};

}  // namespace trainrt::doctor
