// Issue 15: the NCCL topology written beside the digested cache (trusted and fresh only when it is
// the cached Node's own rendering), the cache directory's ancestors, and a cache turned off.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/render.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

SynthNode two_gpu_node() {
  SynthNode n;
  SynthSwitch a{{"0000:03:00.0"}, {{"0000:05:00.0", "mlx5_0", "ib0", 0x0207, 1}}};
  SynthSwitch b{{"0000:83:00.0"}, {{"0000:85:00.0", "mlx5_1", "ib1", 0x0207, 1}}};
  n.packages = {{{{4, {{{a}}}}, {4, {{{b}}}}}}};
  return n;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  REQUIRE(f.good());
}

}  // namespace

TEST_CASE("the NCCL topology beside the cache: its path, written, checked against the node", "[cache][nccl_topo]") {
  CHECK(nccl_topo_path("/run/train-runtime/topology.cache") == "/run/train-runtime/topology.nccl.xml");
  CHECK(nccl_topo_path("/var/lib/trt/node.bin") == "/var/lib/trt/node.bin.nccl.xml");

  const std::string dir = temp_dir("nccl-topo-file");
  const std::string cache = dir + "/topology.cache";
  const std::string xml = write_hwloc_xml(two_gpu_node(), "nccl-topo-file");
  Node node = load_file(xml);
  REQUIRE(node.gpus.size() == 2);
  write_nccl_topo_file(node, cache);
  const std::string path = nccl_topo_path(cache);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(check_nccl_topo_file(node, path).empty());
  // NCCL reads it back to the same rails (our loader of the NCCL format, as a stand-in for NCCL).
  CHECK(load_nccl_xml(path).gpus.size() == 2);

  SECTION("another node's file is stale") {
    Node other = node;
    other.nics[1].rdma_name = "mlx5_7";
    CHECK_THAT(check_nccl_topo_file(other, path), Catch::Contains("stale"));
  }
  SECTION("edited, group-writable, a link, missing: refused with the reason") {
    write_text(path, render_nccl_topology(node) + "<!-- edited -->\n");
    CHECK_THAT(check_nccl_topo_file(node, path), Catch::Contains("stale"));
    write_nccl_topo_file(node, cache);
    REQUIRE(::chmod(path.c_str(), 0664) == 0);
    CHECK_THAT(check_nccl_topo_file(node, path), Catch::Contains("writable by group or others"));
    REQUIRE(::chmod(path.c_str(), 0644) == 0);
    std::filesystem::create_symlink(path, dir + "/link.xml");
    CHECK_FALSE(check_nccl_topo_file(node, dir + "/link.xml").empty());
    CHECK_THAT(check_nccl_topo_file(node, dir + "/none.xml"), Catch::Contains("cannot open"));
  }
  SECTION("a node without GPUs gets none, and an old file is removed") {
    Node cpu_only = node;
    cpu_only.gpus.clear();
    write_nccl_topo_file(cpu_only, cache);
    CHECK_FALSE(std::filesystem::exists(path));
  }
}

TEST_CASE("a cache under a directory someone else could replace is not trusted", "[cache][hostile]") {
  const std::string base = temp_dir("cache-ancestors");
  const std::string dir = base + "/a/b";
  std::filesystem::create_directories(dir);
  REQUIRE(::chmod((base + "/a").c_str(), 0755) == 0);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  const std::string xml = write_hwloc_xml(two_gpu_node(), "cache-ancestors");
  CachedNode c{current_stamp(xml, true), load_file(xml)};
  write_cache_file(c, dir + "/topology.cache");
  CHECK(read_cache_file(dir + "/topology.cache").node == c.node);

  SECTION("a group/world-writable ancestor") {
    REQUIRE(::chmod((base + "/a").c_str(), 0777) == 0);
    CHECK_THROWS_WITH(read_cache_file(dir + "/topology.cache"), Catch::Contains("an ancestor") &&
                                                                    Catch::Contains("writable by group or others"));
    REQUIRE(::chmod((base + "/a").c_str(), 0755) == 0);
  }
  SECTION("a sticky world-writable ancestor (like /tmp) is fine") {
    REQUIRE(::chmod((base + "/a").c_str(), 01777) == 0);
    CHECK(read_cache_file(dir + "/topology.cache").node == c.node);
    REQUIRE(::chmod((base + "/a").c_str(), 0755) == 0);
  }
  SECTION("an ancestor owned by another user") {
    if (::geteuid() != 0) {
      WARN("not root: cannot give a directory to another uid; the ancestor owner check is not exercised here");
      return;
    }
    REQUIRE(::chown((base + "/a").c_str(), 65534, 65534) == 0);
    CHECK_THROWS_WITH(read_cache_file(dir + "/topology.cache"), Catch::Contains("owned by uid 65534"));
    REQUIRE(::chown((base + "/a").c_str(), 0, 0) == 0);
  }
}

TEST_CASE("load_cached_or_*: an empty cache path is 'off', and `used` says where the node came from", "[cache]") {
  const std::string dir = temp_dir("cache-used");
  const std::string xml = write_hwloc_xml(two_gpu_node(), "cache-used");
  CachedNode c{current_stamp(xml, true), load_file(xml)};
  c.node.hostname = "from-the-cache";
  write_cache_file(c, dir + "/topology.cache");
  std::string note;
  bool used = false;
  CHECK(load_cached_or_file(xml, &note, dir + "/topology.cache", &used).hostname == "from-the-cache");
  CHECK(used);
  CHECK(load_cached_or_file(xml, &note, "", &used).hostname != "from-the-cache");
  CHECK_FALSE(used);
  CHECK(note.empty());
}
