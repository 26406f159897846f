// Builds OpCall metadata by hand for formula tests.
#pragma once

#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <string_view>

#include "formulas/op_call.h"
#include "formulas/registry.h"

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
  // A Tensor?[] argument (index lists); a shape of {-1} stands for None.
  CallBuilder& TensorList(std::initializer_list<std::vector<int64_t>> shapes, c10::ScalarType dtype = c10::kLong) {
    auto& list = tensor_lists_.emplace_back();
    for (const auto& shape : shapes) {
      list.push_back(shape == std::vector<int64_t>{-1} ? TensorMeta{} : Meta(lists_.emplace_back(shape), dtype));
    }
    return Push(args_, ArgMeta::Tensors(list.data(), list.size()));
  }
  // Gives the tensor added last (argument or output) an identity.
  CallBuilder& Id(uintptr_t identity) {
    tensors_.back().identity = identity;
    return *this;
  }
  // The schema lets the returns alias the inputs (OpCall::returns_alias).
  CallBuilder& ReturnsAlias() {
    returns_alias_ = true;
    return *this;
  }

  OpCall Call() const {
    OpCall call{name_, "", args_, outs_};
    call.returns_alias = returns_alias_;
    return call;
  }

 private:
  CallBuilder& Push(std::vector<ArgMeta>& to, ArgMeta a) {
    to.push_back(a);
    return *this;
  }
  ArgMeta MakeTensor(std::initializer_list<int64_t> sizes, c10::ScalarType dtype) {
    return ArgMeta::Tensor(&tensors_.emplace_back(Meta(lists_.emplace_back(sizes), dtype)));
  }
  static TensorMeta Meta(const std::vector<int64_t>& store, c10::ScalarType dtype) {
    TensorMeta t;
    t.defined = true;
    t.dtype = dtype;
    t.ndim = static_cast<int32_t>(store.size());
    t.size_data = store.data();
    return t;
  }

  std::string name_;
  std::deque<std::vector<int64_t>> lists_;  // stable addresses for the pointers
  std::deque<TensorMeta> tensors_;
  std::deque<std::vector<TensorMeta>> tensor_lists_;
  bool returns_alias_ = false;
  std::deque<std::string> strings_;
  std::vector<ArgMeta> args_, outs_;
};

// The built-in operator-view row of `op` on `call`; a test failure (and an
// unavailable result) when the table has no row for `op`.
inline FormulaResult Evaluate(std::string_view op, const OpCall& call) {
  const OperatorFormula* f = FindOperatorFormula(op);
  EXPECT_NE(f, nullptr) << op;
  return f ? f->flops(call) : FormulaResult::Unavailable("missing", "");
}
inline FormulaResult Evaluate(std::string_view op, const CallBuilder& b) { return Evaluate(op, b.Call()); }

// The count of a row that must be complete on this call (a test failure
// naming the operator and the row's message otherwise).
inline Count Flops(std::string_view op, const CallBuilder& b) {
  const FormulaResult r = Evaluate(op, b);
  EXPECT_EQ(r.status, MetricStatus::kComplete) << op << ": " << r.message;
  return r.value;
}

}  // namespace torchscan::testing
