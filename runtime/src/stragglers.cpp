#include "trainrt/runtime/stragglers.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "trainrt/printable.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

namespace {
bool usable(double x) { return std::isfinite(x) && x >= 0; }
}  // namespace

double median_of(std::span<const double> values) {
  std::vector<double> v;
  v.reserve(values.size());
  for (double x : values)
    if (usable(x)) v.push_back(x);
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  if (v.size() % 2) return v[mid];
  const double upper = v[mid];
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

std::vector<Straggler> detect_stragglers(std::span<const double> seconds, std::span<const std::string> nodes,
                                         double threshold, double min_excess_s) {
  std::vector<Straggler> out;
  // Fewer than 3 ranks have no majority to be slower than: with 2, "the median" is their mean.
  std::size_t n = 0;
  for (double x : seconds) n += usable(x);
  if (n < 2 || !std::isfinite(threshold) || threshold < 0) return out;
  const double median = median_of(seconds);
  if (!(median > 0)) return out;
  const double floor_s = std::isfinite(min_excess_s) && min_excess_s > 0 ? min_excess_s : 0;
  for (std::size_t r = 0; r < seconds.size() && r <= UINT_MAX; ++r) {
    const double x = seconds[r];
    if (!usable(x)) continue;
    const double excess = (x - median) / median;
    if (excess > threshold && x - median >= floor_s)
      out.push_back({static_cast<unsigned>(r), r < nodes.size() ? nodes[r] : std::string(), x, excess});
  }
  std::stable_sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) { return a.seconds > b.seconds; });
  return out;
}

std::vector<double> share_step_times(Communicator& comm, double my_seconds) {
  std::vector<double> all(comm.size());
  comm.allgather(&my_seconds, all.data(), 1, DType::F64);
  return all;
}

std::vector<std::string> share_node_names(Communicator& comm, const std::string& my_node) {
  char mine[kNodeNameBytes] = {};
  // Cut on a character boundary: the names end up in metrics JSON and Prometheus labels.
  const std::string_view cut = utf8_prefix(my_node, kNodeNameBytes - 1);
  std::memcpy(mine, cut.data(), cut.size());
  // F64 blocks keep the transfer in a dtype every backend takes; 64 bytes are 8 of them.
  static_assert(kNodeNameBytes % 8 == 0);
  std::vector<char> all(comm.size() * kNodeNameBytes);
  comm.allgather(mine, all.data(), kNodeNameBytes / 8, DType::F64);
  std::vector<std::string> names(comm.size());
  for (unsigned r = 0; r < comm.size(); ++r) {
    const char* p = all.data() + static_cast<std::size_t>(r) * kNodeNameBytes;
    names[r].assign(p, strnlen(p, kNodeNameBytes - 1));
  }
  return names;
}

std::string local_node_name() {
  if (const char* s = std::getenv("SLURMD_NODENAME"); s && *s) return std::string(utf8_prefix(s, kNodeNameBytes - 1));
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

std::string stragglers_metrics_line(std::uint64_t step, double median_s, double threshold,
                                    const std::vector<Straggler>& stragglers) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& s : stragglers)
    ranks.push_back({{"rank", s.rank}, {"node", s.node}, {"seconds", s.seconds}, {"excess", s.excess}});
  nlohmann::json line = {{"event", "stragglers"}, {"step", step}, {"median_s", median_s}, {"threshold", threshold},
                         {"ranks", ranks}};
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string stragglers_log_line(std::uint64_t step, double median_s, double threshold,
                                const std::vector<Straggler>& stragglers) {
  std::string s = fmt::format("step {}: {} straggler(s) above the median {:.3f} ms by >{:.0f}%", step,
                              stragglers.size(), median_s * 1e3, threshold * 100);
  for (std::size_t i = 0; i < stragglers.size(); ++i)
    s += fmt::format("{} rank {} on {} ({:.3f} ms, +{:.0f}%)", i ? "," : ":", stragglers[i].rank,
                     stragglers[i].node.empty() ? "unknown node" : stragglers[i].node, stragglers[i].seconds * 1e3,
                     stragglers[i].excess * 100);
  return s;
}

}  // namespace trainrt
