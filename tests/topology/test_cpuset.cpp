#include <catch2/catch.hpp>

#include "trainrt/error.hpp"
#include "trainrt/topology/cpuset.hpp"

using trainrt::topo::CpuSet;

TEST_CASE("cpu lists round-trip through the Slurm/taskset syntax", "[cpuset]") {
  CpuSet s = CpuSet::parse_list("0-5,48-53,96");
  CHECK(s.count() == 13);
  CHECK(s.test(5));
  CHECK_FALSE(s.test(6));
  CHECK(s.to_list() == "0-5,48-53,96");
  CHECK(CpuSet::parse_list("3,1,2").to_list() == "1-3");
  CHECK(CpuSet().to_list().empty());
  CHECK(s.first() == 0);
  CHECK(s.last() == 96);
}

TEST_CASE("bad cpu lists are rejected with the offending text", "[cpuset]") {
  for (const char* bad : {"", "a", "1-", "-3", "5-2", "1,,2", "0x3", "1 2", "99999999"}) {
    INFO(bad);
    CHECK_THROWS_AS(CpuSet::parse_list(bad), trainrt::Error);
  }
  CHECK_THROWS_WITH(CpuSet::parse_list("5-2"), Catch::Contains("5-2"));
}

TEST_CASE("hex masks in NCCL and hwloc forms", "[cpuset]") {
  // NCCL p4d NUMA 0: 32-bit words, most significant first.
  CHECK(CpuSet::parse_hex_mask("000000ff,ffff0000,00ffffff").to_list() == "0-23,48-71");
  // hwloc writes empty words for zero.
  CHECK(CpuSet::parse_hex_mask("0xffff0000,,,,0xffff0000").to_list() == "16-31,144-159");
  CHECK(CpuSet::parse_hex_mask("0x0").empty());
  CHECK_THROWS_AS(CpuSet::parse_hex_mask("0xzz"), trainrt::Error);
  CHECK_THROWS_AS(CpuSet::parse_hex_mask("123456789"), trainrt::Error);
}

TEST_CASE("set algebra", "[cpuset]") {
  CpuSet a = CpuSet::parse_list("0-7"), b = CpuSet::parse_list("4-11");
  CHECK((a & b).to_list() == "4-7");
  CHECK((a | b).to_list() == "0-11");
  CHECK((a - b).to_list() == "0-3");
  CHECK((a - a).empty());
  CHECK((a - a) == CpuSet());
  CHECK(a.intersects(b));
  CHECK(CpuSet::parse_list("2-3").is_subset_of(a));
  CHECK_FALSE(b.is_subset_of(a));
  CHECK(CpuSet::parse_list("0-3,64").to_hex_mask() == "0x1000000000000000f");
}
