// The topology cache's byte format. Version 1:
//   "TRTOPOC\n" | u32 version | stamp | node | u64 FNV-1a of every byte before it
// Integers are little-endian with explicit widths; a string is u32 length + bytes; a list is u32
// count + items; a CpuSet is a list of inclusive u32 ranges. The reader bounds every length and
// count before using it (the caps of node_builder.hpp), checks every index against its list,
// rejects trailing bytes, and then holds the Node to every invariant the loaders' Nodes hold
// (check_node), so a corrupt or forged file is an error, never a strange Node.
#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/cache.hpp"

namespace trainrt::topo {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'T', 'O', 'P', 'O', 'C', '\n'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxString = 4096;  // host names, bus ids, models, paths (stricter than kMaxNodeString)
constexpr std::uint32_t kMaxPackages = kMaxNumaNodes;

class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v) { le(v, 2); }
  void u32(std::uint32_t v) { le(v, 4); }
  void u64(std::uint64_t v) { le(v, 8); }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
  void str(const std::string& s) {
    count(s.size());
    out_.append(s);
  }
  void count(std::size_t n) { u32(static_cast<std::uint32_t>(n)); }
  void cpus(const CpuSet& set) {
    std::vector<std::pair<unsigned, unsigned>> ranges;
    for (unsigned c : set.members()) {
      if (!ranges.empty() && ranges.back().second + 1 == c)
        ranges.back().second = c;
      else
        ranges.emplace_back(c, c);
    }
    count(ranges.size());
    for (auto [a, b] : ranges) u32(a), u32(b);
  }
  void indexes(const std::vector<unsigned>& v) {
    count(v.size());
    for (unsigned x : v) u32(x);
  }
  std::string& bytes() { return out_; }

 private:
  void le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

class Reader {
 public:
  Reader(std::string_view in, const std::string& context) : in_(in), context_(context) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("corrupt topology cache at byte {}: {}", pos_, what), context_);
  }
  std::uint64_t le(int n) {
    if (in_.size() - pos_ < static_cast<std::size_t>(n)) fail("truncated");
    std::uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    pos_ += static_cast<std::size_t>(n);
    return v;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(le(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(le(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(le(4)); }
  std::uint64_t u64() { return le(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  // A signed index in [lo, hi).
  int index(std::int64_t lo, std::int64_t hi, const char* what) {
    const auto v = static_cast<std::int32_t>(u32());
    if (v < lo || v >= hi) fail(fmt::format("{} {} is outside [{}, {})", what, v, lo, hi));
    return v;
  }
  std::uint32_t count(std::uint32_t cap, const char* what) {
    std::uint32_t n = u32();
    if (n > cap) fail(fmt::format("{} {} is more than the {} allowed", what, n, cap));
    return n;
  }
  std::string str(const char* what) {
    std::uint32_t n = count(kMaxString, what);
    if (in_.size() - pos_ < n) fail("truncated");
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  CpuSet cpus() {
    CpuSet set;
    std::uint32_t n = count(CpuSet::kMaxCpus, "CPU ranges");
    std::int64_t prev = -2;
    for (std::uint32_t i = 0; i < n; ++i) {
      std::uint32_t a = u32(), b = u32();
      // Ascending, disjoint, non-adjacent ranges below kMaxCpus: exactly what the writer makes.
      if (a > b || b >= CpuSet::kMaxCpus || static_cast<std::int64_t>(a) <= prev + 1)
        fail(fmt::format("bad CPU range {}-{}", a, b));
      set |= CpuSet::range(a, b);
      prev = b;
    }
    return set;
  }
  std::vector<unsigned> numa_list() {
    std::vector<unsigned> v(count(kMaxNumaNodes, "NUMA list length"));
    for (auto& x : v) x = static_cast<unsigned>(index(0, kMaxNumaNodes, "NUMA os index"));
    return v;
  }
  // A one-byte enum value in [0, max].
  std::uint8_t small(std::uint8_t max, const char* what) {
    std::uint8_t b = u8();
    if (b > max) fail(fmt::format("{} {} is not a known value", what, b));
    return b;
  }
  bool flag() {
    std::uint8_t b = u8();
    if (b > 1) fail("bad boolean");
    return b == 1;
  }
  std::size_t pos() const { return pos_; }
  std::size_t left() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  const std::string& context_;
  std::size_t pos_ = 0;
};

void put_stamp(Writer& w, const CacheStamp& s) {
  w.str(s.boot_id), w.str(s.hwloc_version), w.u64(s.devices_hash), w.u32(s.devices_count);
  w.str(s.source), w.u64(s.file_dev), w.u64(s.file_ino), w.u64(s.file_size);
  w.i64(s.file_mtime_ns), w.i64(s.file_ctime_ns), w.u64(s.file_hash);
}

CacheStamp get_stamp(Reader& r) {
  CacheStamp s;
  s.boot_id = r.str("boot id length");
  s.hwloc_version = r.str("hwloc version length");
  s.devices_hash = r.u64();
  s.devices_count = r.u32();
  s.source = r.str("source length");
  s.file_dev = r.u64(), s.file_ino = r.u64(), s.file_size = r.u64();
  s.file_mtime_ns = r.i64(), s.file_ctime_ns = r.i64(), s.file_hash = r.u64();
  return s;
}

void put_node(Writer& w, const Node& n) {
  w.str(n.hostname), w.str(n.source), w.u8(n.cores_are_pus ? 1 : 0);
  w.count(n.packages.size());
  for (const auto& p : n.packages) w.u32(p.os_index), w.cpus(p.cpus);
  w.count(n.numa_nodes.size());
  for (const auto& m : n.numa_nodes) w.u32(m.os_index), w.cpus(m.cpus), w.u64(m.memory_bytes), w.i32(m.package);
  w.count(n.cores.size());
  for (const auto& c : n.cores) w.u32(c.os_index), w.cpus(c.pus), w.i32(c.numa), w.i32(c.package);
  w.count(n.pci.size());
  for (const auto& p : n.pci) {
    w.u8(static_cast<std::uint8_t>(p.kind)), w.i32(p.parent), w.str(p.busid);
    w.u16(p.vendor), w.u16(p.device), w.u16(p.class_id), w.indexes(p.numa), w.i32(p.package);
  }
  w.count(n.gpus.size());
  for (const auto& g : n.gpus) {
    w.u32(g.index), w.str(g.busid), w.u16(g.vendor), w.u16(g.device), w.str(g.model);
    w.str(g.cuda_name), w.str(g.nvml_name), w.str(g.uuid), w.i32(g.pci), w.indexes(g.numa), w.cpus(g.local_cpus);
  }
  w.count(n.nics.size());
  for (const auto& c : n.nics) {
    w.u32(c.index), w.str(c.busid), w.u16(c.vendor), w.u16(c.device), w.u16(c.class_id), w.str(c.model);
    w.u8(static_cast<std::uint8_t>(c.link)), w.str(c.rdma_name);
    w.count(c.netdevs.size());
    for (const auto& d : c.netdevs) w.str(d);
    w.count(c.ports.size());
    for (const auto& p : c.ports) w.u32(p.number), w.i32(p.state);
    w.u8(c.rdma ? 1 : 0), w.u8(c.pcie_gbytes_s ? 1 : 0);
    w.u64(std::bit_cast<std::uint64_t>(c.pcie_gbytes_s.value_or(0.0)));
    w.i32(c.pci), w.indexes(c.numa), w.cpus(c.local_cpus);
  }
  w.cpus(n.all_cpus);
}

Node get_node(Reader& r) {
  Node n;
  n.hostname = r.str("host name length");
  n.source = r.str("source length");
  n.cores_are_pus = r.flag();
  n.packages.resize(r.count(kMaxPackages, "packages"));
  // Package and core os indexes are labels (hwloc's "unknown" is 2^32-1); a reference to a package
  // is one of them or -1, which check_node holds it to.
  for (auto& p : n.packages) p.os_index = r.u32(), p.cpus = r.cpus();
  n.numa_nodes.resize(r.count(kMaxNumaNodes, "NUMA nodes"));
  for (auto& m : n.numa_nodes) {
    m.os_index = static_cast<unsigned>(r.index(0, kMaxNumaNodes, "NUMA os index"));
    m.cpus = r.cpus(), m.memory_bytes = r.u64(), m.package = r.i32();
  }
  n.cores.resize(r.count(CpuSet::kMaxCpus, "cores"));
  for (auto& c : n.cores) {
    c.os_index = r.u32();
    c.pus = r.cpus(), c.numa = r.index(-1, kMaxNumaNodes, "core NUMA"), c.package = r.i32();
  }
  n.pci.resize(r.count(kMaxPciNodes, "PCI vertices"));
  const int npci = static_cast<int>(n.pci.size());
  for (int i = 0; i < npci; ++i) {
    auto& p = n.pci[static_cast<std::size_t>(i)];
    p.kind = static_cast<PciKind>(r.small(2, "PCI kind"));
    // A parent comes before its child (both loaders add parents first): no cycle can be forged.
    p.parent = r.index(-1, i, "PCI parent");
    p.busid = r.str("bus id length");
    p.vendor = r.u16(), p.device = r.u16(), p.class_id = r.u16();
    p.numa = r.numa_list();
    p.package = r.i32();
  }
  n.gpus.resize(r.count(kMaxGpus, "GPUs"));
  for (std::size_t i = 0; i < n.gpus.size(); ++i) {
    auto& g = n.gpus[i];
    g.index = static_cast<unsigned>(r.index(static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1, "GPU index"));
    g.busid = r.str("bus id length"), g.vendor = r.u16(), g.device = r.u16(), g.model = r.str("model length");
    g.cuda_name = r.str("name length"), g.nvml_name = r.str("name length"), g.uuid = r.str("uuid length");
    g.pci = r.index(-1, npci, "GPU PCI vertex"), g.numa = r.numa_list(), g.local_cpus = r.cpus();
  }
  n.nics.resize(r.count(kMaxNics, "NICs"));
  for (std::size_t i = 0; i < n.nics.size(); ++i) {
    auto& c = n.nics[i];
    c.index = static_cast<unsigned>(r.index(static_cast<std::int64_t>(i), static_cast<std::int64_t>(i) + 1, "NIC index"));
    c.busid = r.str("bus id length"), c.vendor = r.u16(), c.device = r.u16(), c.class_id = r.u16();
    c.model = r.str("model length");
    c.link = static_cast<LinkLayer>(r.small(3, "link layer"));
    c.rdma_name = r.str("name length");
    c.netdevs.resize(r.count(kMaxNetdevs, "network interfaces"));
    for (auto& d : c.netdevs) d = r.str("name length");
    c.ports.resize(r.count(kMaxPorts, "ports"));
    for (auto& p : c.ports)
      p.number = static_cast<unsigned>(r.index(0, 1 << 16, "port number")), p.state = r.index(-1, 1 << 16, "port state");
    c.rdma = r.flag();
    const bool has_speed = r.flag();
    const double speed = std::bit_cast<double>(r.u64());
    if (has_speed) {
      if (!std::isfinite(speed) || speed < 0) r.fail("bad PCIe bandwidth");
      c.pcie_gbytes_s = speed;
    }
    c.pci = r.index(-1, npci, "NIC PCI vertex"), c.numa = r.numa_list(), c.local_cpus = r.cpus();
  }
  n.all_cpus = r.cpus();
  return n;
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed) {
  std::uint64_t h = seed;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string encode_cache(const CachedNode& cached) {
  Writer w;
  w.bytes().append(kMagic, sizeof kMagic);
  w.u32(kVersion);
  put_stamp(w, cached.stamp);
  put_node(w, cached.node);
  w.u64(fnv1a64(w.bytes()));
  return std::move(w.bytes());
}

CachedNode decode_cache(std::string_view bytes, const std::string& context) {
  if (bytes.size() > kMaxCacheBytes)
    throw Error(fmt::format("topology cache is more than the {} MiB limit", kMaxCacheBytes >> 20), context);
  if (bytes.size() < sizeof kMagic + 4 + 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    throw Error("not a train-runtime topology cache (bad magic)", context);
  Reader r(bytes, context);
  r.le(sizeof kMagic);
  if (std::uint32_t v = r.u32(); v != kVersion)
    throw Error(fmt::format("topology cache format version {}, this build reads {}", v, kVersion), context);
  // The checksum first: a torn or bit-flipped file is reported as such, not as a strange count.
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader tail(bytes.substr(bytes.size() - 8), context);
  if (tail.u64() != fnv1a64(body)) throw Error("topology cache checksum mismatch (truncated or corrupt)", context);
  CachedNode out;
  out.stamp = get_stamp(r);
  out.node = get_node(r);
  if (r.pos() != body.size()) r.fail(fmt::format("{} bytes after the node", body.size() - r.pos()));
  // A valid checksum says the bytes are what a writer wrote, not that a loader made the Node: a
  // forged or buggy cache must not hand placement a node it cannot handle.
  check_node(out.node, context);
  return out;
}

}  // namespace trainrt::topo
