// The row encoders (reports/row_encoders.h) on a small value whose bytes are
// derived by hand from the formats: JSON text, and pickle protocol 4 as
// Python's Lib/pickletools.py documents each opcode.
#include "reports/row_encoders.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reports/metric.h"

namespace torchscan::reports {
namespace {

// {"a": [1, null, 2^64, 0.5, "a", 3.0], "b": true, "c": "\xff", "d": "x.y"}
template <class W>
void WriteSample(W& w) {
  w.BeginObject();
  w.Key("a");
  w.BeginArray();
  w.Int(1);
  w.Null();
  w.CountValue(Count::FromWide(Count::Wide{1} << 64));
  w.Number(0.5);
  w.String("a");
  w.Number(3.0);  // whole: written as the integer 3
  w.EndArray();
  w.Key("b");
  w.Bool(true);
  w.Key("c");
  w.String("\xff");  // invalid UTF-8: replaced by U+FFFD
  w.Key("d");
  w.UniqueString("x.y");  // a path: not memoized
  w.EndObject();
}

TEST(RowEncoders, JsonTextIsCompactJson) {
  std::string out;
  JsonText w(out);
  WriteSample(w);
  EXPECT_EQ(out, "{\"a\":[1,null,18446744073709551616,0.5,\"a\",3],\"b\":true,\"c\":\"\xef\xbf\xbd\",\"d\":\"x.y\"}");
}

TEST(RowEncoders, PickleStreamHasTheProtocolFourOpcodes) {
  std::string out;
  PickleStream w(out);
  WriteSample(w);
  w.Finish();
  const std::string expected = std::string("\x80\x04", 2)  // PROTO 4
                               + "}("                      // EMPTY_DICT, MARK
                               + std::string(
                                     "\x8c\x01"
                                     "a"
                                     "\x94",
                                     4)                               // SHORT_BINUNICODE "a", MEMOIZE (memo 0)
                               + "]("                                 // EMPTY_LIST, MARK
                               + std::string("J\x01\x00\x00\x00", 5)  // BININT 1
                               + "N"                                  // NONE
                               + std::string("\x8a\x11", 2)  // LONG1, 17 bytes little-endian: 2^64 and a sign byte
                               + std::string(8, '\0') + "\x01" + std::string(8, '\0')  //
                               + std::string("G\x3f\xe0\0\0\0\0\0\0", 9)  // BINFLOAT 0.5, big-endian IEEE 754
                               + std::string("h\x00", 2)                  // BINGET memo 0: "a" again
                               + std::string("J\x03\x00\x00\x00", 5)      // BININT 3
                               + "e"                                      // APPENDS
                               + std::string(
                                     "\x8c\x01"
                                     "b"
                                     "\x94",
                                     4)  // "b" (memo 1)
                               + "\x88"  // NEWTRUE
                               + std::string(
                                     "\x8c\x01"
                                     "c"
                                     "\x94",
                                     4)                                      // "c" (memo 2)
                               + std::string("\x8c\x03\xef\xbf\xbd\x94", 6)  // U+FFFD (memo 3)
                               + std::string(
                                     "\x8c\x01"
                                     "d"
                                     "\x94",
                                     4)  // "d" (memo 4)
                               + std::string(
                                     "\x8c\x03"
                                     "x.y",
                                     5)  // "x.y", no MEMOIZE
                               + "u"     // SETITEMS
                               + ".";    // STOP
  EXPECT_EQ(out, expected);
}

// Past the first chunk of its buffer, after bytes already there: a list of
// 3000 (key, int) pairs, the key a literal (loaded once, then BINGET memo 0),
// then 300 distinct short strings (memo 1..300: LONG_BINGET past 255).
TEST(RowEncoders, PickleStreamGrowsAndKeepsWhatWasInItsOutput) {
  std::string out = "prefix";
  PickleStream w(out);
  w.BeginArray();
  for (uint32_t i = 0; i < 3000; ++i) {
    w.Key("k");
    w.Int(i);
  }
  std::vector<std::string> names;
  for (int i = 0; i < 300; ++i) names.push_back("n" + std::to_string(i));
  for (const std::string& n : names) w.String(n);
  w.String(names[299]);  // memo 300
  w.EndArray();
  w.Finish();
  auto le32 = [](char op, uint32_t v) {
    return std::string{op, static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
                       static_cast<char>((v >> 16) & 0xff), static_cast<char>(v >> 24)};
  };
  std::string expected = std::string("prefix\x80\x04](", 10) + std::string("\x8c\x01k\x94", 4) + le32('J', 0);
  for (uint32_t i = 1; i < 3000; ++i) expected += std::string("h\x00", 2) + le32('J', i);
  for (const std::string& n : names) {
    expected += std::string{'\x8c', static_cast<char>(n.size())} + n + "\x94";
  }
  expected += le32('j', 300) + "e.";
  EXPECT_EQ(out, expected);
  EXPECT_EQ(out.size(), expected.size());  // nothing of the buffer's last chunk is left past STOP
}

// A JSON tree as json.loads reads DumpJson's text of it: keys in the
// tree's (sorted) order, a float stays a float (1.0, not 1), NaN is null,
// counts past 2^64 - 1 and below -2^63 are exact ints.
// {"a": "\xff", "z": [1.0, -2, 2^64 - 1, NaN, -2^70, false, null]}
TEST(RowEncoders, AJsonTreeAsPickleOpcodes) {
  const nlohmann::json tree = {
      {"z", nlohmann::json::array({1.0, -2, std::numeric_limits<uint64_t>::max(), std::nan(""),
                                   SignedCountJson(true, Count::Wide{1} << 70), false, nullptr})},
      {"a", "\xff"}};
  std::string out;
  PickleStream w(out);
  AppendJsonValue(tree, w);
  w.Finish();
  const std::string expected = std::string("\x80\x04", 2) + "}("  // PROTO 4, EMPTY_DICT, MARK
                               + std::string(
                                     "\x8c\x01"
                                     "a"
                                     "\x94",
                                     4)                                      // "a" (memo 0)
                               + std::string("\x8c\x03\xef\xbf\xbd\x94", 6)  // U+FFFD for the invalid byte (memo 1)
                               + std::string(
                                     "\x8c\x01"
                                     "z"
                                     "\x94",
                                     4)                                   // "z" (memo 2)
                               + "]("                                     // EMPTY_LIST, MARK
                               + std::string("G\x3f\xf0\0\0\0\0\0\0", 9)  // BINFLOAT 1.0, big-endian
                               + std::string("J\xfe\xff\xff\xff", 5)      // BININT -2
                               + std::string("\x8a\x11", 2) + std::string(8, '\xff') +
                               std::string(9, '\0')  // LONG1 2^64 - 1, sign byte 0
                               + "N"                 // NaN: NONE
                               // LONG1 -2^70: 2^136 - 2^70 in 17 little-endian bytes (bits 70..135 set).
                               + std::string("\x8a\x11", 2) + std::string(8, '\0') + "\xc0" + std::string(8, '\xff')  //
                               + "\x89"  // NEWFALSE
                               + "N"     // NONE
                               + "e"     // APPENDS
                               + "u"     // SETITEMS
                               + ".";    // STOP
  EXPECT_EQ(out, expected);
}

TEST(RowEncoders, ValidUtf8KeepsValidTextAndReplacesTheRest) {
  EXPECT_EQ(ValidUtf8("layer.ü"), "layer.ü");
  EXPECT_EQ(ValidUtf8("a\xc3"), "a\xef\xbf\xbd");  // truncated sequence
  // An encoded surrogate (U+D800) is not UTF-8: replaced, and the result is valid.
  const std::string surrogate = ValidUtf8("\xed\xa0\x80");
  EXPECT_NE(surrogate, "\xed\xa0\x80");
  EXPECT_EQ(ValidUtf8(surrogate), surrogate);
}

}  // namespace
}  // namespace torchscan::reports
