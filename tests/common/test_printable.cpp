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

TEST_CASE("every Bidi_Control code point of Unicode's PropList.txt is escaped") {
  // U+061C ARABIC LETTER MARK, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069.
  CHECK(printable_line("a\xd8\x9c" "b", Backslash::keep) == "a\\xd8\\x9cb");
  for (const char* cp : {"\xe2\x80\x8e", "\xe2\x80\x8f", "\xe2\x80\xaa", "\xe2\x80\xab", "\xe2\x80\xac",
                         "\xe2\x80\xad", "\xe2\x80\xae", "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8",
                         "\xe2\x81\xa9"}) {
    INFO(printable_line(cp, Backslash::keep));
    CHECK(printable_line(cp, Backslash::keep).find('\\') == 0);
  }
  // Neighbours that are no controls stay: U+061B (Arabic semicolon), U+200D (zero width joiner).
  CHECK(printable_line("\xd8\x9b", Backslash::keep) == "\xd8\x9b");
  CHECK(printable_line("\xe2\x80\x8d", Backslash::keep) == "\xe2\x80\x8d");
}

TEST_CASE("utf8_prefix cuts on a character boundary, valid_utf8 replaces what is not UTF-8") {
  using trainrt::utf8_prefix;
  using trainrt::valid_utf8;
  CHECK(utf8_prefix("abc", 5) == "abc");
  CHECK(utf8_prefix("abc", 2) == "ab");
  CHECK(utf8_prefix("a\xc3\xa9", 2) == "a");                     // never half of the é
  CHECK(utf8_prefix("a\xc3\xa9", 3) == "a\xc3\xa9");
  CHECK(utf8_prefix("\xf0\x9f\x98\x80\xf0\x9f\x98\x80", 7) == "\xf0\x9f\x98\x80");
  CHECK(utf8_prefix("\xff\xfe\xfd", 2) == "\xff\xfe");            // bytes that are not UTF-8: one unit each
  CHECK(utf8_prefix("", 0).empty());
  CHECK(valid_utf8("n\xc3\xa9ud") == "n\xc3\xa9ud");
  CHECK(valid_utf8("a\xff" "b") == "a\xef\xbf\xbd" "b");
  CHECK(valid_utf8("\xc3") == "\xef\xbf\xbd");                    // cut short
  CHECK(valid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(valid_utf8(std::string("a\0b\n", 4)) == std::string("a\0b\n", 4));  // controls are the caller's
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
