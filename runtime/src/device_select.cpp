// Which GPU a rank uses and whether NCCL can run on the ranks' GPUs: pure functions (no CUDA),
// compiled in every build so they are unit-tested on machines without a GPU.
#include <fmt/format.h>

#include <limits>
#include <map>
#include <string_view>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

namespace trainrt {
namespace {

// Entries of CUDA_VISIBLE_DEVICES ("0,1", "GPU-uuid,GPU-uuid", "" = none); unset: -1 (all visible).
int visible_entries(const char* cvd) {
  if (!cvd) return -1;
  std::string_view s(cvd);
  if (s.empty()) return 0;
  int n = 1;
  for (char c : s) n += c == ',';
  return n;
}

}  // namespace

int choose_cuda_device(const char* trainrt_cuda_device, unsigned local_rank, const char* cuda_visible_devices,
                       int device_count) {
  if (trainrt_cuda_device && *trainrt_cuda_device) {
    const int d = parse_number(trainrt_cuda_device, "a device ordinal", 0, std::numeric_limits<int>::max(),
                               "device selection: TRAINRT_CUDA_DEVICE");
    if (d >= device_count)
      throw Error(fmt::format("TRAINRT_CUDA_DEVICE={} but this process sees {} CUDA device(s) (CUDA_VISIBLE_DEVICES={})",
                              d, device_count, cuda_visible_devices ? cuda_visible_devices : "unset"),
                  "device selection");
    return d;
  }
  const int listed = visible_entries(cuda_visible_devices);
  const bool several = listed < 0 ? device_count > 1 : listed > 1;
  if (several && local_rank < static_cast<unsigned>(device_count > 0 ? device_count : 0))
    return static_cast<int>(local_rank);
  return 0;
}

std::optional<std::string> nccl_placement_problem(const std::vector<RankGpu>& ranks) {
  std::vector<unsigned> without;
  std::map<std::pair<std::uint32_t, std::string>, std::vector<unsigned>> users;
  for (const auto& r : ranks) {
    if (r.bus_id.empty())
      without.push_back(r.rank);
    else
      users[{r.node, r.bus_id}].push_back(r.rank);
  }
  std::string why;
  if (!without.empty())
    why = fmt::format("rank(s) {} have no usable CUDA device", fmt::join(without, ","));
  for (const auto& [where, who] : users) {
    if (who.size() < 2) continue;
    why += fmt::format("{}ranks {} share GPU {} on node {}", why.empty() ? "" : "; ", fmt::join(who, ","), where.second,
                       where.first);
  }
  if (why.empty()) return std::nullopt;
  return why;
}

}  // namespace trainrt
