#pragma once
// The middle value, or the mean of the two middle ones (as Python's statistics.median, which the
// PyTorch peers use: with an even number of repeats both sides then report the same statistic).
#include <algorithm>
#include <cstddef>
#include <vector>

namespace trainrt::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace trainrt::bench
