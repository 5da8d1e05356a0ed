// The topology cache's files and staleness: what a step checks before trusting the cached Node,
// and the fallback to a real load when it must not.
#include <dirent.h>
#include <fmt/format.h>
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "file_checks.hpp"
#include "trainrt/error.hpp"
#include "trainrt/small_file.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::topo {
namespace {

class Dir {
 public:
  explicit Dir(const char* path) : d_(::opendir(path)) {}
  ~Dir() {
    if (d_) ::closedir(d_);
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  DIR* get() const { return d_; }

 private:
  DIR* d_;
};

// A small sysfs/procfs text (a boot id, a port state; sysfs device entries are links), or "" when
// it cannot be read.
std::string read_small(const std::string& path) {
  std::string s = read_small_file(path, 128, LastLink::follow).value_or(std::string());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Entry names of a directory, sorted, without . and .. (at most 65536: sysfs lists are far shorter).
std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  Dir d(path.c_str());
  if (!d.get()) return out;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    out.emplace_back(e->d_name);
    if (out.size() >= 65536) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What in sysfs changes the Node without a reboot: PCI devices (hot plug, SR-IOV VFs), the names of
// device-backed network interfaces (a NIC renamed) and RDMA devices with their port states.
void device_set(CacheStamp& s) {
  std::uint64_t h = fnv1a64("devices-v1");
  std::uint32_t n = 0;
  auto add = [&](const std::string& item) {
    h = fnv1a64(item, h);
    h = fnv1a64(std::string_view("\n", 1), h);
    ++n;
  };
  for (const auto& d : list_dir("/sys/bus/pci/devices")) add("pci:" + d);
  // Only interfaces of a device: veths, bridges and tunnels that containers and jobs create come and
  // go all day and are no part of the Node.
  for (const auto& d : list_dir("/sys/class/net"))
    if (::access(("/sys/class/net/" + d + "/device").c_str(), F_OK) == 0) add("net:" + d);
  for (const auto& dev : list_dir("/sys/class/infiniband")) {
    const std::string ports = "/sys/class/infiniband/" + dev + "/ports";
    for (const auto& p : list_dir(ports)) add("ib:" + dev + "/" + p + ":" + read_small(ports + "/" + p + "/state"));
  }
  s.devices_hash = h;
  s.devices_count = n;
}

std::string hwloc_runtime_version() {
  const unsigned v = hwloc_get_api_version();
  return fmt::format("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff);
}

std::int64_t ns(const struct timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec; }

}  // namespace

CacheStamp current_stamp(const std::string& xml_path, bool with_content_hash) {
  CacheStamp s;
  s.boot_id = read_small("/proc/sys/kernel/random/boot_id");
  s.hwloc_version = hwloc_runtime_version();
  if (xml_path.empty()) {
    s.source = "live";
    device_set(s);  // a file's Node does not depend on this machine's devices
    return s;
  }
  s.source = xml_path;
  struct stat st {};
  if (::stat(xml_path.c_str(), &st) != 0)
    throw Error(fmt::format("cannot stat topology file: {}", std::strerror(errno)), xml_path);
  s.file_dev = st.st_dev, s.file_ino = st.st_ino, s.file_size = static_cast<std::uint64_t>(st.st_size);
  s.file_mtime_ns = ns(st.st_mtim), s.file_ctime_ns = ns(st.st_ctim);
  if (with_content_hash) s.file_hash = fnv1a64(read_topology_file(xml_path));
  return s;
}

void check_fresh(const CacheStamp& have, const CacheStamp& want, const std::string& path) {
  auto stale = [&](const char* what) { throw Error(fmt::format("stale topology cache: {} changed", what), path); };
  if (have.source != want.source) throw Error("topology cache describes another source", path);
  if (have.boot_id.empty() || have.boot_id != want.boot_id) stale("the boot id (the machine rebooted)");
  if (have.hwloc_version != want.hwloc_version) stale("the hwloc version");
  if (have.devices_hash != want.devices_hash || have.devices_count != want.devices_count)
    stale("the set of PCI devices, network interfaces or RDMA port states");
  if (have.file_dev != want.file_dev || have.file_ino != want.file_ino || have.file_size != want.file_size ||
      have.file_mtime_ns != want.file_mtime_ns || have.file_ctime_ns != want.file_ctime_ns)
    stale("the topology file");
}

CachedNode read_cache_file(const std::string& path) {
  FileRead f = read_checked_file(path, kMaxCacheBytes, "topology cache", true);
  return decode_cache(f.bytes, path);
}

void write_cache_file(const CachedNode& cached, const std::string& path) {
  write_file_atomic(path, encode_cache(cached), "topology cache");
}

std::string nccl_topo_path(const std::string& cache_path) {
  constexpr std::string_view ext = ".cache";
  std::string_view base(cache_path);
  if (base.ends_with(ext)) base.remove_suffix(ext.size());
  return std::string(base) + ".nccl.xml";
}

void write_nccl_topo_file(const Node& node, const std::string& cache_path) {
  const std::string path = nccl_topo_path(cache_path);
  if (node.gpus.empty()) {
    // No GPU, nothing for NCCL: an old file from before must not outlive the node it described.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw Error(fmt::format("cannot remove an old NCCL topology file: {}", std::strerror(errno)), path);
    return;
  }
  write_file_atomic(path, render_nccl_topology(node), "NCCL topology file");
}

std::string check_nccl_topo_file(const Node& node, const std::string& path) {
  try {
    // NCCL files of real nodes are a few KB; one per GPU and NIC line bounds it far below this.
    constexpr std::size_t kMaxNcclTopoBytes = 4u << 20;
    FileRead f = read_checked_file(path, kMaxNcclTopoBytes, "NCCL topology file", true);
    // Written beside the cache from the same Node: any other content is stale or not ours.
    if (f.bytes != render_nccl_topology(node)) return fmt::format("{}: not the rendering of this node's topology (stale)", path);
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

namespace {

Node load_cached_or(const std::string& xml_path, std::string* note, const std::string& cache_path, bool* used) {
  if (note) note->clear();
  if (used) *used = false;
  if (cache_path.empty()) return xml_path.empty() ? load_live() : load_file(xml_path);  // cache off
  try {
    CachedNode cached = read_cache_file(cache_path);
    check_fresh(cached.stamp, current_stamp(xml_path, false), cache_path);
    if (used) *used = true;
    return std::move(cached.node);
  } catch (const Error& e) {
    // No cache at all is the normal state of a node whose admin did not write one: no note.
    struct stat st {};
    const bool absent = ::lstat(cache_path.c_str(), &st) != 0 && errno == ENOENT;
    if (note && !absent) *note = fmt::format("topology cache not used, discovering instead: {}", e.what());
  }
  return xml_path.empty() ? load_live() : load_file(xml_path);
}

}  // namespace

Node load_cached_or_live(std::string* note, const std::string& cache_path, bool* used) {
  return load_cached_or("", note, cache_path, used);
}

Node load_cached_or_file(const std::string& xml_path, std::string* note, const std::string& cache_path, bool* used) {
  return load_cached_or(xml_path, note, cache_path, used);
}

}  // namespace trainrt::topo
