// trainrt/number.hpp: the one number parser. Whole text, in range, or an error that quotes it.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"

using trainrt::parse_number;
using trainrt::to_number;

TEST_CASE("a number is the whole text, digits only", "[number]") {
  CHECK(to_number<unsigned>("0") == 0u);
  CHECK(to_number<unsigned>("4294967295") == 4294967295u);
  CHECK(to_number<int>("-12") == -12);
  CHECK(to_number<std::uint32_t>("ff", 0, 0xffffffff, 16) == 0xffu);
  CHECK(to_number<std::uint64_t>("007") == 7u);
  // What atoi, strtoul and stoul let through, each refused here.
  for (const char* bad : {"", " 1", "1 ", "+1", "-1", "12abc", "0x10", "1.5", "1e3", "4294967296", "--1", "\n"}) {
    INFO(bad);
    CHECK_FALSE(to_number<unsigned>(bad));
  }
  CHECK_FALSE(to_number<int>("-"));
  CHECK_FALSE(to_number<std::uint32_t>("fg", 0, 0xffffffff, 16));
}

TEST_CASE("a range is checked, bounds included", "[number]") {
  CHECK(to_number<unsigned>("1", 1, 64) == 1u);
  CHECK(to_number<unsigned>("64", 1, 64) == 64u);
  CHECK_FALSE(to_number<unsigned>("0", 1, 64));
  CHECK_FALSE(to_number<unsigned>("65", 1, 64));
  CHECK_FALSE(to_number<int>("-2", -1, 1));
}

TEST_CASE("a bad number is an error naming the input, the text and what was wanted", "[number]") {
  CHECK(parse_number<unsigned>("65535", "a port number", 0u, 65535u, "ip_local_port_range") == 65535u);
  CHECK_THROWS_WITH(parse_number<unsigned>("65536", "a port number", 0u, 65535u, "ip_local_port_range"),
                    "ip_local_port_range: '65536' is out of range: a port number from 0 to 65535");
  CHECK_THROWS_WITH(parse_number<unsigned>("http", "a port number", 0u, 65535u, "MASTER_PORT"),
                    "MASTER_PORT: 'http' is not a port number");
  CHECK_THROWS_WITH(parse_number<int>("", "a device ordinal"), "'' is not a device ordinal");
  // Beyond the type itself: still a number, so "out of range", with the type's own limits.
  CHECK_THROWS_WITH(parse_number<std::uint8_t>("300", "a count"), "'300' is out of range: a count from 0 to 255");
  CHECK_THROWS_WITH(parse_number<unsigned>("99999999999999999999", "a count"),
                    "'99999999999999999999' is out of range: a count from 0 to 4294967295");
  CHECK_THROWS_WITH(parse_number<unsigned>("-1", "a count"), "'-1' is not a count");
  CHECK_THROWS_AS(parse_number<unsigned>("x", "a count"), trainrt::Error);
}

TEST_CASE("the quoted text is escaped and cut: it may come from a hostile file", "[number]") {
  CHECK_THROWS_WITH(parse_number<unsigned>("1\n2\x1b[2J", "a count"), "'1\\x0a2\\x1b[2J' is not a count");
  const std::string huge(100000, '7');
  CHECK_THROWS_WITH(parse_number<unsigned>(huge, "a count"), "'" + std::string(64, '7') + "...' is out of range: a count from 0 to 4294967295");
  CHECK_THROWS_WITH(parse_number<unsigned>(std::string(70, 'x'), "a count"),
                    "'" + std::string(64, 'x') + "...' is not a count");
}
