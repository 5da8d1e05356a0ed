// The digested topology cache: a round trip keeps the whole Node, and a cache that is
// corrupt, forged, stale, a link or writable by others is refused, with the step falling back.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "synthetic_topology.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::topo;
using namespace trainrt::testing;

namespace {

SynthNode sample() {
  SynthNode n;
  SynthSwitch a{{"0000:03:00.0", "0000:04:00.0"}, {{"0000:05:00.0", "mlx5_0", "ib0", 0x0207, 2}}};
  SynthSwitch b{{"0000:83:00.0"}, {{"0000:85:00.0", "", "eno1", 0x0200, 1}}};
  n.packages = {{{{4, {{{a}}}}, {4, {{{b}}}}}}};
  return n;
}

CachedNode cached_sample(const std::string& name) {
  std::string xml = write_hwloc_xml(sample(), name);
  CachedNode c;
  c.stamp = current_stamp(xml, true);
  c.node = load_file(xml);
  return c;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
  REQUIRE(f.good());
}

// Replaces the trailing checksum so a forged body gets past it and reaches the field checks.
std::string reseal(std::string bytes) {
  bytes.resize(bytes.size() - 8);
  std::uint64_t h = fnv1a64(bytes);
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  return bytes;
}

std::size_t find(const std::string& hay, const std::string& needle, bool last = false) {
  std::size_t at = last ? hay.rfind(needle) : hay.find(needle);
  REQUIRE(at != std::string::npos);
  return at;
}

void put_u32(std::string& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

TEST_CASE("a cache round trip keeps the whole node and its stamp", "[cache]") {
  CachedNode c = cached_sample("cache-roundtrip");
  REQUIRE(c.node.gpus.size() == 3);
  REQUIRE(c.node.nics.size() == 2);
  c.node.nics[0].pcie_gbytes_s = 24.6;
  std::string bytes = encode_cache(c);
  CachedNode back = decode_cache(bytes, "mem");
  CHECK(back.stamp == c.stamp);
  CHECK(back.node == c.node);
  // And a second encoding is byte-identical (a deterministic format).
  CHECK(encode_cache(back) == bytes);
  // Equality is not vacuous: one changed field makes the models differ.
  back.node.nics[1].netdevs.push_back("x");
  CHECK_FALSE(back.node == c.node);
}

TEST_CASE("the live machine round-trips through the cache", "[cache]") {
  CachedNode c{current_stamp("", false), load_live()};
  CHECK(c.stamp.source == "live");
  CHECK_FALSE(c.stamp.boot_id.empty());
  CHECK(c.stamp.devices_count > 0);
  CHECK(decode_cache(encode_cache(c), "mem").node == c.node);
}

TEST_CASE("corrupt and forged cache bytes are errors, never a node", "[cache][hostile]") {
  const std::string good = encode_cache(cached_sample("cache-hostile"));
  SECTION("every truncation") {
    for (std::size_t n = 0; n < good.size(); ++n) REQUIRE_THROWS_AS(decode_cache(good.substr(0, n), "t"), trainrt::Error);
  }
  SECTION("every single flipped bit in a sample of bytes") {
    for (std::size_t at = 0; at < good.size(); at += 7) {
      std::string b = good;
      b[at] = static_cast<char>(b[at] ^ 0x10);
      REQUIRE_THROWS_AS(decode_cache(b, "t"), trainrt::Error);
    }
  }
  SECTION("bad magic, other version, trailing bytes") {
    std::string b = good;
    b[0] = 'X';
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("bad magic"));
    b = good;
    put_u32(b, 8, 2);
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("format version 2"));
    b = good;
    b.insert(b.size() - 8, "xx");
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("after the node"));
  }
  SECTION("a huge length or count with a valid checksum is bounded before use") {
    // The host name "synth" follows the source string: its u32 length sits just before it.
    std::string b = good;
    put_u32(b, find(b, "synth") - 4, 0xfffffff0u);
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("more than the 4096 allowed"));
    // GPU 0's record (the last place its bus id appears: PCI vertices come first, NICs have
    // others) starts with u32 index then the bus id's length; the GPU count is just before it.
    b = good;
    const std::size_t gpu = find(b, std::string("\x0c\0\0\0" "0000:03:00.0", 16), true);
    put_u32(b, gpu - 4, 7);  // GPU index 7 at position 0
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("GPU index 7"));
    put_u32(b, gpu - 8, 0x7fffffffu);  // the GPU count itself
    CHECK_THROWS_WITH(decode_cache(reseal(b), "t"), Catch::Contains("more than the 1024 allowed"));
  }
  SECTION("oversized input") {
    CHECK_THROWS_WITH(decode_cache(std::string(kMaxCacheBytes + 1, 'x'), "t"), Catch::Contains("MiB limit"));
  }
}

TEST_CASE("a cache file is read only when root's or ours and nobody else can write it", "[cache][hostile]") {
  const std::string dir = temp_dir("cache-files");
  const std::string path = dir + "/topology.cache";
  CachedNode c = cached_sample("cache-files");
  write_cache_file(c, path);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(read_cache_file(path).node == c.node);

  SECTION("relative path") { CHECK_THROWS_WITH(read_cache_file("topology.cache"), Catch::Contains("absolute")); }
  SECTION("group- or world-writable file") {
    for (mode_t m : {0664, 0646}) {
      REQUIRE(::chmod(path.c_str(), m) == 0);
      CHECK_THROWS_WITH(read_cache_file(path), Catch::Contains("writable by group or others"));
    }
  }
  SECTION("world-writable directory") {
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    CHECK_THROWS_WITH(read_cache_file(path), Catch::Contains("cache directory is writable"));
    REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  }
  SECTION("a symbolic link, even to a good cache") {
    std::filesystem::create_symlink(path, dir + "/link.cache");
    CHECK_THROWS_AS(read_cache_file(dir + "/link.cache"), trainrt::Error);
  }
  SECTION("a FIFO does not hang and is refused") {
    REQUIRE(::mkfifo((dir + "/fifo.cache").c_str(), 0644) == 0);
    CHECK_THROWS_WITH(read_cache_file(dir + "/fifo.cache"), Catch::Contains("not a regular file"));
  }
  SECTION("another user's file") {
    if (::geteuid() != 0) {
      WARN("not root: cannot give the cache to another uid; the owner check is not exercised here");
    } else {
      REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
      CHECK_THROWS_WITH(read_cache_file(path), Catch::Contains("owned by uid 65534"));
    }
  }
  SECTION("a corrupt file") {
    std::string b = encode_cache(c);
    b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 1);
    write_bytes(path, b);
    CHECK_THROWS_WITH(read_cache_file(path), Catch::Contains("checksum"));
  }
}

TEST_CASE("a stale stamp is refused, naming what changed", "[cache]") {
  CachedNode c = cached_sample("cache-stale");
  const std::string xml = c.stamp.source;
  CHECK_NOTHROW(check_fresh(c.stamp, current_stamp(xml, false), "p"));
  auto other = c.stamp;
  other.boot_id = "00000000-0000-0000-0000-000000000000";
  CHECK_THROWS_WITH(check_fresh(other, c.stamp, "p"), Catch::Contains("boot id"));
  other = c.stamp;
  other.hwloc_version = "1.11.0";
  CHECK_THROWS_WITH(check_fresh(other, c.stamp, "p"), Catch::Contains("hwloc version"));
  other = c.stamp;
  other.devices_hash ^= 1;
  CHECK_THROWS_WITH(check_fresh(other, c.stamp, "p"), Catch::Contains("PCI devices"));
  other = c.stamp;
  other.source = "live";
  CHECK_THROWS_WITH(check_fresh(other, c.stamp, "p"), Catch::Contains("another source"));
  // Rewriting the topology file (same bytes even) moves its ctime: the cache goes stale.
  std::string text;
  {
    std::ifstream f(xml);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  ::usleep(20000);
  write_bytes(xml, text);
  CHECK_THROWS_WITH(check_fresh(c.stamp, current_stamp(xml, false), "p"), Catch::Contains("topology file"));
}

TEST_CASE("load_cached_or_* use a fresh cache and otherwise discover, saying why", "[cache]") {
  const std::string dir = temp_dir("cache-fallback");
  const std::string path = dir + "/topology.cache";
  CachedNode c = cached_sample("cache-fallback");
  const std::string xml = c.stamp.source;
  std::string note = "x";

  // No cache at all: the normal state without an admin's cache, no note.
  Node n = load_cached_or_file(xml, &note, path);
  CHECK(note.empty());
  CHECK(n.hostname == "synth");

  // A fresh cache is what the step gets: a marker host name proves it came from the cache.
  c.node.hostname = "from-the-cache";
  write_cache_file(c, path);
  n = load_cached_or_file(xml, &note, path);
  CHECK(note.empty());
  CHECK(n.hostname == "from-the-cache");

  // Stale (another boot): discovery, with a note naming the reason.
  c.stamp.boot_id = "stale";
  write_cache_file(c, path);
  n = load_cached_or_file(xml, &note, path);
  CHECK(n.hostname == "synth");
  CHECK_THAT(note, Catch::Contains("boot id"));

  // A cache of another source (the live machine) is not used for a file, and vice versa.
  CachedNode live{current_stamp("", false), load_live()};
  live.node.hostname = "live-from-cache";
  write_cache_file(live, path);
  n = load_cached_or_file(xml, &note, path);
  CHECK(n.hostname == "synth");
  CHECK_THAT(note, Catch::Contains("another source"));
  n = load_cached_or_live(&note, path);
  CHECK(note.empty());
  CHECK(n.hostname == "live-from-cache");

  // Unreadable garbage: discovery and a note.
  write_bytes(path, "garbage");
  n = load_cached_or_live(&note, path);
  CHECK(n.hostname != "live-from-cache");
  CHECK_THAT(note, Catch::Contains("bad magic"));
}
