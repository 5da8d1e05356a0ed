// Every real topology in ../shared/topologies survives the cache round trip whole: the Node read
// back from the bytes equals the one the loader built, field for field.
#include <catch2/catch.hpp>

#include <filesystem>

#include "shared_topologies.hpp"
#include "trainrt/topology/cache.hpp"
#include "trainrt/topology/load.hpp"

using namespace trainrt::topo;

TEST_CASE("every real topology round-trips through the cache", "[cache]") {
  const std::string dir = trainrt::testing::shared_topologies_dir();
  unsigned files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".xml") continue;
    const std::string path = e.path().string();
    INFO(path);
    CachedNode c{current_stamp(path, true), load_file(path)};
    CHECK(c.stamp.file_hash != 0);
    const std::string bytes = encode_cache(c);
    CachedNode back = decode_cache(bytes, path);
    CHECK(back.stamp == c.stamp);
    CHECK(back.node == c.node);
    CHECK(back.node.gpus.size() == c.node.gpus.size());
    // Small: a fraction of the hwloc XML it digests (NCCL files are a few KB either way).
    if (std::filesystem::file_size(path) > (64u << 10)) CHECK(bytes.size() * 4 < std::filesystem::file_size(path));
    ++files;
  }
  CHECK(files >= 8);
}
