#include "synthetic_topology.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <stdexcept>

#include "../common/temp_dir.hpp"

namespace trainrt::testing {
namespace {

std::string mask(const std::set<unsigned>& bits) {
  if (bits.empty()) return "0x0";
  unsigned words = *bits.rbegin() / 32 + 1;
  std::string out;
  for (unsigned w = words; w-- > 0;) {
    std::uint32_t v = 0;
    for (unsigned b = 0; b < 32; ++b)
      if (bits.count(w * 32 + b)) v |= 1u << b;
    out += fmt::format("{}0x{:08x}", out.empty() ? "" : ",", v);
  }
  return out;
}

struct Writer {
  std::string out;
  unsigned gp = 1;
  unsigned bridge_bus = 0x100;  // made-up buses for switch bridges: never clash with device ids

  std::string sets(const std::set<unsigned>& cpus, const std::set<unsigned>& nodes) {
    return fmt::format("cpuset=\"{0}\" complete_cpuset=\"{0}\" nodeset=\"{1}\" complete_nodeset=\"{1}\"", mask(cpus),
                       mask(nodes));
  }

  void nic(const SynthNic& n, const std::string& indent) {
    out += fmt::format("{}<object type=\"PCIDev\" gp_index=\"{}\" pci_busid=\"{}\" pci_type=\"{:04x} [{:04x}:{:04x}] [{:04x}:0000] 00\" pci_link_speed=\"24.6\">\n",
                       indent, gp++, n.busid, n.class_id, n.vendor, n.device, n.vendor);
    if (!n.rdma_name.empty()) {
      out += fmt::format("{}  <object type=\"OSDev\" gp_index=\"{}\" name=\"{}\" osdev_type=\"3\">\n", indent, gp++, n.rdma_name);
      for (unsigned p = 1; p <= n.ports; ++p) out += fmt::format("{}    <info name=\"Port{}State\" value=\"4\"/>\n", indent, p);
      out += indent + "  </object>\n";
    }
    if (!n.netdev.empty())
      out += fmt::format("{}  <object type=\"OSDev\" gp_index=\"{}\" name=\"{}\" osdev_type=\"2\"/>\n", indent, gp++, n.netdev);
    out += indent + "</object>\n";
  }

  void gpu(const std::string& busid, const std::string& indent) {
    out += fmt::format("{}<object type=\"PCIDev\" gp_index=\"{}\" pci_busid=\"{}\" pci_type=\"0302 [10de:20b0] [10de:0000] 00\" pci_link_speed=\"24.6\"/>\n",
                       indent, gp++, busid);
  }

  void downstream(const std::string& indent, const std::function<void(const std::string&)>& body) {
    unsigned bus = bridge_bus++;
    out += fmt::format("{}<object type=\"Bridge\" gp_index=\"{}\" bridge_type=\"1-1\" depth=\"2\" bridge_pci=\"0000:[00-00]\" pci_busid=\"0000:{:02x}:{:02x}.0\" pci_type=\"0604 [1000:c010] [0000:0000] 00\" pci_link_speed=\"0.0\">\n",
                       indent, gp++, (bus >> 5) & 0xff, bus & 0x1f);
    body(indent + "  ");
    out += indent + "</object>\n";
  }

  void host_bridge(const SynthHostBridge& hb, const std::string& indent) {
    out += fmt::format("{}<object type=\"Bridge\" gp_index=\"{}\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[00-ff]\">\n", indent, gp++);
    for (const auto& sw : hb.switches) {
      unsigned bus = bridge_bus++;
      std::string in2 = indent + "  ";
      out += fmt::format("{}<object type=\"Bridge\" gp_index=\"{}\" bridge_type=\"1-1\" depth=\"1\" bridge_pci=\"0000:[00-00]\" pci_busid=\"0000:{:02x}:{:02x}.0\" pci_type=\"0604 [1000:c010] [0000:0000] 00\" pci_link_speed=\"0.0\">\n",
                         in2, gp++, (bus >> 5) & 0xff, bus & 0x1f);
      for (const auto& g : sw.gpus) downstream(in2 + "  ", [&](const std::string& in) { gpu(g, in); });
      for (const auto& n : sw.nics) downstream(in2 + "  ", [&](const std::string& in) { nic(n, in); });
      out += in2 + "</object>\n";
    }
    out += indent + "</object>\n";
  }
};

}  // namespace

std::string temp_dir(const std::string& name) {
  // One mkdtemp root per test program, removed when it exits: the named folders inside stay apart
  // from another run's and are emptied on each call.
  static const testing::TempDir root("trainrt-test-");
  const std::string dir = root / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string write_hwloc_xml(const SynthNode& node, const std::string& name) {
  unsigned total_cores = 0, numa_count = 0;
  for (const auto& p : node.packages)
    for (const auto& n : p.numas) total_cores += n.cores, ++numa_count;
  auto pus_of_core = [&](unsigned core) {
    std::set<unsigned> s;
    for (unsigned t = 0; t < node.threads_per_core; ++t) s.insert(core + t * total_cores);
    return s;
  };

  Writer w;
  std::set<unsigned> all_cpus, all_nodes;
  for (unsigned c = 0; c < total_cores; ++c)
    for (unsigned pu : pus_of_core(c)) all_cpus.insert(pu);
  for (unsigned n = 0; n < numa_count; ++n) all_nodes.insert(n);

  w.out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n";
  w.out += fmt::format("  <object type=\"Machine\" os_index=\"0\" {} allowed_cpuset=\"{}\" allowed_nodeset=\"{}\" gp_index=\"{}\">\n",
                       w.sets(all_cpus, all_nodes), mask(all_cpus), mask(all_nodes), w.gp++);
  w.out += fmt::format("    <info name=\"HostName\" value=\"{}\"/>\n", node.hostname);
  unsigned core = 0, numa = 0;
  for (unsigned p = 0; p < node.packages.size(); ++p) {
    std::set<unsigned> pkg_cpus, pkg_nodes;
    unsigned c0 = core, n0 = numa;
    for (const auto& n : node.packages[p].numas) {
      for (unsigned c = 0; c < n.cores; ++c)
        for (unsigned pu : pus_of_core(c0++)) pkg_cpus.insert(pu);
      pkg_nodes.insert(n0++);
    }
    w.out += fmt::format("    <object type=\"Package\" os_index=\"{}\" {} gp_index=\"{}\">\n", p, w.sets(pkg_cpus, pkg_nodes), w.gp++);
    for (const auto& n : node.packages[p].numas) {
      std::set<unsigned> cpus;
      for (unsigned c = core; c < core + n.cores; ++c)
        for (unsigned pu : pus_of_core(c)) cpus.insert(pu);
      std::string s = w.sets(cpus, {numa});
      w.out += fmt::format("      <object type=\"Group\" {} gp_index=\"{}\" kind=\"1001\" subkind=\"0\">\n", s, w.gp++);
      w.out += fmt::format("        <object type=\"NUMANode\" os_index=\"{}\" {} gp_index=\"{}\" local_memory=\"68719476736\"/>\n", numa, s, w.gp++);
      for (unsigned c = core; c < core + n.cores; ++c) {
        w.out += fmt::format("        <object type=\"Core\" os_index=\"{}\" {} gp_index=\"{}\">\n", c, w.sets(pus_of_core(c), {numa}), w.gp++);
        for (unsigned pu : pus_of_core(c))
          w.out += fmt::format("          <object type=\"PU\" os_index=\"{}\" {} gp_index=\"{}\"/>\n", pu, w.sets({pu}, {numa}), w.gp++);
        w.out += "        </object>\n";
      }
      for (const auto& hb : n.bridges) w.host_bridge(hb, "        ");
      w.out += "      </object>\n";
      core += n.cores;
      ++numa;
    }
    w.out += "    </object>\n";
  }
  w.out += "  </object>\n</topology>\n";

  std::string path = temp_dir("xml-" + name) + "/" + name + ".xml";
  std::ofstream f(path);
  f << w.out;
  if (!f) throw std::runtime_error("cannot write " + path);
  return path;
}

}  // namespace trainrt::testing
