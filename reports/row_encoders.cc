#include "reports/row_encoders.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "reports/metric.h"

namespace torchscan::reports {

namespace {

bool Utf8Valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The text DumpJson writes for each value: printable ASCII strings as they
// are, any other string through nlohmann (escapes; invalid UTF-8 replaced).
void AppendString(std::string_view s, std::string& out) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f && c != '"' && c != '\\';
  });
  if (plain) {
    out += '"';
    out.append(s);
    out += '"';
    return;
  }
  out += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Whole values as integers (exact in both types).
bool Whole(double v) { return std::abs(v) < 9e15 && v == std::trunc(v); }

}  // namespace

std::string ValidUtf8(std::string_view s) {
  if (Utf8Valid(s)) return std::string(s);
  const std::string text =
      nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(text).get<std::string>();
}

// ---- JsonText

void JsonText::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (first_.empty()) return;
  if (!first_.back()) out_ += ',';
  first_.back() = false;
}

void JsonText::Open(char c) {
  Separate();
  out_ += c;
  first_.push_back(true);
}

void JsonText::Close(char c) {
  out_ += c;
  first_.pop_back();
}

void JsonText::Key(std::string_view k) {
  Separate();
  AppendString(k, out_);
  out_ += ':';
  after_key_ = true;
}

void JsonText::String(std::string_view s) {
  Separate();
  AppendString(s, out_);
}

void JsonText::Int(int64_t v) {
  Separate();
  absl::StrAppend(&out_, v);
}

void JsonText::CountValue(const Count& c) {
  Separate();
  if (auto v = c.ToUint64()) {
    absl::StrAppend(&out_, *v);
  } else {
    out_ += c.Digits();
  }
}

// Others as nlohmann writes a double (shortest round trip; JSON has no NaN
// or infinity: null).
void JsonText::Number(double v) {
  Separate();
  if (Whole(v)) {
    absl::StrAppend(&out_, static_cast<int64_t>(v));
  } else {
    out_ += nlohmann::json(v).dump();
  }
}

void JsonText::Null() {
  Separate();
  out_ += "null";
}

void JsonText::Bool(bool b) {
  Separate();
  out_ += b ? "true" : "false";
}

// ---- PickleStream (opcodes: Lib/pickletools.py)

namespace {
constexpr char kProto = '\x80', kStop = '.', kEmptyDict = '}', kEmptyList = ']', kMark = '(', kSetItems = 'u',
               kAppends = 'e', kNone = 'N', kTrue = '\x88', kFalse = '\x89', kBinInt = 'J', kLong1 = '\x8a',
               kBinFloat = 'G', kShortUnicode = '\x8c', kUnicode = 'X', kMemoize = '\x94', kBinGet = 'h',
               kLongBinGet = 'j';
constexpr size_t kMemoizedLength = 48;  // longer strings (paths) rarely repeat

}  // namespace

void PickleStream::Grow(size_t n) { out_.resize(std::max({out_.capacity(), out_.size() * 2, at_ + n + 4096})); }

void PickleStream::Get(uint32_t index) {
  if (index < 256) {
    Put(kBinGet, static_cast<char>(index));
  } else {
    PutLe32(kLongBinGet, index);
  }
}

void PickleStream::PutLe32(char op, uint32_t v) {
  char* p = Room(5);
  p[0] = op;
  for (int i = 0; i < 4; ++i) p[1 + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

PickleStream::PickleStream(std::string& out) : out_(out), at_(out.size()) { Put(kProto, '\x04'); }

void PickleStream::Finish() {
  Put(kStop);
  out_.resize(at_);
}
void PickleStream::BeginObject() { Put(kEmptyDict, kMark); }
void PickleStream::EndObject() { Put(kSetItems); }
void PickleStream::BeginArray() { Put(kEmptyList, kMark); }
void PickleStream::EndArray() { Put(kAppends); }
void PickleStream::Null() { Put(kNone); }
void PickleStream::Bool(bool b) { Put(b ? kTrue : kFalse); }

void PickleStream::String(std::string_view s) {
  const bool memoized = s.size() <= kMemoizedLength;
  if (memoized) {
    Recent& recent = recent_[(reinterpret_cast<uintptr_t>(s.data()) >> 3) % recent_.size()];
    uint32_t index = 0;
    bool found = false;
    if (recent.data == s.data() && recent.text == s) {
      index = recent.index, found = true;
    } else if (auto it = memo_.find(absl::string_view(s.data(), s.size())); it != memo_.end()) {
      index = it->second, found = true;
      recent = {s.data(), it->first, index};
    }
    if (found) {
      Get(index);
      return;
    }
  }
  Text(s);
  if (memoized) {
    Put(kMemoize);
    const auto index = static_cast<uint32_t>(memo_.size());
    memo_.emplace(std::string(s), index);
  }
}

void PickleStream::Key(std::string_view k) {
  const Recent& recent = recent_[(reinterpret_cast<uintptr_t>(k.data()) >> 3) % recent_.size()];
  // The same address and length: the same static text (no other text is
  // at a literal's address while it is written).
  if (recent.data == k.data() && recent.text.size() == k.size()) {
    Get(recent.index);
    return;
  }
  String(k);
}

void PickleStream::UniqueString(std::string_view s) { Text(s); }

void PickleStream::Text(std::string_view s) {
  std::string replaced;
  if (!Utf8Valid(s)) {
    replaced = ValidUtf8(s);
    s = replaced;
  }
  if (s.size() < 256) {
    Put(kShortUnicode, static_cast<char>(s.size()));
  } else {
    PutLe32(kUnicode, static_cast<uint32_t>(s.size()));
  }
  Put(s);
}

void PickleStream::Int(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    PutLe32(kBinInt, static_cast<uint32_t>(static_cast<int32_t>(v)));
    return;
  }
  // Eight bytes of two's complement.
  Put(kLong1, '\x08');
  char* p = Room(8);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
}

void PickleStream::Long(bool negative, Count::Wide magnitude) {
  if (!negative && magnitude <= INT32_MAX) {
    Int(static_cast<int64_t>(magnitude));
    return;
  }
  // Seventeen bytes of two's complement: 128 bits and a sign byte.
  const Count::Wide bits = negative ? ~magnitude + 1 : magnitude;
  Put(kLong1, '\x11');
  char* p = Room(17);
  for (int i = 0; i < 16; ++i) p[i] = static_cast<char>(static_cast<uint8_t>(bits >> (8 * i)));
  p[16] = negative ? '\xff' : '\x00';
}

void PickleStream::CountValue(const Count& c) { Long(false, c.wide()); }

void PickleStream::Number(double v) {
  if (std::isfinite(v) && Whole(v)) {
    Int(static_cast<int64_t>(v));
  } else {
    Float(v);  // non-finite: null
  }
}

void PickleStream::Float(double v) {
  if (!std::isfinite(v)) {
    Null();  // as DumpJson writes it
    return;
  }
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  char* p = Room(9);
  p[0] = kBinFloat;  // big-endian
  for (int i = 0; i < 8; ++i) p[1 + i] = static_cast<char>((bits >> (8 * (7 - i))) & 0xff);
}

void AppendJsonValue(const nlohmann::json& j, PickleStream& out) {
  using Type = nlohmann::json::value_t;
  switch (j.type()) {
    case Type::object:
      out.BeginObject();
      // Keys by text, not by address: a tree's keys are no static text.
      for (const auto& [key, value] : j.items()) {
        out.String(key);
        AppendJsonValue(value, out);
      }
      out.EndObject();
      return;
    case Type::array:
      out.BeginArray();
      for (const auto& value : j) AppendJsonValue(value, out);
      out.EndArray();
      return;
    case Type::string:
      out.String(j.get_ref<const std::string&>());
      return;
    case Type::boolean:
      out.Bool(j.get<bool>());
      return;
    case Type::number_integer:
      out.Int(j.get<int64_t>());
      return;
    case Type::number_unsigned:
      out.Long(false, j.get<uint64_t>());
      return;
    case Type::number_float:
      out.Float(j.get<double>());
      return;
    case Type::binary: {
      bool negative = false;
      Count::Wide magnitude = 0;
      if (IsWideCount(j, &negative, &magnitude)) {
        out.Long(negative && magnitude != 0, magnitude);
        return;
      }
      break;
    }
    default:
      break;
  }
  out.Null();  // null, and what DumpJson writes no value for
}

}  // namespace torchscan::reports
