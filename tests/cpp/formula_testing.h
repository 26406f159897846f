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
  CallBuilder& None() {
    args_.emplace_back();
    return *this;
  }
  CallBuilder& Int(int64_t v) {
    ArgMeta a;
    a.kind = ArgKind::kInt;
    a.i = v;
    args_.push_back(a);
    return *this;
  }
  CallBuilder& Bool(bool v) {
    ArgMeta a;
    a.kind = ArgKind::kBool;
    a.i = v;
    args_.push_back(a);
    return *this;
  }
  CallBuilder& Ints(std::initializer_list<int64_t> v, ArgKind kind = ArgKind::kIntList) {
    auto& store = lists_.emplace_back(v);
    ArgMeta a;
    a.kind = kind;
    a.ints = store;
    args_.push_back(a);
    return *this;
  }
  CallBuilder& Bools(std::initializer_list<int64_t> v) { return Ints(v, ArgKind::kBoolList); }
  CallBuilder& Out(std::initializer_list<int64_t> sizes, c10::ScalarType dtype = c10::kFloat) {
    outs_.push_back(MakeTensor(sizes, dtype));
    return *this;
  }
  CallBuilder& OutNone() {
    outs_.emplace_back();
    return *this;
  }

  OpCall Call() const { return OpCall{name_, "", args_, outs_}; }

 private:
  ArgMeta MakeTensor(std::initializer_list<int64_t> sizes, c10::ScalarType dtype) {
    auto& store = lists_.emplace_back(sizes);
    ArgMeta a;
    a.kind = ArgKind::kTensor;
    a.tensor.defined = true;
    a.tensor.dtype = dtype;
    a.tensor.sizes = store;
    return a;
  }

  std::string name_;
  std::deque<std::vector<int64_t>> lists_;  // stable addresses for the spans
  std::vector<ArgMeta> args_, outs_;
};

}  // namespace torchscan::testing
