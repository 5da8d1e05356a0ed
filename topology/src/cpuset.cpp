#include "trainrt/topology/cpuset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <optional>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::topo {
namespace {

constexpr unsigned kMaxCpu = CpuSet::kMaxCpus;

// Error messages quote the input; a megabyte of it would not help anyone.
std::string_view quoted(std::string_view text) { return text.size() > 80 ? text.substr(0, 80) : text; }

unsigned parse_cpu_number(std::string_view token, std::string_view whole) {
  const std::optional<unsigned> number = to_number<unsigned>(token);
  if (!number) throw Error(fmt::format("'{}' is not a CPU number", token), fmt::format("cpu list '{}'", quoted(whole)));
  const unsigned value = *number;
  if (value >= kMaxCpu)
    throw Error(fmt::format("CPU {} is beyond the largest supported index {}", value, kMaxCpu - 1),
                fmt::format("cpu list '{}'", quoted(whole)));
  return value;
}

}  // namespace

CpuSet CpuSet::range(unsigned first, unsigned last) {
  CpuSet s;
  if (last < first) return s;
  if (last >= kMaxCpu)
    throw UsageError(fmt::format("CPU {} is beyond the largest supported index {}", last, kMaxCpu - 1));
  s.set_range(first, last);
  return s;
}

CpuSet CpuSet::parse_list(std::string_view text) {
  CpuSet s;
  if (text.empty()) throw Error("empty CPU list", "cpu list");
  if (text.size() > kMaxListText)
    throw Error(fmt::format("{} bytes is longer than the {} a list of every supported CPU needs", text.size(),
                            kMaxListText),
                fmt::format("cpu list '{}...'", quoted(text)));
  for (std::string_view item : split(text, ',')) {
    std::size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      s.set(parse_cpu_number(item, text));
    } else {
      unsigned lo = parse_cpu_number(item.substr(0, dash), text);
      unsigned hi = parse_cpu_number(item.substr(dash + 1), text);
      if (hi < lo)
        throw Error(fmt::format("range '{}' runs backwards", item), fmt::format("cpu list '{}'", quoted(text)));
      s.set_range(lo, hi);  // both below kMaxCpu: at most kMaxCpu / 64 word operations
    }
  }
  return s;
}

CpuSet CpuSet::parse_hex_mask(std::string_view text) {
  // Bound the text before splitting it: a word is at most "0x" + 8 digits + ",".
  if (text.size() > kMaxMaskWords * 11)
    throw Error(fmt::format("{} bytes is longer than a mask of the {} supported CPUs", text.size(), kMaxCpu),
                fmt::format("cpu mask '{}...'", quoted(text)));
  const std::vector<std::string_view> parts = split(text, ',');
  if (parts.size() > kMaxMaskWords)
    throw Error(fmt::format("{} words is more than the {} that hold the {} supported CPUs", parts.size(),
                            kMaxMaskWords, kMaxCpu),
                fmt::format("cpu mask '{}...'", quoted(text)));
  CpuSet s;
  unsigned word_index = 0;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it, ++word_index) {
    std::string_view w = *it;
    if (w.starts_with("0x") || w.starts_with("0X")) w.remove_prefix(2);
    if (w.empty()) continue;
    // hwloc writes an infinite set as 0xf...f,...; anything longer than a 32-bit word is malformed.
    if (w.size() > 8) throw Error(fmt::format("word '{}' is wider than 32 bits", *it), fmt::format("cpu mask '{}'", quoted(text)));
    const std::optional<std::uint32_t> word = to_number<std::uint32_t>(w, 0, 0xffffffff, 16);
    if (!word) throw Error(fmt::format("'{}' is not hexadecimal", *it), fmt::format("cpu mask '{}'", quoted(text)));
    const std::uint32_t value = *word;
    for (unsigned b = 0; b < 32; ++b)
      if (value & (1u << b)) s.set(word_index * 32 + b);
  }
  return s;
}

void CpuSet::set_range(unsigned first, unsigned last) {
  if (last < first) return;
  if (last >= kMaxCpu)
    throw UsageError(fmt::format("CPU {} is beyond the largest supported index {}", last, kMaxCpu - 1));
  const std::size_t lo_w = first / 64, hi_w = last / 64;
  if (words_.size() <= hi_w) words_.resize(hi_w + 1, 0);
  for (std::size_t w = lo_w; w <= hi_w; ++w) {
    std::uint64_t mask = ~std::uint64_t{0};
    if (w == lo_w) mask &= ~std::uint64_t{0} << (first % 64);
    if (w == hi_w) mask &= ~std::uint64_t{0} >> (63 - last % 64);
    words_[w] |= mask;
  }
}

void CpuSet::set(unsigned cpu) {
  if (cpu >= kMaxCpu)
    throw UsageError(fmt::format("CPU {} is beyond the largest supported index {}", cpu, kMaxCpu - 1));
  std::size_t w = cpu / 64;
  if (words_.size() <= w) words_.resize(w + 1, 0);
  words_[w] |= std::uint64_t{1} << (cpu % 64);
}

void CpuSet::reset(unsigned cpu) {
  std::size_t w = cpu / 64;
  if (w < words_.size()) words_[w] &= ~(std::uint64_t{1} << (cpu % 64));
  trim();
}

bool CpuSet::test(unsigned cpu) const {
  std::size_t w = cpu / 64;
  return w < words_.size() && (words_[w] >> (cpu % 64)) & 1u;
}

bool CpuSet::empty() const { return words_.empty(); }

unsigned CpuSet::count() const {
  unsigned n = 0;
  for (auto w : words_) n += static_cast<unsigned>(std::popcount(w));
  return n;
}

std::vector<unsigned> CpuSet::members() const {
  std::vector<unsigned> out;
  for (std::size_t w = 0; w < words_.size(); ++w) {
    std::uint64_t bits = words_[w];
    while (bits) {
      int b = std::countr_zero(bits);
      out.push_back(static_cast<unsigned>(w * 64 + b));
      bits &= bits - 1;
    }
  }
  return out;
}

int CpuSet::first() const {
  for (std::size_t w = 0; w < words_.size(); ++w)
    if (words_[w]) return static_cast<int>(w * 64 + std::countr_zero(words_[w]));
  return -1;
}

int CpuSet::last() const {
  if (words_.empty()) return -1;
  std::size_t w = words_.size() - 1;
  return static_cast<int>(w * 64 + 63 - std::countl_zero(words_[w]));
}

bool CpuSet::intersects(const CpuSet& o) const {
  std::size_t n = std::min(words_.size(), o.words_.size());
  for (std::size_t i = 0; i < n; ++i)
    if (words_[i] & o.words_[i]) return true;
  return false;
}

bool CpuSet::is_subset_of(const CpuSet& o) const {
  for (std::size_t i = 0; i < words_.size(); ++i) {
    std::uint64_t other = i < o.words_.size() ? o.words_[i] : 0;
    if (words_[i] & ~other) return false;
  }
  return true;
}

CpuSet CpuSet::operator&(const CpuSet& o) const {
  CpuSet r;
  r.words_.resize(std::min(words_.size(), o.words_.size()));
  for (std::size_t i = 0; i < r.words_.size(); ++i) r.words_[i] = words_[i] & o.words_[i];
  r.trim();
  return r;
}

CpuSet CpuSet::operator|(const CpuSet& o) const {
  CpuSet r = *this;
  r |= o;
  return r;
}

CpuSet& CpuSet::operator|=(const CpuSet& o) {
  if (words_.size() < o.words_.size()) words_.resize(o.words_.size(), 0);
  for (std::size_t i = 0; i < o.words_.size(); ++i) words_[i] |= o.words_[i];
  return *this;
}

CpuSet CpuSet::operator-(const CpuSet& o) const {
  CpuSet r = *this;
  for (std::size_t i = 0; i < r.words_.size() && i < o.words_.size(); ++i) r.words_[i] &= ~o.words_[i];
  r.trim();
  return r;
}

bool CpuSet::operator==(const CpuSet& o) const { return words_ == o.words_; }

std::string CpuSet::to_list() const {
  std::string out;
  auto m = members();
  for (std::size_t i = 0; i < m.size();) {
    std::size_t j = i;
    while (j + 1 < m.size() && m[j + 1] == m[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", m[i]) : fmt::format("{}-{}", m[i], m[j]);
    i = j + 1;
  }
  return out;
}

std::string CpuSet::to_hex_mask() const {
  if (words_.empty()) return "0x0";
  std::string out = fmt::format("0x{:x}", words_.back());
  for (std::size_t i = words_.size() - 1; i-- > 0;) out += fmt::format("{:016x}", words_[i]);
  return out;
}

void CpuSet::trim() {
  while (!words_.empty() && words_.back() == 0) words_.pop_back();
}

}  // namespace trainrt::topo
