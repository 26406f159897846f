// The guesses of Note [Repeated calls] (torchscan_dispatch/core/call_table.cc):
// a call compared in place with its operator's last signatures gets exactly
// the signature recording and interning it would (the slow path), and a call
// that differs in anything recorded gets another one.
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_nested_tensor_from_tensor_list.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "torchscan_dispatch/core/call_table.h"

namespace torchscan {
namespace {

const c10::OperatorHandle& Op(const char* name, const char* overload) {
  static std::deque<c10::OperatorHandle>* ops = new std::deque<c10::OperatorHandle>();  // stable addresses
  ops->push_back(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload));
  return ops->back();
}

uintptr_t Address(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()); }

const c10::DispatchKeySet kKeys(c10::DispatchKey::CPU);

struct Called {
  const CallSig* started;
  const CallSig* finished;
  std::vector<uintptr_t> tensors;  // the call's tensors, numbered as its signature says
};

// One call through the table, as the recorder makes it (Begin, then End).
Called Call(CallTable& table, const c10::OperatorHandle& op, std::vector<c10::IValue> args,
            std::vector<c10::IValue> outs, c10::DispatchKeySet keys = kKeys) {
  CallTensors tensors;
  const CallSig* started = table.Start(op, keys, args, tensors);
  EXPECT_EQ(tensors.addresses().size(), started->arg_tensors);
  const std::vector<uintptr_t> operands = tensors.addresses();
  tensors.Reset(operands.data(), operands.size());
  const CallSig* finished = table.Finish(started, outs, tensors);
  EXPECT_EQ(finished->started, started);
  EXPECT_EQ(tensors.addresses().size(), finished->tensors);
  return {started, finished, tensors.addresses()};
}

// Evicts every guess for `op` (two ways per operator and keys): the next
// call of `op` is recorded and interned.
void Evict(CallTable& table, const c10::OperatorHandle& op) {
  for (int64_t n : {101, 102}) Call(table, op, {at::ones({n}), at::ones({n}), 1}, {at::empty({n})});
}

// `variant` differs from `base` in one recorded value: it gets a signature of
// its own, the one the slow path gives it; `base` repeated still gets its own.
void ExpectApart(const c10::OperatorHandle& op, std::vector<c10::IValue> base, std::vector<c10::IValue> variant,
                 std::vector<c10::IValue> outs, std::vector<c10::IValue> variant_outs = {}) {
  if (variant_outs.empty()) variant_outs = outs;
  CallTable table;
  const Called first = Call(table, op, base, outs);  // recorded
  const size_t guessed = table.guessed();
  const Called again = Call(table, op, base, outs);  // guessed
  EXPECT_EQ(table.guessed(), guessed + 2);           // its start and its end
  EXPECT_EQ(again.started, first.started);
  EXPECT_EQ(again.finished, first.finished);
  EXPECT_EQ(again.tensors, first.tensors);
  const Called v = Call(table, op, variant, variant_outs);
  EXPECT_NE(v.finished, first.finished);
  const size_t kept = table.size();
  const size_t guessed_v = table.guessed();
  const Called v_again = Call(table, op, variant, variant_outs);  // guessed
  EXPECT_EQ(table.guessed(), guessed_v + 2);
  EXPECT_EQ(v_again.started, v.started);
  EXPECT_EQ(v_again.finished, v.finished);
  EXPECT_EQ(Call(table, op, base, outs).finished, first.finished);  // the second way
  EXPECT_EQ(table.size(), kept);                                    // nothing recorded anew
  Evict(table, op);
  const size_t before_slow = table.guessed();
  const Called slow = Call(table, op, variant, variant_outs);  // recorded and interned again
  EXPECT_LE(table.guessed(), before_slow + 1);                 // at most its end (its start's last end)
  EXPECT_EQ(slow.started, v.started);
  EXPECT_EQ(slow.finished, v.finished);
  EXPECT_EQ(slow.tensors, v.tensors);
}

TEST(RepeatedCalls, ARepeatGetsTheSignatureAndTensorsTheSlowPathGives) {
  const auto& add = Op("aten::add", "Tensor");
  CallTable table;
  const at::Tensor x = at::ones({4}), y = at::ones({4});
  const at::Tensor out1 = at::empty({4}), out2 = at::empty({4});
  const Called first = Call(table, add, {x, y, 1}, {out1});
  const size_t kept = table.size();
  const Called second = Call(table, add, {x, y, 1}, {out2});
  EXPECT_EQ(table.size(), kept);
  EXPECT_EQ(table.guessed(), 2u);
  EXPECT_EQ(second.started, first.started);
  EXPECT_EQ(second.finished, first.finished);
  EXPECT_EQ(second.tensors, (std::vector<uintptr_t>{Address(x), Address(y), Address(out2)}));
  Evict(table, add);
  const Called slow = Call(table, add, {x, y, 1}, {out1});
  EXPECT_EQ(slow.started, first.started);
  EXPECT_EQ(slow.finished, first.finished);
}

TEST(RepeatedCalls, OneSizeStrideDtypeOrLayoutApart) {
  const auto& add = Op("aten::add", "Tensor");
  const at::Tensor a = at::ones({2, 3}), out = at::empty({2, 3});
  ExpectApart(add, {a, at::ones({2, 3}), 1}, {a, at::ones({2, 4}), 1}, {out});               // a size
  ExpectApart(add, {a, at::ones({2, 3}), 1}, {a, at::ones({2, 3, 1}), 1}, {out});            // the rank
  ExpectApart(add, {a, at::ones({3, 2}).t(), 1}, {a, at::ones({2, 3}), 1}, {out});           // strides only
  ExpectApart(add, {a, at::ones({2, 3}), 1}, {a, at::ones({2, 3}, at::kDouble), 1}, {out});  // dtype
  ExpectApart(add, {a, at::ones({2, 3}), 1}, {a, at::ones({2, 3}).to_sparse(), 1}, {out});   // layout
  ExpectApart(add, {a, a, 1}, {a, a, 1}, {out}, {at::empty({6})});                           // a return's shape
}

TEST(RepeatedCalls, ScalarsApartBitForBit) {
  const auto& add = Op("aten::add", "Tensor");
  const auto& mul = Op("aten::mul", "Scalar");
  const at::Tensor a = at::ones({3}), b = at::ones({3}), out = at::empty({3});
  ExpectApart(add, {a, b, 1}, {a, b, 2}, {out});
  ExpectApart(add, {a, b, 1}, {a, b, 1.0}, {out});  // an int and a double alpha
  ExpectApart(add, {a, b, 1}, {a, b, true}, {out});
  ExpectApart(mul, {a, 0.0}, {a, -0.0}, {out});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ExpectApart(mul, {a, nan}, {a, 1.5}, {out});
  CallTable table;
  EXPECT_EQ(Call(table, mul, {a, nan}, {out}).finished, Call(table, mul, {a, nan}, {out}).finished);
  const auto& div = Op("aten::div", "Tensor_mode");
  ExpectApart(div, {a, b, std::string("floor")}, {a, b, std::string("trunc")}, {out});
  ExpectApart(div, {a, b, std::string("floor")}, {a, b, c10::IValue()}, {out});
}

TEST(RepeatedCalls, WhichTensorIsWhichApart) {
  const auto& add = Op("aten::add", "Tensor");
  const auto& add_ = Op("aten::add_", "Tensor");
  const at::Tensor x = at::ones({3}), y = at::ones({3}), out = at::empty({3});
  ExpectApart(add, {x, y, 1}, {x, x, 1}, {out});       // one tensor twice
  ExpectApart(add, {x, y, 1}, {y, x, 1}, {out}, {x});  // the return is an operand
  ExpectApart(add_, {x, y, 1}, {x, y, 1}, {x}, {y});
  // The same pattern on other tensors is the same call.
  CallTable table;
  const at::Tensor p = at::ones({3}), q = at::ones({3});
  EXPECT_EQ(Call(table, add, {x, y, 1}, {out}).finished, Call(table, add, {p, q, 1}, {x}).finished);
  const Called in_place = Call(table, add_, {p, q, 1}, {p});
  EXPECT_EQ(in_place.tensors, (std::vector<uintptr_t>{Address(p), Address(q)}));
}

TEST(RepeatedCalls, ListsApart) {
  const auto& sum = Op("aten::sum", "dim_IntList");
  const auto& cat = Op("aten::cat", "");
  const auto& index = Op("aten::index", "Tensor");
  const at::Tensor m = at::ones({2, 3}), idx = at::zeros({2}, at::kLong), out = at::empty({2});
  ExpectApart(sum, {m, std::vector<int64_t>{1}, false, c10::IValue()},
              {m, std::vector<int64_t>{0}, false, c10::IValue()}, {out});
  ExpectApart(sum, {m, std::vector<int64_t>{1}, false, c10::IValue()},
              {m, std::vector<int64_t>{1}, true, c10::IValue()}, {out});
  const at::Tensor u = at::ones({1}), v = at::ones({1});
  ExpectApart(cat, {std::vector<at::Tensor>{u, v}, 0}, {std::vector<at::Tensor>{u, u}, 0}, {out});
  ExpectApart(cat, {std::vector<at::Tensor>{u, v}, 0}, {std::vector<at::Tensor>{u, v, u}, 0}, {out});
  ExpectApart(cat, {std::vector<at::Tensor>{u, v}, 0}, {std::vector<at::Tensor>{u, at::ones({2})}, 0}, {out});
  // Tensor?[]: a generic list of optional tensors.
  auto optional = [](std::vector<std::optional<at::Tensor>> ts) {
    c10::List<std::optional<at::Tensor>> l;
    for (auto& t : ts) l.push_back(t);
    return c10::IValue(l);
  };
  ExpectApart(index, {m, optional({idx})}, {m, optional({std::nullopt, idx})}, {out});
  ExpectApart(index, {m, optional({std::nullopt, idx})}, {m, optional({idx, idx})}, {out});
}

TEST(RepeatedCalls, NestedTensorsApart) {
  const auto& add = Op("aten::add", "Tensor");
  const at::Tensor nt = at::_nested_tensor_from_tensor_list({at::ones({2, 3}), at::ones({1, 3})});
  const at::Tensor dense = at::ones({2, 3}), out = at::empty({2, 3});
  ExpectApart(add, {nt, nt, 1}, {dense, dense, 1}, {out});
}

TEST(RepeatedCalls, NeverAnotherOperatorsOrKeysSignature) {
  const auto& add = Op("aten::add", "Tensor");
  const auto& sub = Op("aten::sub", "Tensor");
  CallTable table;
  const at::Tensor x = at::ones({3}), y = at::ones({3}), out = at::empty({3});
  const Called a = Call(table, add, {x, y, 1}, {out});
  const Called s = Call(table, sub, {x, y, 1}, {out});
  EXPECT_NE(s.started, a.started);
  EXPECT_EQ(s.started->op, sub);
  const c10::DispatchKeySet other = kKeys | c10::DispatchKeySet(c10::DispatchKey::AutogradCPU);
  const Called k = Call(table, add, {x, y, 1}, {out}, other);
  EXPECT_NE(k.started, a.started);
  EXPECT_EQ(k.started->keys, other);
  EXPECT_EQ(Call(table, add, {x, y, 1}, {out}).finished, a.finished);
}

TEST(RepeatedCalls, ARunningCallThatEndsAnotherWay) {
  const auto& add = Op("aten::add", "Tensor");
  CallTable table;
  const at::Tensor x = at::ones({3}), y = at::ones({3});
  const Called fresh = Call(table, add, {x, y, 1}, {at::empty({3})});
  // The same start, ended differently: a return that is an operand, a raise.
  const Called aliased = Call(table, add, {x, y, 1}, {y});
  EXPECT_EQ(aliased.started, fresh.started);
  EXPECT_NE(aliased.finished, fresh.finished);
  EXPECT_EQ(aliased.tensors, (std::vector<uintptr_t>{Address(x), Address(y)}));  // nothing left from the guess
  EXPECT_EQ(aliased.finished->outputs[0].tensor().identity, 2u);
  const CallSig* raised = table.Stop(fresh.started, StopHow::kRaised);
  EXPECT_TRUE(raised->raised);
  // The three ways to end without returns are three signatures.
  const CallSig* stopped = table.Stop(fresh.started, StopHow::kStopped);
  const CallSig* unfinished = table.Stop(fresh.started, StopHow::kUnfinished);
  EXPECT_FALSE(stopped->raised || stopped->unfinished);
  EXPECT_TRUE(unfinished->unfinished && !unfinished->raised);
  EXPECT_NE(stopped, raised);
  EXPECT_NE(unfinished, stopped);
  EXPECT_EQ(table.Stop(fresh.started, StopHow::kUnfinished), unfinished);
  const at::Tensor out = at::empty({3});
  const Called back = Call(table, add, {x, y, 1}, {out});
  EXPECT_EQ(back.finished, fresh.finished);
  EXPECT_EQ(back.tensors, (std::vector<uintptr_t>{Address(x), Address(y), Address(out)}));
}

TEST(RepeatedCalls, NothingStaleAfterClear) {
  const auto& add = Op("aten::add", "Tensor");
  CallTable table;
  const at::Tensor x = at::ones({3}), y = at::ones({3}), out = at::empty({3});
  Call(table, add, {x, y, 1}, {out});
  Call(table, add, {x, y, 1}, {out});
  ASSERT_EQ(table.size(), 2u);  // started and finished
  table.Clear();
  ASSERT_EQ(table.size(), 0u);
  // Recorded afresh (a stale guess would leave the table empty).
  const size_t guessed = table.guessed();
  const Called after = Call(table, add, {x, y, 1}, {out});
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.guessed(), guessed);
  EXPECT_EQ(after.started->op, add);
  EXPECT_EQ(after.started->args[0].tensor().sizes(), c10::IntArrayRef({3}));
  EXPECT_EQ(after.finished->outputs[0].tensor().identity, 3u);
  EXPECT_EQ(Call(table, add, {x, y, 1}, {out}).finished, after.finished);
  EXPECT_EQ(table.size(), 2u);
}

}  // namespace
}  // namespace torchscan
