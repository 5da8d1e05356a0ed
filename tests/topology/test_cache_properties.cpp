// The digested topology cache against forged files with valid checksums: the decoder
// accepts exactly the Nodes the loaders make (check_node), and every consumer of a decoded Node
// (placement under each policy, the rail pairing and signature, the table/JSON/env/NCCL renderings)
// finishes without reading past a list, on random loader-like Nodes, on byte-flipped caches that
// still decode, and on valid Nodes built to be expensive (deepest PCI chains, most devices).
// Runs under hostile_main.cpp's 8 MiB stack and 1 GiB address space.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>

#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/env.hpp"
#include "trainrt/topology/placement.hpp"
#include "trainrt/topology/rails.hpp"
#include "trainrt/topology/render.hpp"

using namespace trainrt::topo;

namespace {

using Rng = std::mt19937_64;
unsigned pick(Rng& rng, unsigned lo, unsigned hi) { return std::uniform_int_distribution<unsigned>(lo, hi)(rng); }

struct Builder {
  Node n;
  unsigned bus = 1;

  int add_pci(PciKind kind, int parent, std::uint16_t vendor, std::uint16_t device, std::uint16_t cls, unsigned numa,
              int package) {
    PciNode p;
    p.kind = kind;
    p.parent = parent;
    if (kind != PciKind::HostBridge) p.busid = format_busid(bus / 256, bus % 256, 0, 0), ++bus;
    p.vendor = vendor, p.device = device, p.class_id = cls;
    p.numa = {numa};
    p.package = package;
    n.pci.push_back(p);
    return static_cast<int>(n.pci.size()) - 1;
  }
  void device(Rng& rng, int parent, const NumaNode& m) {
    const unsigned what = pick(rng, 0, 2);
    if (what == 0 && n.gpus.size() < 64) {
      const int v = add_pci(PciKind::Device, parent, 0x10de, 0x2330, 0x0302, m.os_index, m.package);
      n.gpus.push_back(make_gpu(n.pci[static_cast<std::size_t>(v)], v, m.cpus));
    } else if (what == 1 && n.nics.size() < 64) {
      const bool ib = pick(rng, 0, 1) == 1;
      const int v = add_pci(PciKind::Device, parent, 0x15b3, 0x101b, ib ? 0x0207 : 0x0200, m.os_index, m.package);
      Nic c = make_nic(n.pci[static_cast<std::size_t>(v)], v, m.cpus);
      c.rdma = pick(rng, 0, 3) != 0;
      if (c.rdma) {
        c.rdma_name = "mlx5_" + std::to_string(n.nics.size());
        for (unsigned p = 1; p <= pick(rng, 0, 2); ++p) c.ports.push_back({p, 4});
      }
      c.netdevs.push_back("ib" + std::to_string(n.nics.size()));
      n.nics.push_back(std::move(c));
    } else {
      add_pci(PciKind::Device, parent, 0x144d, 0xa808, 0x0108, m.os_index, m.package);  // an NVMe drive
    }
  }
  // Bridges (runs of one vendor:device: one switch) down to `depth`, devices at the leaves.
  void subtree(Rng& rng, int parent, unsigned depth, const NumaNode& m) {
    const std::uint16_t sw = static_cast<std::uint16_t>(pick(rng, 0, 3));
    for (unsigned k = pick(rng, 1, 3); k-- > 0;) {
      if (depth > 1 && pick(rng, 0, 2) != 0) {
        const int b = add_pci(PciKind::Bridge, parent, sw ? 0x1000 : 0, sw, 0x0604, m.os_index, m.package);
        subtree(rng, b, depth - 1, m);
      } else {
        device(rng, parent, m);
      }
    }
  }
};

// A Node like the loaders make, of random shape.
Node random_node(Rng& rng) {
  Builder b;
  b.n.hostname = "random";
  b.n.source = "random";
  b.n.cores_are_pus = pick(rng, 0, 3) == 0;
  const unsigned threads = b.n.cores_are_pus ? 1 : pick(rng, 1, 2);
  unsigned pu = 0, numa_os = 0;
  for (unsigned p = pick(rng, 1, 3), pkg = 0; pkg < p; ++pkg) {
    Package package{pkg, {}};
    for (unsigned m = pick(rng, 1, 3); m-- > 0;) {
      NumaNode numa;
      numa.os_index = numa_os++;
      numa.package = static_cast<int>(pkg);
      for (unsigned c = pick(rng, 0, 6); c-- > 0;) {  // 0: a memory-only NUMA node
        Core core;
        core.os_index = static_cast<unsigned>(b.n.cores.size());
        core.package = static_cast<int>(pkg);
        core.pus = CpuSet::range(pu, pu + threads - 1);
        pu += threads;
        numa.cpus |= core.pus;
        b.n.cores.push_back(core);
      }
      package.cpus |= numa.cpus;
      b.n.numa_nodes.push_back(numa);
    }
    b.n.packages.push_back(package);
  }
  for (const auto& m : std::vector<NumaNode>(b.n.numa_nodes)) {
    for (unsigned h = pick(rng, 0, 2); h-- > 0;) {
      const int host = b.add_pci(PciKind::HostBridge, -1, 0, 0, 0, m.os_index, m.package);
      b.subtree(rng, host, pick(rng, 1, 6), m);
    }
  }
  finalize_node(b.n);
  return b.n;
}

CachedNode cached(const Node& n) { return CachedNode{CacheStamp{"boot", "2.9.0", 1, 2, "live"}, n}; }

// Every consumer of a Node, as a step and trainrt-topo use them. An Error is an answer; a crash,
// a hang or another exception is not.
void consume(const Node& n, Rng& rng) {
  const RailMap rails = pair_rails(n);
  CHECK(rails.gpus.size() == n.gpus.size());
  (void)rail_signature_line("h", n);
  if (!n.nics.empty()) (void)pair_rails(n, RailOptions{{n.nics.front().busid}});
  if (!n.numa_nodes.empty()) (void)render_nccl_topology(n);
  for (Policy policy : {Policy::Rail, Policy::Numa, Policy::None}) {
    for (unsigned tasks : {1u, static_cast<unsigned>(n.gpus.size()) + 1, static_cast<unsigned>(n.cores.size()) * 2 + 1}) {
      PlacementRequest r;
      r.policy = policy;
      r.tasks = std::min(tasks, 512u);
      if (pick(rng, 0, 1) && !n.all_cpus.empty()) {  // a random non-empty subset of the node's CPUs
        CpuSet allowed;
        for (unsigned c : n.all_cpus.members())
          if (pick(rng, 0, 1)) allowed.set(c);
        if (allowed.empty()) allowed.set(static_cast<unsigned>(n.all_cpus.first()));
        r.allowed_cpus = allowed;
      }
      if (pick(rng, 0, 2) == 0) r.tasks_per_gpu = pick(rng, 1, 4);
      try {
        const Placement p = place(n, r);
        for (const auto& t : p.tasks) {
          CHECK(t.cpus.is_subset_of(p.allowed_cpus));
          (void)render_env(n, p, t);
        }
        (void)render_table(n, p);
        (void)render_json(n, p);
        (void)render_env_script(n, p);
      } catch (const trainrt::Error&) {
      }
    }
  }
}

std::string reseal(std::string b) {
  const std::uint64_t h = fnv1a64(std::string_view(b).substr(0, b.size() - 8));
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + static_cast<std::size_t>(i)] = static_cast<char>((h >> (8 * i)) & 0xff);
  return b;
}

}  // namespace

TEST_CASE("properties: random loader-like nodes round-trip and every consumer handles them") {
  Rng rng(31);
  for (int i = 0; i < 150; ++i) {
    const Node n = random_node(rng);
    const CachedNode back = decode_cache(encode_cache(cached(n)), "random");
    REQUIRE(back.node == n);
    consume(back.node, rng);
  }
}

TEST_CASE("properties: byte-flipped caches with a valid checksum are refused or consumable") {
  Rng rng(1031);
  int decoded = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string b = encode_cache(cached(random_node(rng)));
    for (unsigned k = pick(rng, 1, 4); k-- > 0;) {
      const std::size_t at = pick(rng, 12, static_cast<unsigned>(b.size() - 9));
      b[at] = static_cast<char>(pick(rng, 0, 3) == 0 ? b[at] ^ (1 << pick(rng, 0, 7)) : pick(rng, 0, 255));
    }
    try {
      const CachedNode c = decode_cache(reseal(b), "fuzzed");
      ++decoded;
      check_node(c.node, "fuzzed");  // what the decoder accepted holds every invariant
      consume(c.node, rng);
    } catch (const trainrt::Error&) {
    }
  }
  INFO(decoded << " of 1500 flipped caches decoded (names, ids and labels change freely)");
  CHECK(decoded > 0);
}

TEST_CASE("adversarial: structures no loader makes are refused by the decoder") {
  Rng rng(7);
  Node base;
  do base = random_node(rng);
  while (base.gpus.size() < 2 || base.nics.empty() || base.cores.size() < 2);
  using Forge = std::function<void(Node&)>;
  const std::vector<std::pair<const char*, Forge>> forged = {
      {"a CPU in no core", [](Node& n) { n.cores.erase(n.cores.begin()); }},
      {"a CPU of the node outside it", [](Node& n) { n.all_cpus.set(static_cast<unsigned>(n.all_cpus.last()) + 1); }},
      {"two cores sharing a PU", [](Node& n) { n.cores[1].pus |= n.cores[0].pus; }},
      {"a core without PUs", [](Node& n) { n.cores.back().pus = CpuSet(); }},
      {"cores out of order", [](Node& n) { std::swap(n.cores[0], n.cores[1]); }},
      {"a core's NUMA not its PUs'", [](Node& n) { n.cores[0].numa = 1023; }},
      {"a GPU outside the PCI tree", [](Node& n) { n.gpus[0].pci = -1; }},
      {"a NIC outside the PCI tree", [](Node& n) { n.nics[0].pci = -1; }},
      {"two GPUs on one vertex", [](Node& n) { n.gpus[1].pci = n.gpus[0].pci, n.gpus[1].busid = n.gpus[0].busid; }},
      {"a GPU on a host bridge", [](Node& n) { n.gpus[0].pci = 0, n.gpus[0].busid = n.pci[0].busid; }},
      {"a GPU whose bus id is not its vertex's", [](Node& n) { n.gpus[0].busid = "0000:ff:00.0"; }},
      {"a NIC with another link layer", [](Node& n) { n.nics[0].link = LinkLayer::Efa; }},
      {"RDMA ports without RDMA", [](Node& n) { n.nics[0].rdma = false, n.nics[0].ports = {{1, 4}}; }},
      {"a device below a device", [](Node& n) {
         PciNode p = n.pci[static_cast<std::size_t>(n.gpus[0].pci)];
         p.parent = n.gpus[0].pci, p.busid = "0000:fe:00.0";
         n.pci.push_back(p);
       }},
      {"a host bridge below another vertex", [](Node& n) { n.pci.push_back({PciKind::HostBridge, 0, "", 0, 0, 0, {0}, -1}); }},
      {"a PCI list naming a missing NUMA node", [](Node& n) { n.pci[0].numa = {1000}; }},
      {"a package that does not exist", [](Node& n) { n.pci[0].package = 77; }},
      {"a NUMA node renumbered under its cores and devices", [](Node& n) { n.numa_nodes.front().os_index = 900; }},
      {"a GPU at the bottom of a PCI chain 300 deep", [](Node& n) {
         const PciNode gpu = n.pci[static_cast<std::size_t>(n.gpus[0].pci)];
         int parent = gpu.parent;
         for (unsigned k = 0; k < 300; ++k) {
           n.pci.push_back({PciKind::Bridge, parent, format_busid(1, k / 32, k % 32, 0), 0x1000, 1, 0x0604, {gpu.numa}, -1});
           parent = static_cast<int>(n.pci.size()) - 1;
         }
         n.pci.push_back(gpu);
         n.pci.back().parent = parent;
         n.gpus[0].pci = static_cast<int>(n.pci.size()) - 1;
       }},
  };
  for (const auto& [what, forge] : forged) {
    Node n = base;
    forge(n);
    INFO(what);
    CHECK_THROWS_AS(decode_cache(encode_cache(cached(n)), "forged"), trainrt::Error);
  }
  CHECK_NOTHROW(decode_cache(encode_cache(cached(base)), "base"));
}

TEST_CASE("adversarial: a 16000-deep PCI chain with a valid checksum is refused, not walked") {
  Node n;
  n.source = "deep";
  n.numa_nodes.push_back({0, CpuSet::range(0, 0), 0, -1});
  n.cores.push_back({0, CpuSet::range(0, 0), 0, -1});
  n.all_cpus = CpuSet::range(0, 0);
  n.pci.push_back({PciKind::HostBridge, -1, "", 0, 0, 0, {0}, -1});
  for (unsigned k = 0; k < 16000; ++k)
    n.pci.push_back({PciKind::Bridge, static_cast<int>(k), format_busid(k / 256, k % 256, 0, 0), 0x1000, 1, 0x0604, {0}, -1});
  for (unsigned k = 0; k < 64; ++k) {
    const int v = static_cast<int>(n.pci.size());
    n.pci.push_back({PciKind::Device, v - 1 - static_cast<int>(k), format_busid(99, k, 0, 0), 0x10de, 0x2330, 0x0302, {0}, -1});
  }
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(decode_cache(encode_cache(cached(n)), "deep"), Catch::Contains("deeper than 257"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));
}

TEST_CASE("adversarial: the most expensive valid node (1024 GPUs and NICs, 257-deep chains) stays fast") {
  Builder b;
  b.n.source = "expensive";
  NumaNode m{0, CpuSet::range(0, 63), 0, -1};
  for (unsigned c = 0; c < 64; ++c) b.n.cores.push_back({c, CpuSet::range(c, c), -1, -1});
  b.n.numa_nodes.push_back(m);
  int parent = b.add_pci(PciKind::HostBridge, -1, 0, 0, 0, 0, -1);
  for (unsigned k = 1; k < kMaxPciDepth - 1; ++k)  // alternating switches: every level its own switch
    parent = b.add_pci(PciKind::Bridge, parent, 0x1000, static_cast<std::uint16_t>(k % 2), 0x0604, 0, -1);
  for (unsigned k = 0; k < 1024; ++k) {
    int v = b.add_pci(PciKind::Device, parent, 0x10de, 0x2330, 0x0302, 0, -1);
    b.n.gpus.push_back(make_gpu(b.n.pci[static_cast<std::size_t>(v)], v, m.cpus));
    v = b.add_pci(PciKind::Device, parent, 0x15b3, 0x101b, 0x0207, 0, -1);
    Nic c = make_nic(b.n.pci[static_cast<std::size_t>(v)], v, m.cpus);
    c.rdma = true, c.rdma_name = "mlx5_" + std::to_string(k), c.ports = {{1, 4}};
    b.n.nics.push_back(c);
  }
  finalize_node(b.n);
  const CachedNode back = decode_cache(encode_cache(cached(b.n)), "expensive");
  const auto t0 = std::chrono::steady_clock::now();
  const RailMap rails = pair_rails(back.node);
  CHECK(rails.rail_count == 1024);
  CHECK(rails.gpus[5].path == PathClass::PIX);
  CHECK(render_nccl_topology(back.node).size() < (8u << 20));
  PlacementRequest r;
  r.tasks = 1024;
  const Placement p = place(back.node, r);
  CHECK(p.tasks.size() == 1024);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(s << " s for the rail pairing, the NCCL rendering and a 1024-task placement");
  CHECK(s < 20);
}

TEST_CASE("adversarial: consumers handed a bad Node directly give errors, never a read past a list") {
  Node n;
  n.source = "direct";
  n.all_cpus = CpuSet::range(0, 3);  // CPUs that no core holds
  n.numa_nodes.push_back({0, CpuSet::range(0, 3), 0, -1});
  PlacementRequest r;
  r.policy = Policy::Numa;
  r.tasks = 2;
  CHECK_THROWS_AS(place(n, r), trainrt::Error);
  n.pci.push_back({PciKind::Device, -1, "0000:01:00.0", 0x10de, 0x2330, 0x0302, {0}, -1});
  CHECK_THROWS_AS(path_class(n, 0, -1), trainrt::Error);
  CHECK_THROWS_AS(path_class(n, 5, 0), trainrt::Error);
  Gpu g;
  g.pci = 7;
  n.gpus.push_back(g);
  Nic c;
  c.pci = 0;
  n.nics.push_back(c);
  CHECK_THROWS_AS(render_nccl_topology(n), trainrt::Error);
  CHECK_THROWS_AS(pair_rails(n), trainrt::Error);
}
