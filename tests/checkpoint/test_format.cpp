// The format module on its own: ShardWriter's output read back by ShardReader (the round trip),
// the manifest, the one grammar of step names, and the reader's refusals of headers that do not
// agree with their manifest.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "files.hpp"
#include "shard_format.hpp"

using namespace trainrt;
using namespace trainrt::checkpoint;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path = (fs::temp_directory_path() / fmt::format("trainrt-format-{}-{}", ::getpid(), n++)).string();
  static inline int n = 0;
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

// Writes one shard of `rank` for `step` in a `world`-rank job into `dir`; returns its record.
format::ShardRecord write_shard(const Dir& dir, std::uint64_t step, unsigned rank, unsigned world,
                                const std::vector<float>& region, const std::vector<std::uint8_t>& blob) {
  format::ShardWriter w(step, rank, world, region.data(), region.size() * 4);
  w.place("weights", false, DType::F32, {static_cast<std::int64_t>(region.size())}, false, 0, region.size() * 4);
  w.append("rng", true, DType::I32, {}, true, blob.data(), blob.size());
  const auto& pieces = w.finish();
  dir.write_new(format::shard_name(rank), pieces);
  return {rank, format::shard_name(rank), w.file_bytes(), w.header_xxh3()};
}

}  // namespace

TEST_CASE("step directory names: one grammar", "[format]") {
  CHECK(format::step_dir_name(5) == "step_000000000005");
  CHECK(format::parse_step_dir_name("step_000000000005") == std::optional<std::uint64_t>(5));
  CHECK(format::parse_step_dir_name("step_1234567890123") == std::optional<std::uint64_t>(1234567890123));
  CHECK(format::parse_step_dir_name("step_9223372036854775807") == std::optional<std::uint64_t>(INT64_MAX));
  for (const char* bad : {"step_5", "step_0000000000005", "step_000000000005x", "step_00000000005", "step_-00000000005",
                          "step_+00000000005", "step_ 00000000005", "step_9223372036854775808", "step_99999999999999999999",
                          "Step_000000000005", "step_000000000005/", "step_000000000005.tmp", "", "step_"})
    CHECK_FALSE(format::parse_step_dir_name(bad));
  CHECK(format::parse_latest("step_000000000042\n") == std::optional<std::uint64_t>(42));
  CHECK_FALSE(format::parse_latest("step_000000000042"));
  CHECK_FALSE(format::parse_latest("step_000000000042\n\n"));
  CHECK_FALSE(format::parse_latest("../../etc/passwd\n"));
}

TEST_CASE("ShardWriter and ShardReader round trip", "[format]") {
  TempDir t;
  Dir dir = Dir::open(t.path);
  std::vector<float> region(3000);
  std::iota(region.begin(), region.end(), 0.5f);
  std::vector<std::uint8_t> blob{1, 2, 3, 4, 5};
  auto record = write_shard(dir, 7, 0, 1, region, blob);
  const std::string text = format::manifest_text(7, 1, {record}, {{"loss", "0.25"}, {"note", "ü\n"}});
  dir.write_new(format::kManifestName, {{text.data(), text.size()}});

  format::Manifest m;
  REQUIRE(format::read_manifest(dir, 7, m) == "");
  CHECK(m.world_size == 1);
  CHECK(m.metadata == Metadata{{"loss", "0.25"}, {"note", "ü\n"}});
  REQUIRE(m.shard_of(0));
  CHECK(m.shard_of(0)->header_xxh3 == record.header_xxh3);
  CHECK(format::read_manifest(dir, 8, m) != "");  // the manifest of another step

  format::ShardReader reader;
  REQUIRE(format::read_manifest(dir, 7, m) == "");
  REQUIRE(reader.open(dir, m, *m.shard_of(0)) == "");
  REQUIRE(reader.entries().size() == 2);
  const auto* w = reader.find("weights");
  const auto* r = reader.find("rng");
  REQUIRE(w);
  REQUIRE(r);
  CHECK(w->dtype == "f32");
  CHECK(w->shape == std::vector<std::int64_t>{3000});
  CHECK(w->offset % format::kDataAlign == 0);
  CHECK(r->kind == "blob");
  CHECK(r->replicated);
  CHECK(r->offset % 64 == 0);
  std::vector<float> back(3000);
  std::vector<std::uint8_t> blob_back(5);
  CHECK(reader.read_verified(*w, reinterpret_cast<std::uint8_t*>(back.data())) == "");
  CHECK(reader.read_verified(*r, blob_back.data()) == "");
  CHECK(back == region);
  CHECK(blob_back == blob);
}

TEST_CASE("a shard header must agree with its manifest", "[format]") {
  TempDir t;
  Dir dir = Dir::open(t.path);
  std::vector<float> region(1024, 1.0f);
  std::vector<std::uint8_t> blob{9};
  // Rank 1's shard of step 7 in a 2-rank world, offered as rank 0's, as step 8's, as a 3-rank world's.
  auto record = write_shard(dir, 7, 1, 2, region, blob);
  fs::rename(t.path + "/rank_00001.shard", t.path + "/rank_00000.shard");
  format::Manifest m;
  m.step = 7;
  m.world_size = 2;
  m.shards = {{0, "rank_00000.shard", record.bytes, record.header_xxh3}, {1, "rank_00001.shard", 0, ""}};
  format::ShardReader reader;
  CHECK_THAT(reader.open(dir, m, m.shards[0]), Catch::Contains("another rank"));
  CHECK(reader.entries().empty());
  m.shards[0].rank = 1;  // the right slot, but the file is named for rank 0
  CHECK_THAT(reader.open(dir, m, m.shards[0]), Catch::Contains("rank_00001.shard"));
  fs::rename(t.path + "/rank_00000.shard", t.path + "/rank_00001.shard");
  CHECK(reader.open(dir, m, m.shards[0]) == "");
  m.step = 8;
  CHECK_THAT(reader.open(dir, m, m.shards[0]), Catch::Contains("another step"));
  m.step = 7;
  m.world_size = 3;
  CHECK_THAT(reader.open(dir, m, m.shards[0]), Catch::Contains("another world size"));
  m.world_size = 2;
  m.shards[0].bytes += 1;
  CHECK_THAT(reader.open(dir, m, m.shards[0]), Catch::Contains("the manifest says"));
}

TEST_CASE("Dir: no symlink, no FIFO, no device, nothing over the cap", "[format]") {
  TempDir t;
  Dir dir = Dir::open(t.path);
  const std::string text = "0123456789";
  dir.write_new("small", {{text.data(), text.size()}});
  CHECK(dir.read_small("small", 10) == text);
  CHECK_THROWS_WITH(dir.read_small("small", 9), Catch::Contains("limit"));
  fs::create_symlink(t.path + "/small", t.path + "/link");
  CHECK_THROWS_WITH(dir.read_small("link", 100), Catch::Contains("symbolic link"));
  REQUIRE(::mkfifo((t.path + "/fifo").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(dir.read_small("fifo", 100), Catch::Contains("FIFO"));  // returns at once
  fs::create_directory(t.path + "/sub");
  CHECK_THROWS_WITH(dir.read_small("sub", 100), Catch::Contains("directory"));
  CHECK_FALSE(dir.sub("link"));
  std::string why;
  CHECK_FALSE(dir.sub("small", &why));
  CHECK_THAT(why, Catch::Contains("not a directory"));
  CHECK(dir.sub("sub"));
  // write_new replaces a planted symlink instead of writing through it.
  fs::create_symlink(t.path + "/small", t.path + "/planted");
  dir.write_new("planted", {{"new", 3}});
  CHECK(dir.read_small("small", 100) == text);
  CHECK(dir.read_small("planted", 100) == "new");
}
