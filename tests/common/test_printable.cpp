// printable_line: the escaper of text from files (trainrt-ckpt, trainrt-doctor, trainrt-topo).
#include <catch2/catch.hpp>
#include <string>

#include "trainrt/printable.hpp"

using trainrt::Backslash;
using trainrt::printable_line;

TEST_CASE("ASCII text and valid UTF-8 pass unchanged") {
  CHECK(printable_line("node-01 gpu0 [x] ~", Backslash::hex) == "node-01 gpu0 [x] ~");
  CHECK(printable_line("n\xc3\xa9ud \xe2\x82\xac \xf0\x9f\x98\x80", Backslash::hex) == "n\xc3\xa9ud \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable_line("", Backslash::keep).empty());
}

TEST_CASE("controls that could add a line or drive the terminal become \\xNN, one per byte") {
  CHECK(printable_line("a\nb\rc\td\x1b[2J\x7f", Backslash::keep) == "a\\x0ab\\x0dc\\x09d\\x1b[2J\\x7f");
  CHECK(printable_line(std::string("a\0b", 3), Backslash::keep) == "a\\x00b");
  CHECK(printable_line("\xc2\x9b" "x", Backslash::keep) == "\\xc2\\x9bx");                // C1 CSI
  CHECK(printable_line("\xe2\x80\xa8", Backslash::keep) == "\\xe2\\x80\\xa8");            // line separator
  CHECK(printable_line("\xe2\x80\xae" "abc", Backslash::keep) == "\\xe2\\x80\\xaeabc");   // right-to-left override
  CHECK(printable_line("\xe2\x81\xa6", Backslash::keep) == "\\xe2\\x81\\xa6");            // isolate
  CHECK(printable_line("\xef\xbb\xbf" "x", Backslash::keep) == "\\xef\\xbb\\xbfx");       // byte-order mark
}

TEST_CASE("bytes that are not shortest-form UTF-8 are escaped one at a time") {
  CHECK(printable_line("\xff\xfe", Backslash::keep) == "\\xff\\xfe");
  CHECK(printable_line("\xc3", Backslash::keep) == "\\xc3");                      // cut short
  CHECK(printable_line("\xc0\xaf", Backslash::keep) == "\\xc0\\xaf");             // overlong '/'
  CHECK(printable_line("\xe0\x80\xaf", Backslash::keep) == "\\xe0\\x80\\xaf");    // overlong
  CHECK(printable_line("\xed\xa0\x80", Backslash::keep) == "\\xed\\xa0\\x80");    // surrogate
  CHECK(printable_line("\xf4\x90\x80\x80", Backslash::keep) == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable_line("\xc3" "A", Backslash::keep) == "\\xc3A");                 // a bad continuation
}

TEST_CASE("a backslash as the caller says: kept, \\x5c or doubled") {
  CHECK(printable_line("a\\x41", Backslash::keep) == "a\\x41");
  CHECK(printable_line("a\\x41", Backslash::hex) == "a\\x5cx41");
  CHECK(printable_line("a\\x41", Backslash::doubled) == "a\\\\x41");
}
