#pragma once
// Normally distributed test data, reproducible from a seed.
#include <random>
#include <vector>

namespace trainrt::testing {

inline std::vector<float> random_floats(std::size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace trainrt::testing
