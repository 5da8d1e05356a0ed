// Bad topology inputs: each one is a trainrt::Error naming the file, never a crash and never a
// silent fallback to the live machine.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::topo;

namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("missing, empty and non-regular files are errors naming the path", "[loader]") {
  std::string dir = trainrt::testing::temp_dir("loaders");
  CHECK_THROWS_WITH(load_file(dir + "/nope.xml"), Catch::Contains("nope.xml") && Catch::Contains("cannot open"));
  CHECK_THROWS_WITH(load_hwloc_xml(dir + "/nope.xml"), Catch::Contains("nope.xml"));
  CHECK_THROWS_WITH(load_nccl_xml(dir + "/nope.xml"), Catch::Contains("nope.xml"));
  CHECK_THROWS_WITH(load_file(write_file(dir, "empty.xml", "")), Catch::Contains("empty"));
  CHECK_THROWS_WITH(load_file(dir), Catch::Contains("not a regular file"));
}

TEST_CASE("unreadable files are errors", "[loader]") {
  if (::geteuid() == 0) {
    WARN("SKIPPED: running as root, which reads any file; permission errors cannot be provoked");
    return;
  }
  std::string dir = trainrt::testing::temp_dir("unreadable");
  std::string path = write_file(dir, "locked.xml", "<topology/>");
  std::filesystem::permissions(path, std::filesystem::perms::none);
  CHECK_THROWS_WITH(load_file(path), Catch::Contains("locked.xml"));
}

TEST_CASE("malformed and foreign XML are rejected with the reason", "[loader]") {
  std::string dir = trainrt::testing::temp_dir("malformed");
  CHECK_THROWS_WITH(load_file(write_file(dir, "cut.xml", "<topology version=\"2.0\"><object type=\"Machine\"")),
                    Catch::Contains("cut.xml") && Catch::Contains("malformed XML"));
  CHECK_THROWS_WITH(load_file(write_file(dir, "html.xml", "<html><body/></html>")),
                    Catch::Contains("neither an hwloc"));
  CHECK_THROWS_WITH(load_hwloc_xml(write_file(dir, "bad-hwloc.xml", "<topology><object type=\"Bogus\"/></topology>")),
                    Catch::Contains("bad-hwloc.xml"));
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "nocpu.xml", "<system version=\"1\"></system>")),
                    Catch::Contains("no <cpu>"));
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "aff.xml", "<system version=\"1\"><cpu numaid=\"0\" affinity=\"zz\"/></system>")),
                    Catch::Contains("affinity"));
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "numa.xml", "<system version=\"1\"><cpu numaid=\"x\" affinity=\"ff\"/></system>")),
                    Catch::Contains("numaid"));
  CHECK_THROWS_WITH(load_nccl_xml(write_file(dir, "hwloc-as-nccl.xml", "<topology/>")), Catch::Contains("no <system>"));
  CHECK_THROWS_WITH(
      load_nccl_xml(write_file(dir, "busid.xml",
                               "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\"><pci busid=\"zz\" class=\"0x030200\"/></cpu></system>")),
      Catch::Contains("busid"));
  // Numbers are whole and within their range (trainrt/number.hpp): what strtoul and sscanf let
  // through (a tail, a space, a bus beyond 0xff, a function beyond 7) is refused, naming it.
  auto gpu = [&](const char* name, const std::string& busid, const std::string& vendor) {
    return load_nccl_xml(write_file(dir, name,
                                    "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ff\"><pci busid=\"" + busid +
                                        "\" class=\"0x030200\" vendor=\"" + vendor + "\"/></cpu></system>"));
  };
  CHECK_THROWS_WITH(gpu("vendor.xml", "0000:01:00.0", "0x10dezz"), Catch::Contains("vendor: '10dezz' is not a hexadecimal"));
  for (const char* bad : {"0000:100:00.0", "0000:01:20.0", "0000:01:00.8", " 0000:01:00.0", "0000:01:00.0x", "1:2:3:4.0"}) {
    INFO(bad);
    CHECK_THROWS_WITH(gpu("bus.xml", bad, "0x10de"), Catch::Contains("bad busid"));
  }
  CHECK(gpu("upper.xml", "0000:B1:00.0", "0x10DE").gpus.at(0).busid == "0000:b1:00.0");
  CHECK(gpu("vmd.xml", "10000:01:00.0", "0x10de").gpus.at(0).busid == "10000:01:00.0");
  CHECK(gpu("short.xml", "01:00.0", "0x10de").gpus.at(0).busid == "0000:01:00.0");
}

TEST_CASE("a node without GPUs loads: it is the caller who decides whether that is an error", "[loader]") {
  trainrt::testing::SynthNode n;
  n.packages = {{{{2, {}}}}};
  Node node = load_hwloc_xml(trainrt::testing::write_hwloc_xml(n, "no-gpus"));
  CHECK(node.gpus.empty());
  CHECK(node.cores.size() == 2);
  CHECK(node.hostname == "synth");
}

TEST_CASE("the live machine loads", "[loader]") {
  Node node = load_live();
  CHECK(node.source == "live");
  CHECK_FALSE(node.cores.empty());
  CHECK(node.all_cpus.count() >= node.cores.size());
}
