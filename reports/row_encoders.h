// The encodings the one layer-row writer (layers.h, Note [One layer-row
// writer]) emits a row in. The writer says what a row holds as a sequence
// of values; an encoder turns them into bytes.
//
// Note [Row encodings]
// JsonText writes the reports' compact JSON text. PickleStream writes the
// same values as a stream in Python's pickle protocol 4, which crawl_module
// reads with pickle.loads: loading builds the rows' dicts from opcodes,
// about half json.loads's time for the same rows (measured on MobileNetV3's
// 209 rows: 1.1 ms against 2.2 ms), and the writer formats no digits. Both
// give Python the same objects, type for type: whole numbers as int (also
// a field value that JSON writes as "319"), null as None, invalid UTF-8
// replaced as JSON replaces it (tests/python/api/test_row_encodings.py).
// Key strings repeat on every row; the stream loads each once (its memo)
// and refers to it afterwards.
// The reports built as JSON trees (the operator and module views) reach
// Python the same way: AppendJsonValue writes a tree as the objects
// json.loads gives for its text.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "nlohmann/json.hpp"
#include "formulas/count.h"

namespace torchscan::reports {

// Compact JSON text, keys in the order written (the writer sorts them).
class JsonText {
 public:
  explicit JsonText(std::string& out) : out_(out) {}
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view k);
  void String(std::string_view s);
  void UniqueString(std::string_view s) { String(s); }  // text that rarely repeats (a path)
  void Int(int64_t v);
  void CountValue(const Count& c);  // an exact count, digit for digit
  void Number(double v);            // whole values as integers; non-finite as null
  void Null();
  void Bool(bool b);

 private:
  void Open(char c);
  void Close(char c);
  void Separate();  // before a value: a comma unless it follows a key or opens its container
  std::string& out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// Python's pickle protocol 4: one value (Finish() ends the stream).
class PickleStream {
 public:
  explicit PickleStream(std::string& out);
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // A key is a literal or a static table's name: text that stays at its
  // address while the stream is written, so the address alone finds it again.
  void Key(std::string_view k);
  void String(std::string_view s);        // loaded once, then referred to (the memo)
  void UniqueString(std::string_view s);  // not memoized: text that rarely repeats (a path)
  void Int(int64_t v);
  void CountValue(const Count& c);
  void Number(double v);
  void Float(double v);  // always a float (JSON's 1.0 loads as 1.0); non-finite as null
  void Long(bool negative, Count::Wide magnitude);
  void Null();
  void Bool(bool b);
  void Finish();

 private:
  void Text(std::string_view s);  // SHORT_BINUNICODE / BINUNICODE, valid UTF-8
  // Bytes are written at out_[at_]: out_ grows in chunks and Finish cuts it
  // to at_ (a row is a few hundred opcodes of one to a few bytes, where
  // string appends cost a call each).
  char* Room(size_t n) {
    if (__builtin_expect(out_.size() - at_ < n, 0)) Grow(n);
    char* p = out_.data() + at_;
    at_ += n;
    return p;
  }
  void Put(char c) { *Room(1) = c; }
  void Put(char a, char b) {
    char* p = Room(2);
    p[0] = a, p[1] = b;
  }
  void Put(std::string_view bytes) {
    if (!bytes.empty()) std::memcpy(Room(bytes.size()), bytes.data(), bytes.size());
  }
  void Grow(size_t n);
  void PutLe32(char op, uint32_t v);  // an opcode and a 4-byte little-endian argument
  void Get(uint32_t index);           // the memo's entry `index`
  std::string& out_;
  size_t at_;
  absl::node_hash_map<std::string, uint32_t> memo_;  // short strings already loaded (stable keys)
  // The writer passes most strings from the same few places (literals, the
  // scan's scope, the tallies' methods): a string at an address seen
  // before, with the same text, is found here without hashing its text.
  struct Recent {
    const char* data = nullptr;
    std::string_view text;  // memo_'s key
    uint32_t index = 0;
  };
  std::array<Recent, 256> recent_;
};

// A JSON tree as the objects json.loads gives for DumpJson's text (type
// for type: floats stay floats, counts past 2^64 - 1 exact), for reports
// written as trees that Python reads without their text.
void AppendJsonValue(const nlohmann::json& j, PickleStream& out);

// Text a JSON writer would give for `s`, as valid UTF-8: `s` itself, or
// with invalid sequences replaced (U+FFFD) as nlohmann replaces them.
std::string ValidUtf8(std::string_view s);

}  // namespace torchscan::reports
