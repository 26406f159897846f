// Module-view costs (module_flops, MACs, DMAs) on hand-built calls; each
// expected triple is derived in the comment from the row's convention.
#include <gtest/gtest.h>

#include <array>

#include "formulas/module_costs.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

std::array<Count, 3> Costs(std::string_view op, const CallBuilder& b) {
  const ModuleFormula* f = FindModuleFormula(op);
  EXPECT_NE(f, nullptr) << op;
  if (!f) return {-1, -1, -1};
  const ModuleCosts c = f->Evaluate(b.Call());
  for (const FormulaResult* r : {&c.flops, &c.macs, &c.dmas}) {
    EXPECT_EQ(r->status, MetricStatus::kComplete) << op << ": " << r->message;
  }
  return {c.flops.value, c.macs.value, c.dmas.value};
}

using Triple = std::array<Count, 3>;

TEST(ModuleDots, LinearWithAndWithoutBiasAndEmptyDots) {
  // (3,5) x W(2,5): 6 dots of 5 terms: 6*9 = 54 (+6 bias); MACs 30; DMAs 15 + 10 (+2) + 6.
  EXPECT_EQ(Costs("aten::linear", CallBuilder("aten::linear").Tensor({3, 5}).Tensor({2, 5}).Tensor({2}).Out({3, 2})),
            (Triple{60, 30, 33}));
  EXPECT_EQ(Costs("aten::linear", CallBuilder("aten::linear").Tensor({3, 5}).Tensor({2, 5}).None().Out({3, 2})),
            (Triple{54, 30, 31}));
  // in_features = 0: empty dots cost nothing, the bias adds still count (6).
  EXPECT_EQ(Costs("aten::linear", CallBuilder("aten::linear").Tensor({3, 0}).Tensor({2, 0}).Tensor({2}).Out({3, 2})),
            (Triple{6, 0, 8}));
}

TEST(ModuleDots, MatrixProducts) {
  // mm (2x3)(3x4): 8 dots of 3 terms: 8*5 = 40, MACs 24, DMAs 6 + 12 + 8 = 26.
  EXPECT_EQ(Costs("aten::mm", CallBuilder("aten::mm").Tensor({2, 3}).Tensor({3, 4}).Out({2, 4})), (Triple{40, 24, 26}));
  // addmm adds one bias add per output (8) and reads the bias (4).
  EXPECT_EQ(Costs("aten::addmm", CallBuilder("aten::addmm").Tensor({4}).Tensor({2, 3}).Tensor({3, 4}).Out({2, 4})),
            (Triple{48, 24, 30}));
  // bmm of 5 batches: 5x.
  EXPECT_EQ(Costs("aten::bmm", CallBuilder("aten::bmm").Tensor({5, 2, 3}).Tensor({5, 3, 4}).Out({5, 2, 4})),
            (Triple{200, 120, 130}));
}

CallBuilder Conv(std::initializer_list<int64_t> x, std::initializer_list<int64_t> w, bool bias, bool transposed,
                 int64_t groups, std::initializer_list<int64_t> out) {
  CallBuilder b("aten::convolution");
  b.Tensor(x).Tensor(w);
  bias ? b.Tensor({transposed ? *(w.begin() + 1) * groups : *w.begin()}) : b.None();
  b.Ints({1}).Ints({0}).Ints({1}).Bool(transposed).Ints({0}).Int(groups).Out(out);
  return b;
}

TEST(ModuleConvolution, GroupedDirect) {
  // Conv1d(4,6,3,groups=2,no bias): (2,4,7) -> (2,6,5) = 60 outputs of T = 2*3 = 6 terms:
  // FLOPs 60*11 = 660, MACs 360, DMAs 360 taps + 36 weights + 60 writes = 456.
  EXPECT_EQ(Costs("aten::convolution", Conv({2, 4, 7}, {6, 2, 3}, false, false, 2, {2, 6, 5})),
            (Triple{660, 360, 456}));
}

TEST(ModuleConvolution, TransposedScattersFromInputs) {
  // ConvTranspose1d(4->6, k=3, groups=2) on (2,4,3) -> (2,6,6): products 24 * 3 * 3 = 216:
  // FLOPs 432 + 72 biases = 504; MACs 216.
  // DMAs: gather view Cin/g * k = 2*3 taps per output * 72 = 432, parameters 36 + 6,
  // writes 72, legacy metadata 5 per spatial dim = 5 -> 551.
  EXPECT_EQ(Costs("aten::convolution", Conv({2, 4, 3}, {4, 3, 3}, true, true, 2, {2, 6, 6})), (Triple{504, 216, 551}));
}

CallBuilder BatchNorm(bool training, bool running, bool affine) {
  CallBuilder b("aten::native_batch_norm");
  b.Tensor({2, 3, 2});  // N = 12, C = 3, M = 4
  affine ? b.Tensor({3}) : b.None();
  affine ? b.Tensor({3}) : b.None();
  running ? b.Tensor({3}) : b.None();
  running ? b.Tensor({3}) : b.None();
  b.Bool(training).Double(0.1).Double(1e-5).Out({2, 3, 2});
  return b;
}

TEST(ModuleNormalization, BatchNormPaths) {
  // Eval, running stats, affine: FLOPs 2N + 2C + 2N = 54; MACs 2N = 24;
  // DMAs 2N + eps + momentum + 2C running + 2C affine = 38.
  EXPECT_EQ(Costs("aten::native_batch_norm", BatchNorm(false, true, true)), (Triple{54, 24, 38}));
  // Training with running stats: FLOPs + 4N + 8C = 54 + 48 + 24 = 126;
  // MACs 24 + C(M-1) + C(2M-1) + 4C = 24 + 9 + 21 + 12 = 66; DMAs 38 + 2C written = 44.
  EXPECT_EQ(Costs("aten::native_batch_norm", BatchNorm(true, true, true)), (Triple{126, 66, 44}));
  // Training without running stats or affine: FLOPs 2N + 2C + 4N = 78; MACs N = 12; DMAs 2N + 2 = 26.
  EXPECT_EQ(Costs("aten::native_batch_norm", BatchNorm(true, false, false)), (Triple{78, 12, 26}));
}

TEST(ModuleNormalization, EmptyRowsAreUnavailableZeroBatchIsZero) {
  CallBuilder zero("aten::rms_norm");
  zero.Tensor({0, 4}).Ints({4}).Tensor({4}).None();
  EXPECT_EQ(Costs("aten::rms_norm", zero), (Triple{0, 0, 0}));
  CallBuilder empty("aten::native_layer_norm");
  empty.Tensor({2, 0}).Ints({0}).None().None().Double(1e-5);
  EXPECT_EQ(FindModuleFormula("aten::native_layer_norm")->Evaluate(empty.Call()).dmas.status,
            MetricStatus::kUnavailable);
}

TEST(ModulePooling, IndicesAddAWritePerOutput) {
  // 3x3 windows (K = 9) over (1,1,6,6) stride 2, ceil -> (1,1,3,3) = 9 outputs:
  // FLOPs = MACs = 9*8 = 72; DMAs 9*(9 + 1) = 90, plus 9 index writes = 99.
  CallBuilder b("aten::max_pool2d_with_indices");
  b.Tensor({1, 1, 6, 6}).Ints({3, 3}).Ints({2, 2}).Ints({0, 0}).Ints({1, 1}).Bool(true);
  b.Out({1, 1, 3, 3}).Out({1, 1, 3, 3}, c10::kLong);
  EXPECT_EQ(Costs("aten::max_pool2d_with_indices", b), (Triple{72, 72, 99}));
}

TEST(ModuleZeroCost, SplitWithSizesCopyMovesItsInputOnce) {
  // A (6, 4) input split into rows [2, 4] and copied out: every one of its
  // 24 elements is read once and written once, 48 accesses. The out=
  // overload returns nothing, so the input, not the returns, says so.
  CallBuilder out("aten::split_with_sizes_copy");
  out.Tensor({6, 4}).Ints({2, 4}).Int(0);
  EXPECT_EQ(ZeroCostCosts(out.Call(), ZeroCostReason::kCopy).dmas.value, 48);
  EXPECT_EQ(ZeroCostCosts(out.Call(), ZeroCostReason::kCopy).flops.value, 0);
}

TEST(ModuleZeroCost, ACallThatReturnedItsInputMovedNothing) {
  // x.to(x.dtype) hands x back (same identity; the schema lets it alias): zero.
  CallBuilder same("aten::to");
  same.Tensor({2, 3}).Id(7).Int(6).Out({2, 3}).Id(7).ReturnsAlias();
  const ModuleCosts noop = ZeroCostCosts(same.Call(), ZeroCostReason::kCopy);
  EXPECT_EQ(noop.dmas.value, 0);
  EXPECT_EQ(noop.dmas.status, MetricStatus::kComplete);
  // A real cast returns a new tensor: a copy, 2 * 6 accesses.
  CallBuilder cast("aten::to");
  cast.Tensor({2, 3}).Id(7).Int(7).Out({2, 3}, c10::kDouble).Id(8).ReturnsAlias();
  EXPECT_EQ(ZeroCostCosts(cast.Call(), ZeroCostReason::kCopy).dmas.value, 12);
  // copy_ returns its (written) self: the schema marks a write, so it still
  // moved 6 values: 12 accesses.
  CallBuilder copy("aten::copy_");
  copy.Tensor({2, 3}).Id(7).Tensor({2, 3}).Id(9).Out({2, 3}).Id(7);
  EXPECT_EQ(ZeroCostCosts(copy.Call(), ZeroCostReason::kCopy).dmas.value, 12);
}

TEST(ModuleScatter, SourceIsReadOnlyWhereTheIndexPoints) {
  // scatter_add(self (3,5), 0, index (1,5), src (3,5)): 5 adds; reads self 15,
  // index 5 and the 5 src values it points at, writes 15: 40 (not 15 + 5 + 15 + 15).
  EXPECT_EQ(
      Costs(
          "aten::scatter_add",
          CallBuilder("aten::scatter_add").Tensor({3, 5}).Int(0).Tensor({1, 5}, c10::kLong).Tensor({3, 5}).Out({3, 5})),
      (Triple{5, 0, 40}));
  // A scalar value with reduce="add": nothing read for it: 35.
  EXPECT_EQ(Costs("aten::scatter", CallBuilder("aten::scatter")
                                       .Tensor({3, 5})
                                       .Int(0)
                                       .Tensor({1, 5}, c10::kLong)
                                       .Double(2.0)
                                       .Str("add")
                                       .Out({3, 5})),
            (Triple{5, 0, 35}));
}

TEST(ModuleCopies, IndexCopyMovesTheSourceNotAllOfSelf) {
  // A cache (5,2) updated at 2 rows from (2,2): reads 2 ids + 4 values, writes 4: 10.
  EXPECT_EQ(
      Costs("aten::index_copy_",
            CallBuilder("aten::index_copy_").Tensor({5, 2}).Int(0).Tensor({2}, c10::kLong).Tensor({2, 2}).Out({5, 2})),
      (Triple{0, 0, 10}));
}

TEST(ModuleDistances, EuclideanDistStagesItsKernel) {
  // x1 (2,3), x2 (4,3), out (2,4): M = 3, rows 2 + 4 = 6, padded rows 6 * 5 = 30.
  // FLOPs: operator view 2*(5+3) + 4*5 + 8*(2*5 + 2) = 16 + 20 + 96 = 132, minus
  // one per output for module dots: 124. MACs 8*5 + 6*3 = 58.
  // DMAs: norms 6 + 12 + 6 = 24, ones 6, x1*-2 12, cats 6 + 12 + 12 + 30 = 60,
  // dots 30 + 8 = 38, clamp/sqrt 32: 172.
  EXPECT_EQ(
      Costs("aten::_euclidean_dist", CallBuilder("aten::_euclidean_dist").Tensor({2, 3}).Tensor({4, 3}).Out({2, 4})),
      (Triple{124, 58, 172}));
}

TEST(ModuleResolve, NegationIsPointwiseOnlyWhenItRan) {
  // New tensor: 6 negations, 6 reads + 6 writes; its input back: nothing.
  EXPECT_EQ(Costs("aten::resolve_neg",
                  CallBuilder("aten::resolve_neg").Tensor({2, 3}).Id(1).Out({2, 3}).Id(2).ReturnsAlias()),
            (Triple{6, 0, 12}));
  EXPECT_EQ(Costs("aten::resolve_neg",
                  CallBuilder("aten::resolve_neg").Tensor({2, 3}).Id(1).Out({2, 3}).Id(1).ReturnsAlias()),
            (Triple{0, 0, 0}));
}

TEST(ModuleReductions, NewPointwiseRows) {
  // F.fold (1,8,9) -> (1,2,4,4): 40 adds (sum rule), reads 72 + writes 32.
  EXPECT_EQ(Costs("aten::col2im", CallBuilder("aten::col2im")
                                      .Tensor({1, 8, 9})
                                      .Ints({4, 4})
                                      .Ints({2, 2})
                                      .Ints({1, 1})
                                      .Ints({0, 0})
                                      .Ints({1, 1})
                                      .Out({1, 2, 4, 4})),
            (Triple{40, 0, 104}));
  // tril of (2,3): 6 selections, 6 reads + 6 writes.
  EXPECT_EQ(Costs("aten::tril", CallBuilder("aten::tril").Tensor({2, 3}).Int(0).Out({2, 3})), (Triple{6, 0, 12}));
}

TEST(ModuleSoftmax, SafeSoftmaxAddsItsTestAndSelectionStages) {
  // (2,3) over dim 1: N = 6, R = 2. FLOPs 7N - 2R = 38. Accesses: softmax's
  // 8N + 4R = 56, plus the -inf test (read 6, write 6) and the selection
  // (read 6 flags + 6 values, write 6) = 30 -> 86.
  CallBuilder b("aten::_safe_softmax");
  b.Tensor({2, 3}).Int(1).None().Out({2, 3});
  const ModuleCosts c = FindModuleFormula("aten::_safe_softmax")->Evaluate(b.Call());
  EXPECT_EQ(c.flops.value, 38);
  EXPECT_EQ(c.macs.value, 0);
  EXPECT_EQ(c.dmas.status, MetricStatus::kComplete);
  EXPECT_EQ(c.dmas.value, 86);
}

TEST(ModuleUnsupported, HonestGaps) {
  // Weighted interpolation of integers, attention dropout inside the CPU kernel and
  // weight-norm accesses have no convention: unavailable, never zero.
  CallBuilder up("aten::upsample_bilinear2d");
  up.Tensor({1, 1, 2, 2}, c10::kByte).Ints({4, 4}).Bool(false).None().None().Out({1, 1, 4, 4}, c10::kByte);
  EXPECT_EQ(FindModuleFormula("aten::upsample_bilinear2d")->Evaluate(up.Call()).flops.status,
            MetricStatus::kUnavailable);
  CallBuilder sdpa("aten::_scaled_dot_product_flash_attention_for_cpu");
  sdpa.Tensor({1, 2, 3, 4}).Tensor({1, 2, 5, 4}).Tensor({1, 2, 5, 4}).Double(0.1).Bool(false);
  EXPECT_EQ(FindModuleFormula("aten::_scaled_dot_product_flash_attention_for_cpu")->Evaluate(sdpa.Call()).flops.code,
            "unsupported_attention_dropout");
  CallBuilder wn("aten::_weight_norm_interface");
  wn.Tensor({3, 4}).Tensor({3, 1}).Int(0);
  const ModuleCosts c = FindModuleFormula("aten::_weight_norm_interface")->Evaluate(wn.Call());
  EXPECT_EQ(c.flops.value, 3 * 12 + 3);
  EXPECT_EQ(c.dmas.code, "undefined_by_convention");
}

}  // namespace
}  // namespace torchscan
