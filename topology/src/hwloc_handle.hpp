#pragma once
// RAII ownership of an hwloc topology handle.
#include <hwloc.h>

#include <utility>

namespace trainrt::topo {

class HwlocTopology {
 public:
  HwlocTopology() {
    if (hwloc_topology_init(&topo_) != 0) topo_ = nullptr;
  }
  ~HwlocTopology() {
    if (topo_) hwloc_topology_destroy(topo_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  HwlocTopology(HwlocTopology&& o) noexcept : topo_(std::exchange(o.topo_, nullptr)) {}

  hwloc_topology_t get() const { return topo_; }
  explicit operator bool() const { return topo_ != nullptr; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

}  // namespace trainrt::topo
