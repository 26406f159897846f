// Shared call signatures (torchscan_dispatch/core/call_table.h): calls that are the
// same share one signature, each keeps only its tensors' addresses, and the
// views that follow tensors read those addresses back (ResolvedCall).
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>

#include <cmath>
#include <deque>
#include <limits>
#include <vector>

#include "torchscan_dispatch/core/arena.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {
namespace {

const c10::OperatorHandle& Op(const char* name, const char* overload) {
  static std::deque<c10::OperatorHandle>* ops = new std::deque<c10::OperatorHandle>();  // stable addresses
  ops->push_back(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload));
  return ops->back();
}

uintptr_t Address(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()); }

const c10::DispatchKeySet kKeys(c10::DispatchKey::CPU);

// One finished call of `op` with these operands and returns.
int32_t Call(Recorder& r, const c10::OperatorHandle& op, std::vector<c10::IValue> args, std::vector<c10::IValue> outs) {
  const int32_t i = r.Begin(op, kKeys, args);
  r.End(i, outs);
  return i;
}

TEST(CallTable, RepeatedCallsShareOneSignatureAndKeepTheirOwnTensors) {
  const auto& add = Op("aten::add", "Tensor");
  Recorder r;
  const at::Tensor x = at::ones({4}), y = at::ones({4});
  std::vector<at::Tensor> outs;
  for (int k = 0; k < 1000; ++k) {
    outs.push_back(at::empty({4}));  // kept alive: every result has its own address
    Call(r, add, {x, y, 1}, {outs.back()});
  }
  ASSERT_EQ(r.events().size(), 1000u);
  const CallSig* sig = r.events()[0].sig;
  for (size_t k = 0; k < 1000; ++k) EXPECT_EQ(r.events()[k].sig, sig);
  // Call-local numbers: x is 1, y is 2 (operands, in order), the result 3.
  EXPECT_EQ(sig->arg_tensors, 2u);
  EXPECT_EQ(sig->tensors, 3u);
  EXPECT_EQ(r.events()[7].args()[0].tensor().identity, 1u);
  EXPECT_EQ(r.events()[7].args()[1].tensor().identity, 2u);
  EXPECT_EQ(r.events()[7].outputs()[0].tensor().identity, 3u);
  EXPECT_TRUE(sig->finished);
  EXPECT_FALSE(sig->raised);
  for (size_t k : {0u, 1u, 500u, 999u}) {
    const ResolvedCall rc(r.events()[k]);
    EXPECT_EQ(rc.args()[0].tensor().identity, Address(x));
    EXPECT_EQ(rc.args()[1].tensor().identity, Address(y));
    EXPECT_EQ(rc.outputs()[0].tensor().identity, Address(outs[k]));
    EXPECT_EQ(rc.args()[2].to_int(), 1);
    EXPECT_EQ(rc.outputs()[0].tensor().sizes(), c10::IntArrayRef({4}));
  }
}

TEST(CallTable, TheSameTensorTwiceIsOneNumber) {
  const auto& add = Op("aten::add", "Tensor");
  const auto& add_ = Op("aten::add_", "Tensor");
  Recorder r;
  const at::Tensor x = at::ones({3}), out = at::empty({3});
  const CallSig* twice = r.events()[Call(r, add, {x, x, 1}, {out})].sig;
  EXPECT_EQ(twice->arg_tensors, 1u);  // x, x
  EXPECT_EQ(twice->tensors, 2u);      // and the result
  EXPECT_EQ(twice->args[1].tensor().identity, 1u);
  EXPECT_EQ(twice->outputs[0].tensor().identity, 2u);
  // In place: the result is the first operand, number 1; nothing new kept.
  const Event& in_place = r.events()[Call(r, add_, {x, x, 1}, {x})];
  EXPECT_EQ(in_place.sig->tensors, 1u);
  EXPECT_EQ(in_place.outputs()[0].tensor().identity, 1u);
  EXPECT_EQ(ResolvedCall(in_place).outputs()[0].tensor().identity, Address(x));
  // add(x, x) and add(x, y) are different calls (a formula may tell them apart).
  const at::Tensor y = at::ones({3});
  EXPECT_NE(r.events()[Call(r, add, {x, y, 1}, {out})].sig, twice);
}

TEST(CallTable, WhatAFormulaReadsTellsSignaturesApart) {
  const auto& add = Op("aten::add", "Tensor");
  const auto& mul = Op("aten::mul", "Scalar");
  Recorder r;
  const at::Tensor a = at::ones({2, 3}), out = at::empty({2, 3});
  const CallSig* base = r.events()[Call(r, add, {a, a, 1}, {out})].sig;
  EXPECT_EQ(r.events()[Call(r, add, {a, a, 1}, {out})].sig, base);
  // Shape, strides, dtype, a scalar, the operator, the return's shape.
  EXPECT_NE(r.events()[Call(r, add, {at::ones({3, 2}), at::ones({3, 2}), 1}, {out})].sig, base);
  EXPECT_NE(r.events()[Call(r, add, {a.t(), a.t(), 1}, {out})].sig, base);
  EXPECT_NE(r.events()[Call(r, add, {a.to(at::kDouble), a.to(at::kDouble), 1}, {out})].sig, base);
  EXPECT_NE(r.events()[Call(r, add, {a, a, 2}, {out})].sig, base);
  EXPECT_NE(r.events()[Call(r, add, {a, a, 1}, {at::empty({6})})].sig, base);
  const CallSig* m = r.events()[Call(r, mul, {a, 2.0}, {out})].sig;
  EXPECT_NE(m, base);
  EXPECT_NE(r.events()[Call(r, mul, {a, -0.0}, {out})].sig, r.events()[Call(r, mul, {a, 0.0}, {out})].sig);
  // A NaN scalar is the same scalar again (compared bit for bit).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(r.events()[Call(r, mul, {a, nan}, {out})].sig, r.events()[Call(r, mul, {a, nan}, {out})].sig);
}

TEST(CallTable, RunningRaisedAndNestedCalls) {
  const auto& linear = Op("aten::linear", "");
  const auto& mm = Op("aten::mm", "");
  Recorder r;
  const at::Tensor x = at::ones({2, 3}), w = at::ones({4, 3}), inner_out = at::empty({2, 4});
  // A running call: its operands are known, it has not finished.
  const int32_t outer = r.Begin(linear, kKeys, std::vector<c10::IValue>{x, w, c10::IValue()});
  EXPECT_FALSE(r.events()[outer].finished());
  EXPECT_EQ(ResolvedCall(r.events()[outer]).args()[1].tensor().identity, Address(w));
  // Its child keeps tensors of its own in between, so the parent's grow elsewhere.
  const int32_t inner = Call(r, mm, {x, w.t()}, {inner_out});
  r.End(outer, std::vector<c10::IValue>{inner_out});
  const ResolvedCall o(r.events()[outer]), i(r.events()[inner]);
  EXPECT_EQ(o.args()[0].tensor().identity, Address(x));
  EXPECT_EQ(o.args()[1].tensor().identity, Address(w));
  EXPECT_EQ(o.outputs()[0].tensor().identity, Address(inner_out));
  EXPECT_EQ(i.args()[0].tensor().identity, Address(x));
  EXPECT_EQ(i.outputs()[0].tensor().identity, Address(inner_out));
  EXPECT_EQ(r.events()[inner].parent, outer);
  // A raised call: finished, raised, no returns; a signature of its own.
  const int32_t failed = r.Begin(mm, kKeys, std::vector<c10::IValue>{x, w.t()});
  r.Abort(failed);
  const Event& f = r.events()[failed];
  EXPECT_TRUE(f.finished());
  EXPECT_TRUE(f.raised());
  EXPECT_TRUE(f.outputs().empty());
  EXPECT_NE(f.sig, r.events()[inner].sig);
  EXPECT_EQ(f.sig->started, r.events()[inner].sig->started);  // the same call as it started
}

TEST(CallTable, ManyTensorsInOneCall) {
  const auto& cat = Op("aten::cat", "");
  Recorder r;
  std::vector<at::Tensor> parts;
  for (int k = 0; k < 40; ++k) parts.push_back(at::ones({1}));
  const at::Tensor again = parts[3];
  parts.push_back(again);  // the same number again (past the linear search)
  const at::Tensor out = at::empty({41});
  const Event& e = r.events()[Call(r, cat, {at::TensorList(parts), 0}, {out})];
  EXPECT_EQ(e.sig->tensors, 41u);
  const auto listed = e.args()[0].tensors();
  EXPECT_EQ(listed[40].identity, listed[3].identity);
  const ResolvedCall rc(e);
  for (size_t k = 0; k < parts.size(); ++k) EXPECT_EQ(rc.args()[0].tensors()[k].identity, Address(parts[k]));
  EXPECT_EQ(rc.outputs()[0].tensor().identity, Address(out));
}

TEST(Arena, RewindGivesBackWhatFollowedTheMark) {
  Arena a;
  int64_t* first = a.Alloc<int64_t>(4);
  const Arena::Mark m = a.GetMark();
  int64_t* probe = a.Alloc<int64_t>(8);
  a.Alloc<unsigned char>(3 * kBlockBytes / 2);  // a block and a large allocation past the mark
  a.Alloc<int64_t>(kBlockBytes / 16);
  a.Rewind(m);
  EXPECT_EQ(a.Alloc<int64_t>(8), probe);  // the same place again
  // Growing in place: only the last allocation, only within its block.
  EXPECT_FALSE(a.Grow(first, 4, 6));
  int64_t* last = a.Alloc<int64_t>(2);
  EXPECT_TRUE(a.Grow(last, 2, 5));
  EXPECT_EQ(a.Alloc<int64_t>(1), last + 5);
  EXPECT_FALSE(a.Grow(last, 5, kBlockBytes));
}

}  // namespace
}  // namespace torchscan
