#pragma once
// restore()'s own phases (RestoreReport::phases) over repeated restores: each phase's median, for
// the benchmarks' "restore by phase" lines.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "median.hpp"
#include "trainrt/checkpoint/manager.hpp"

namespace trainrt::bench {

class RestorePhaseMedians {
 public:
  // A step's phases only (a failed candidate's are not pooled with the restored step's).
  void add(const checkpoint::RestoreReport& r) {
    for (const auto& p : r.phases) {
      if (p.step >= 0 && p.step != r.step) continue;
      auto it = std::find_if(by_name_.begin(), by_name_.end(), [&](const auto& q) { return q.first == p.name; });
      if (it == by_name_.end()) it = by_name_.insert(by_name_.end(), {p.name, {}});
      it->second.push_back(p.seconds);
    }
  }
  // "find 0.4 ms, check 0.2 ms, read 612.0 ms, install 0.1 ms", in the order the phases first ran.
  std::string text() const {
    std::string t;
    for (const auto& [name, v] : by_name_) t += fmt::format("{}{} {:.1f} ms", t.empty() ? "" : ", ", name, median(v) * 1e3);
    return t;
  }

 private:
  std::vector<std::pair<std::string, std::vector<double>>> by_name_;
};

}  // namespace trainrt::bench
