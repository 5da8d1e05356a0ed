// Hostile topology inputs: every size, count and depth a file or a CPU list controls is
// bounded before it is used, and each excess is a trainrt::Error naming the input, never a crash,
// a hang or an allocation the input sized. hostile_main.cpp runs these under an 8 MiB stack and a
// 1 GiB address-space limit; CTest adds a timeout.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/cpuset.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::topo;
using trainrt::testing::temp_dir;

namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string repeat(const std::string& s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

// An NCCL file whose one <cpu> holds `inner`.
std::string nccl(const std::string& inner, const std::string& affinity = "0000000f") {
  return "<system version=\"1\"><cpu numaid=\"0\" affinity=\"" + affinity + "\">" + inner + "</cpu></system>";
}

std::string gpu_pci(const std::string& busid) {
  return "<pci busid=\"" + busid + "\" class=\"0x030200\" vendor=\"0x10de\" device=\"0x20b0\"/>";
}

// A valid small hwloc XML (one package, 4 cores, a GPU) to make hostile variants of.
std::string base_hwloc_xml() {
  trainrt::testing::SynthNode n;
  n.packages = {{{{4, {{{{{"0000:03:00.0"}, {}}}}}}}}};
  return read_file(trainrt::testing::write_hwloc_xml(n, "hostile-base"));
}

std::string replace_first(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

template <typename F>
double seconds(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("cpu lists: indexes and ranges are capped at 16384 CPUs", "[hostile][cpuset]") {
  CHECK_THROWS_WITH(CpuSet::parse_list("0-4000000000"), Catch::Contains("largest supported index 16383"));
  CHECK_THROWS_AS(CpuSet::parse_list("16384"), trainrt::Error);
  CHECK_THROWS_AS(CpuSet::parse_list("18446744073709551616"), trainrt::Error);
  CHECK_THROWS_AS(CpuSet::range(0, 4000000000u), trainrt::Error);
  CHECK(CpuSet::parse_list("0-16383").count() == 16384);
  CHECK(CpuSet::range(5, 4).empty());
  CHECK(CpuSet::parse_list("3-130").to_list() == "3-130");  // the word-at-a-time fill is exact
  CHECK(CpuSet::parse_list("63-64").to_list() == "63-64");
  // A megabyte of full ranges costs one word operation per 64 CPUs each, not one per CPU.
  std::string many = repeat("0-16383,", CpuSet::kMaxListText / 8 - 1) + "0";
  CHECK(seconds([&] { CHECK(CpuSet::parse_list(many).count() == 16384); }) < 10.0);
  CHECK_THROWS_WITH(CpuSet::parse_list(std::string(CpuSet::kMaxListText + 1, '1')), Catch::Contains("longer than"));
}

TEST_CASE("cpu masks: width and text length are capped", "[hostile][cpuset]") {
  CHECK(CpuSet::parse_hex_mask("0x80000000" + repeat(",", CpuSet::kMaxMaskWords - 1)).first() == 16383);
  CHECK_THROWS_WITH(CpuSet::parse_hex_mask("0x1" + repeat(",", CpuSet::kMaxMaskWords)), Catch::Contains("words"));
  CHECK_THROWS_WITH(CpuSet::parse_hex_mask(std::string(50'000'000, ',')), Catch::Contains("longer than"));
  CHECK_THROWS_AS(CpuSet::parse_hex_mask("0xffffffffff"), trainrt::Error);
}

TEST_CASE("an NCCL file nested 100000 deep is a clean error", "[hostile][nccl]") {
  std::string dir = temp_dir("hostile-deep-nccl");
  const std::size_t depth = 100000;
  std::string path = write_file(dir, "deep.xml",
                                nccl(repeat("<pci busid=\"0000:01:00.0\">", depth) + repeat("</pci>", depth)));
  CHECK_THROWS_WITH(load_nccl_xml(path), Catch::Contains("deep.xml") && Catch::Contains("nested more than 128"));
  CHECK_THROWS_WITH(load_file(path), Catch::Contains("nested more than 128"));
}

TEST_CASE("nesting within the cap loads, walked without recursion", "[hostile][nccl]") {
  std::string dir = temp_dir("hostile-nested-ok");
  const std::size_t bridges = 120;  // + <system>, <cpu> and the GPU: 123 levels
  std::string text;
  for (std::size_t i = 0; i < bridges; ++i) {
    char busid[32];
    std::snprintf(busid, sizeof busid, "0000:%02zx:00.0", i + 1);
    text += std::string("<pci busid=\"") + busid + "\" class=\"0x060400\">";
  }
  text += gpu_pci("0000:f0:00.0") + repeat("</pci>", bridges);
  Node node = load_nccl_xml(write_file(dir, "nested.xml", nccl(text)));
  REQUIRE(node.gpus.size() == 1);
  CHECK(node.gpus[0].busid == "0000:f0:00.0");
  CHECK(node.pci.size() == bridges + 2);  // the <cpu>'s host bridge, the bridges, the GPU
  // Parents come before children and each names its parent.
  for (std::size_t i = 1; i < node.pci.size(); ++i) CHECK(node.pci[i].parent == static_cast<int>(i) - 1);
}

TEST_CASE("an hwloc file nested 100000 deep is refused before hwloc (whose import recurses) sees it",
          "[hostile][hwloc]") {
  std::string dir = temp_dir("hostile-deep-hwloc");
  const std::size_t depth = 100000;
  std::string group = "<object type=\"Group\" cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\">";
  std::string text = replace_first(base_hwloc_xml(), "<info name=\"HostName\"",
                                   repeat(group, depth) + repeat("</object>", depth) + "<info name=\"HostName\"");
  std::string path = write_file(dir, "deep.xml", text);
  CHECK_THROWS_WITH(load_hwloc_xml(path), Catch::Contains("deep.xml") && Catch::Contains("nested more than 128"));
  CHECK_THROWS_WITH(load_file(path), Catch::Contains("nested more than 128"));
}

TEST_CASE("NCCL numaid, affinity and device counts are bounded", "[hostile][nccl]") {
  std::string dir = temp_dir("hostile-nccl-counts");
  auto cpu = [](const std::string& numaid, const std::string& affinity) {
    return "<cpu numaid=\"" + numaid + "\" affinity=\"" + affinity + "\"/>";
  };
  auto sys = [](const std::string& inner) { return "<system version=\"1\">" + inner + "</system>"; };
  for (const char* numaid : {"4294967296", "99999999999999999999", "-1", "1024", "0x1", ""}) {
    INFO(numaid);
    CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "numa.xml", sys(cpu(numaid, "f")))), Catch::Contains("numaid"));
  }
  CHECK(load_nccl_xml(write_file(dir, "numa-ok.xml", sys(cpu("1023", "f")))).numa_nodes.at(0).os_index == 1023);
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "wide.xml", sys(cpu("0", "1" + repeat(",", CpuSet::kMaxMaskWords))))),
                    Catch::Contains("affinity") && Catch::Contains("words"));
  // One PU claimed by two NUMA nodes would multiply the cores a file can make.
  std::string all = "ffffffff" + repeat(",ffffffff", CpuSet::kMaxMaskWords - 1);
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "overlap.xml", sys(cpu("0", all) + cpu("1", all)))),
                    Catch::Contains("overlaps"));
  CHECK(load_nccl_xml(write_file(dir, "all.xml", sys(cpu("0", all)))).cores.size() == CpuSet::kMaxCpus);

  std::string gpus;
  for (unsigned i = 0; i < 1100; ++i) {
    char busid[32];
    std::snprintf(busid, sizeof busid, "%04x:01:00.0", i);
    gpus += gpu_pci(busid);
  }
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "gpus.xml", nccl(gpus))),
                    Catch::Contains("gpus.xml") && Catch::Contains("more than 1024 GPUs"));
}

TEST_CASE("hwloc bitmaps, distance matrices and os indexes are bounded before hwloc allocates",
          "[hostile][hwloc]") {
  std::string dir = temp_dir("hostile-hwloc-sizes");
  const std::string base = base_hwloc_xml();
  REQUIRE(load_hwloc_xml(write_file(dir, "base.xml", base)).gpus.size() == 1);

  std::string wide = replace_first(base, "complete_cpuset=\"", "complete_cpuset=\"0x1" + repeat(",", 600));
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "wide.xml", wide)), Catch::Contains("complete_cpuset is 601 words"));
  std::string wide_nodes = replace_first(base, " nodeset=\"", " nodeset=\"0x1" + repeat(",", 40) + "0x0");
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "nodes.xml", wide_nodes)), Catch::Contains("nodeset is"));

  for (const char* nbobjs : {"4294967295", "-1", "1025", "65536"}) {
    INFO(nbobjs);
    std::string dist = replace_first(base, "</topology>",
                                     std::string("<distances2 type=\"NUMANode\" nbobjs=\"") + nbobjs +
                                         "\" kind=\"5\" indexing=\"os\"><indexes length=\"2\">0 </indexes>"
                                         "<u64values length=\"3\">10 </u64values></distances2></topology>");
    CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "dist.xml", dist)), Catch::Contains("nbobjs"));
  }
  std::string v1 = replace_first(base, "<info name=\"HostName\"",
                                 "<distances nbobjs=\"100000\" relative_depth=\"1\" latency_base=\"10\"/><info name=\"HostName\"");
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "v1dist.xml", v1)), Catch::Contains("nbobjs"));

  std::string pu = replace_first(base, "type=\"PU\" os_index=\"0\"", "type=\"PU\" os_index=\"4000000000\"");
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "pu.xml", pu)), Catch::Contains("PU os_index"));
  std::string numa = replace_first(base, "type=\"NUMANode\" os_index=\"0\"", "type=\"NUMANode\" os_index=\"70000\"");
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "numa.xml", numa)), Catch::Contains("NUMANode os_index"));

  std::string attr = replace_first(base, "<info name=\"HostName\" value=\"synth\"",
                                   "<info name=\"HostName\" value=\"" + std::string(70'000, 'a') + "\"");
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "attr.xml", attr)), Catch::Contains("longer than 65536 bytes"));
}

TEST_CASE("oversized, non-regular, binary and markup-heavy files are refused without being parsed",
          "[hostile][file]") {
  std::string dir = temp_dir("hostile-files");
  // A sparse 17 MiB file: refused on its size, not read.
  std::string big = dir + "/big.xml";
  { std::ofstream(big) << "<system/>"; }
  std::filesystem::resize_file(big, 17u << 20);
  CHECK_THROWS_WITH(load_file(big), Catch::Contains("big.xml") && Catch::Contains("MiB limit"));
  // A FIFO with no writer would block a plain open forever.
  std::string fifo = dir + "/fifo.xml";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(load_file(fifo), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(load_hwloc_xml("/dev/zero"), Catch::Contains("not a regular file"));
  CHECK_THROWS_WITH(load_file(write_file(dir, "nul.xml", std::string("<system>\0</system>", 18))),
                    Catch::Contains("NUL byte"));
  CHECK_THROWS_WITH(load_file(write_file(dir, "tags.xml", "<system>" + repeat("<a/>", 600'000) + "</system>")),
                    Catch::Contains("tags"));
}

TEST_CASE("a DOCTYPE defining entities is refused, while hwloc's own external DOCTYPE is fine", "[hostile][file]") {
  std::string dir = temp_dir("hostile-doctype");
  std::string laughs =
      "<?xml version=\"1.0\"?><!DOCTYPE topology [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
      "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]><topology version=\"2.0\"><object type=\"Machine\">"
      "<info name=\"HostName\" value=\"&c;\"/></object></topology>";
  CHECK_THROWS_WITH(load_file(write_file(dir, "laughs.xml", laughs)), Catch::Contains("DOCTYPE"));
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "laughs2.xml", laughs)), Catch::Contains("DOCTYPE"));
  REQUIRE(base_hwloc_xml().find("<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">") != std::string::npos);
  CHECK(load_file(write_file(dir, "plain.xml", base_hwloc_xml())).cores.size() == 4);
}

TEST_CASE("live discovery refuses an environment that would make hwloc read another source", "[hostile][live]") {
  std::string dir = temp_dir("hostile-env");
  std::string xml = write_file(dir, "elsewhere.xml", base_hwloc_xml());
  for (const char* var : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_CPUID_PATH"}) {
    INFO(var);
    ::setenv(var, xml.c_str(), 1);
    CHECK_THROWS_WITH(load_live(), Catch::Contains(var) && Catch::Contains("live topology"));
    ::unsetenv(var);
  }
  // With HWLOC_COMPONENTS set too (hwloc then ignores HWLOC_XMLFILE, but linux still reads
  // HWLOC_FSROOT): still refused.
  ::setenv("HWLOC_COMPONENTS", "linux", 1);
  ::setenv("HWLOC_FSROOT", dir.c_str(), 1);
  CHECK_THROWS_WITH(load_live(), Catch::Contains("HWLOC_FSROOT"));
  ::unsetenv("HWLOC_FSROOT");
  // HWLOC_COMPONENTS cannot bring back a component the loader blacklists, nor switch to a file
  // through the xml component: live discovery still reads this machine (live_socket_probe checks
  // that it opens no socket).
  ::setenv("HWLOC_COMPONENTS", "gl,opencl,xml,synthetic", 1);
  Node node = load_live();
  ::unsetenv("HWLOC_COMPONENTS");
  CHECK(node.source == "live");
  CHECK(node.hostname != "synth");
  CHECK_FALSE(node.cores.empty());
}
