// Builds OpCall metadata by hand for formula tests.
#pragma once

#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "formulas/op_call.h"

namespace torchscan::testing {

class CallBuilder {
 public:
  explicit CallBuilder(std::string name) : name_(std::move(name)) {}

  CallBuilder& Tensor(std::initializer_list<int64_t> sizes, c10::ScalarType dtype = c10::kFloat) {
    args_.push_back(MakeTensor(sizes, dtype));
    return *this;
  }
  CallBuilder& None() { return Push(args_, ArgMeta::None()); }
  CallBuilder& Int(int64_t v) { return Push(args_, ArgMeta::Int(v)); }
  CallBuilder& Bool(bool v) { return Push(args_, ArgMeta::Bool(v)); }
  CallBuilder& Double(double v) { return Push(args_, ArgMeta::Double(v)); }
  CallBuilder& Str(std::string v) {
    auto& store = strings_.emplace_back(std::move(v));
    return Push(args_, ArgMeta::String(store.data(), store.size()));
  }
  CallBuilder& Ints(std::initializer_list<int64_t> v, ArgKind kind = ArgKind::kIntList) {
    auto& store = lists_.emplace_back(v);
    return Push(args_, ArgMeta::Ints(kind, store.data(), store.size()));
  }
  CallBuilder& Bools(std::initializer_list<int64_t> v) { return Ints(v, ArgKind::kBoolList); }
  CallBuilder& Out(std::initializer_list<int64_t> sizes, c10::ScalarType dtype = c10::kFloat) {
    outs_.push_back(MakeTensor(sizes, dtype));
    return *this;
  }
  CallBuilder& OutNone() { return Push(outs_, ArgMeta::None()); }

  OpCall Call() const { return OpCall{name_, "", args_, outs_}; }

 private:
  CallBuilder& Push(std::vector<ArgMeta>& to, ArgMeta a) {
    to.push_back(a);
    return *this;
  }
  ArgMeta MakeTensor(std::initializer_list<int64_t> sizes, c10::ScalarType dtype) {
    auto& store = lists_.emplace_back(sizes);
    TensorMeta& t = tensors_.emplace_back();
    t.defined = true;
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(store.size());
    t.size_data = store.data();
    return ArgMeta::Tensor(&t);
  }

  std::string name_;
  std::deque<std::vector<int64_t>> lists_;  // stable addresses for the pointers
  std::deque<TensorMeta> tensors_;
  std::deque<std::string> strings_;
  std::vector<ArgMeta> args_, outs_;
};

}  // namespace torchscan::testing
