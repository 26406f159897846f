// torchscan_training_v1 layer backward rows (formulas/layer_backward.h):
// pooling, interpolation, embedding, distance and grid-sampling gradients on
// tiny calls whose expected counts are written as arithmetic from each
// kernel's derivation.
#include <gtest/gtest.h>

#include <limits>

#include "formulas/layer_backward.h"
#include "formulas/registry.h"
#include "tests/cpp/formulas/formula_testing.h"

namespace torchscan {
namespace {

using testing::CallBuilder;

using testing::Evaluate;

using testing::Flops;

TEST(LayerBackwardRows, EveryKernelHasARow) {
  for (const char* op : {"aten::max_pool2d_with_indices_backward",
                         "aten::max_pool3d_with_indices_backward",
                         "aten::adaptive_max_pool2d_backward",
                         "aten::adaptive_max_pool3d_backward",
                         "aten::avg_pool2d_backward",
                         "aten::avg_pool3d_backward",
                         "aten::_adaptive_avg_pool2d_backward",
                         "aten::_adaptive_avg_pool3d_backward",
                         "aten::upsample_nearest1d_backward",
                         "aten::upsample_nearest2d_backward",
                         "aten::upsample_nearest3d_backward",
                         "aten::_upsample_nearest_exact1d_backward",
                         "aten::_upsample_nearest_exact2d_backward",
                         "aten::_upsample_nearest_exact3d_backward",
                         "aten::upsample_linear1d_backward",
                         "aten::upsample_bilinear2d_backward",
                         "aten::upsample_trilinear3d_backward",
                         "aten::upsample_bicubic2d_backward",
                         "aten::embedding_dense_backward",
                         "aten::_embedding_bag_backward",
                         "aten::_embedding_bag_dense_backward",
                         "aten::_embedding_bag_per_sample_weights_backward",
                         "aten::_cdist_backward",
                         "aten::_pdist_backward",
                         "aten::grid_sampler_2d_backward",
                         "aten::reflection_pad1d_backward",
                         "aten::reflection_pad2d_backward",
                         "aten::reflection_pad3d_backward",
                         "aten::replication_pad1d_backward",
                         "aten::replication_pad2d_backward",
                         "aten::replication_pad3d_backward"}) {
    const OperatorFormula* f = FindOperatorFormula(op);
    ASSERT_NE(f, nullptr) << op;
    EXPECT_EQ(f->source, FormulaSource::kFallback) << op;
    EXPECT_FALSE(f->pointwise) << op;  // `self` is read for its shape only: not every operand element is read
  }
}

TEST(LayerBackwardPooling, MaxPoolAddsEachOutputGradientOnce) {
  // (1,2,5,5) pooled by 3x3/2 with padding 1 -> (1,2,3,3): 18 output gradients,
  // each one add at its saved index -> 18 (K does not matter).
  CallBuilder b("aten::max_pool2d_with_indices_backward");
  b.Tensor({1, 2, 3, 3})
      .Tensor({1, 2, 5, 5})
      .Ints({3, 3})
      .Ints({2, 2})
      .Ints({1, 1})
      .Ints({1, 1})
      .Bool(false)
      .Tensor({1, 2, 3, 3}, c10::kLong)
      .Out({1, 2, 5, 5});
  EXPECT_EQ(Flops("aten::max_pool2d_with_indices_backward", b), 18);
  // 3-D: (1,1,2,2,2) output gradients -> 8.
  CallBuilder b3("aten::max_pool3d_with_indices_backward");
  b3.Tensor({1, 1, 2, 2, 2})
      .Tensor({1, 1, 4, 4, 4})
      .Ints({2, 2, 2})
      .Ints({2, 2, 2})
      .Ints({0, 0, 0})
      .Ints({1, 1, 1})
      .Bool(false)
      .Tensor({1, 1, 2, 2, 2}, c10::kLong)
      .Out({1, 1, 4, 4, 4});
  EXPECT_EQ(Flops("aten::max_pool3d_with_indices_backward", b3), 8);
  // Adaptive max, unbatched (2,5,4) -> (2,3,2): 12 adds.
  CallBuilder a("aten::adaptive_max_pool2d_backward");
  a.Tensor({2, 3, 2}).Tensor({2, 5, 4}).Tensor({2, 3, 2}, c10::kLong).Out({2, 5, 4});
  EXPECT_EQ(Flops("aten::adaptive_max_pool2d_backward", a), 12);
  CallBuilder a3("aten::adaptive_max_pool3d_backward");
  a3.Tensor({1, 2, 3, 2, 3}).Tensor({1, 2, 4, 4, 4}).Tensor({1, 2, 3, 2, 3}, c10::kLong).Out({1, 2, 4, 4, 4});
  EXPECT_EQ(Flops("aten::adaptive_max_pool3d_backward", a3), 36);  // 2*3*2*3 outputs
  // A sparse gradient: no count.
  CallBuilder none("aten::max_pool2d_with_indices_backward");
  none.None().Tensor({1, 2, 5, 5}).Out({1, 2, 5, 5});
  EXPECT_EQ(Evaluate("aten::max_pool2d_with_indices_backward", none).status, MetricStatus::kUnavailable);
}

TEST(LayerBackwardPooling, AvgPoolDividesOnceAndAddsKTimesPerOutput) {
  // 3x3 windows (K = 9), 18 outputs: 1 divide + 9 adds each -> 10 * 18 = 180.
  CallBuilder b("aten::avg_pool2d_backward");
  b.Tensor({1, 2, 3, 3})
      .Tensor({1, 2, 5, 5})
      .Ints({3, 3})
      .Ints({2, 2})
      .Ints({1, 1})
      .Bool(false)
      .Bool(true)
      .None()
      .Out({1, 2, 5, 5});
  EXPECT_EQ(Flops("aten::avg_pool2d_backward", b), 180);
  // count_include_pad=false with divisor_override=2 changes the divisor, not the count: 180.
  CallBuilder d("aten::avg_pool2d_backward");
  d.Tensor({1, 2, 3, 3})
      .Tensor({1, 2, 5, 5})
      .Ints({3, 3})
      .Ints({2, 2})
      .Ints({1, 1})
      .Bool(false)
      .Bool(false)
      .Int(2)
      .Out({1, 2, 5, 5});
  EXPECT_EQ(Flops("aten::avg_pool2d_backward", d), 180);
  // One kernel size on an unbatched (2,5,5) input: the rank comes from the
  // operator's name (2-D), so K = 3 * 3 = 9 -> 180 again.
  CallBuilder u("aten::avg_pool2d_backward");
  u.Tensor({2, 3, 3}).Tensor({2, 5, 5}).Ints({3}).Ints({2}).Ints({1}).Bool(false).Bool(true).None().Out({2, 5, 5});
  EXPECT_EQ(Flops("aten::avg_pool2d_backward", u), 180);
  // 3-D: 2x2x2 windows (K = 8), 8 outputs -> 9 * 8 = 72.
  CallBuilder b3("aten::avg_pool3d_backward");
  b3.Tensor({1, 1, 2, 2, 2})
      .Tensor({1, 1, 4, 4, 4})
      .Ints({2, 2, 2})
      .Ints({2, 2, 2})
      .Ints({0, 0, 0})
      .Bool(false)
      .Bool(true)
      .None()
      .Out({1, 1, 4, 4, 4});
  EXPECT_EQ(Flops("aten::avg_pool3d_backward", b3), 72);
  // Two kernel sizes for a 3-D window: not a valid window -> unavailable.
  CallBuilder bad("aten::avg_pool3d_backward");
  bad.Tensor({1, 1, 2, 2, 2})
      .Tensor({1, 1, 4, 4, 4})
      .Ints({2, 2})
      .Ints({2, 2, 2})
      .Ints({0, 0, 0})
      .Bool(false)
      .Bool(true)
      .None()
      .Out({1, 1, 4, 4, 4});
  EXPECT_EQ(Evaluate("aten::avg_pool3d_backward", bad).status, MetricStatus::kUnavailable);
}

TEST(LayerBackwardPooling, AdaptiveAvgPoolAddsEachVisitAndDividesPerWindow) {
  // (1,2,5,5) -> (1,2,3,2): H visits 5 + 3 - gcd(5,3) = 7, W 5 + 2 - gcd(5,2) = 6;
  // V = 2 * 7 * 6 = 84 adds, O = 2 * 3 * 2 = 12 divides -> 96.
  CallBuilder b("aten::_adaptive_avg_pool2d_backward");
  b.Tensor({1, 2, 3, 2}).Tensor({1, 2, 5, 5}).Out({1, 2, 5, 5});
  EXPECT_EQ(Flops("aten::_adaptive_avg_pool2d_backward", b), 96);
  // 3-D (1,1,4,3,5) -> (1,1,2,2,2): D 4 + 2 - 2 = 4, H 3 + 2 - 1 = 4, W 5 + 2 - 1 = 6;
  // V = 96, O = 8 -> 104.
  CallBuilder b3("aten::_adaptive_avg_pool3d_backward");
  b3.Tensor({1, 1, 2, 2, 2}).Tensor({1, 1, 4, 3, 5}).Out({1, 1, 4, 3, 5});
  EXPECT_EQ(Flops("aten::_adaptive_avg_pool3d_backward", b3), 104);
  // Identity pooling (5 -> 5 on both axes): V = 2 * 5 * 5 = 50, O = 50 -> 100.
  CallBuilder id("aten::_adaptive_avg_pool2d_backward");
  id.Tensor({1, 2, 5, 5}).Tensor({1, 2, 5, 5}).Out({1, 2, 5, 5});
  EXPECT_EQ(Flops("aten::_adaptive_avg_pool2d_backward", id), 100);
}

TEST(LayerBackwardInterpolation, NearestAddsEachOutputGradientOnce) {
  // (1,2,5,5) upsampled to (1,2,10,10): 200 output gradients, one add each.
  for (const char* op : {"aten::upsample_nearest2d_backward", "aten::_upsample_nearest_exact2d_backward"}) {
    CallBuilder b(op);
    b.Tensor({1, 2, 10, 10}).Ints({10, 10}).Ints({1, 2, 5, 5}).None().None().Out({1, 2, 5, 5});
    EXPECT_EQ(Flops(op, b), 200) << op;
  }
  CallBuilder b1("aten::upsample_nearest1d_backward");
  b1.Tensor({1, 2, 10}).Ints({10}).Ints({1, 2, 5}).Double(2.0).Out({1, 2, 5});
  EXPECT_EQ(Flops("aten::upsample_nearest1d_backward", b1), 20);
  CallBuilder b3("aten::upsample_nearest3d_backward");
  b3.Tensor({1, 1, 4, 4, 4}).Ints({4, 4, 4}).Ints({1, 1, 2, 2, 2}).None().None().None().Out({1, 1, 2, 2, 2});
  EXPECT_EQ(Flops("aten::upsample_nearest3d_backward", b3), 64);
}

TEST(LayerBackwardPadding, EachOutputGradientIsAddedOnceIntoItsSource) {
  // (1,2,3,3) padded by 1 on every side -> (1,2,5,5): 50 output gradients, one add each.
  for (const char* op : {"aten::reflection_pad2d_backward", "aten::replication_pad2d_backward"}) {
    CallBuilder b(op);
    b.Tensor({1, 2, 5, 5}).Tensor({1, 2, 3, 3}).Ints({1, 1, 1, 1}).Out({1, 2, 3, 3});
    EXPECT_EQ(Flops(op, b), 50) << op;
  }
}

TEST(LayerBackwardInterpolation, WeightedScattersToKNeighbours) {
  // linear: K = 2, 20 output gradients: (multiply + add) * 2 = 4 each -> 80.
  CallBuilder l("aten::upsample_linear1d_backward");
  l.Tensor({1, 2, 10}).Ints({10}).Ints({1, 2, 5}).Bool(false).None().Out({1, 2, 5});
  EXPECT_EQ(Flops("aten::upsample_linear1d_backward", l), 2 * 2 * 20);
  // bilinear: K = 4, 32 output gradients -> 8 * 32 = 256.
  CallBuilder b("aten::upsample_bilinear2d_backward");
  b.Tensor({1, 2, 4, 4}).Ints({4, 4}).Ints({1, 2, 2, 2}).Bool(true).None().None().Out({1, 2, 2, 2});
  EXPECT_EQ(Flops("aten::upsample_bilinear2d_backward", b), 2 * 4 * 32);
  // trilinear: K = 8, 8 output gradients -> 16 * 8 = 128.
  CallBuilder t("aten::upsample_trilinear3d_backward");
  t.Tensor({1, 1, 2, 2, 2}).Ints({2, 2, 2}).Ints({1, 1, 1, 1, 1}).Bool(false).None().None().None().Out({1, 1, 1, 1, 1});
  EXPECT_EQ(Flops("aten::upsample_trilinear3d_backward", t), 2 * 8 * 8);
  // bicubic: K = 16, 16 output gradients -> 32 * 16 = 512.
  CallBuilder c("aten::upsample_bicubic2d_backward");
  c.Tensor({1, 1, 4, 4}).Ints({4, 4}).Ints({1, 1, 2, 2}).Bool(false).None().None().Out({1, 1, 2, 2});
  EXPECT_EQ(Flops("aten::upsample_bicubic2d_backward", c), 2 * 16 * 16);
  // bicubic with equal sizes copies the gradient: 0.
  CallBuilder same("aten::upsample_bicubic2d_backward");
  same.Tensor({1, 1, 3, 3}).Ints({3, 3}).Ints({1, 1, 3, 3}).Bool(false).None().None().Out({1, 1, 3, 3});
  EXPECT_EQ(Flops("aten::upsample_bicubic2d_backward", same), 0);
  // bilinear has no such copy: equal sizes still scatter -> 8 * 9 = 72.
  CallBuilder bsame("aten::upsample_bilinear2d_backward");
  bsame.Tensor({1, 1, 3, 3}).Ints({3, 3}).Ints({1, 1, 3, 3}).Bool(false).None().None().Out({1, 1, 3, 3});
  EXPECT_EQ(Flops("aten::upsample_bilinear2d_backward", bsame), 2 * 4 * 9);
}

TEST(LayerBackwardEmbedding, DenseGradientAddsEachLookedUpRow) {
  // ids (2,3): L = 6 lookups of D = 5 values: 30 adds.
  auto call = [](int64_t padding_idx, bool freq) {
    CallBuilder b("aten::embedding_dense_backward");
    b.Tensor({2, 3, 5}).Tensor({2, 3}, c10::kLong).Int(10).Int(padding_idx).Bool(freq).Out({10, 5});
    return b;
  };
  EXPECT_EQ(Flops("aten::embedding_dense_backward", call(-1, false)), 6 * 5);
  // padding_idx: the kernel skips those ids (data-dependent): nominal, 30.
  EXPECT_EQ(Flops("aten::embedding_dense_backward", call(0, false)), 6 * 5);
  // scale_grad_by_freq: per lookup 1 / count (1) + D multiplies + D adds -> 6 * 11 = 66.
  EXPECT_EQ(Flops("aten::embedding_dense_backward", call(-1, true)), 6 * (2 * 5 + 1));
  // grad_output not shaped indices + (D,): unavailable.
  CallBuilder bad("aten::embedding_dense_backward");
  bad.Tensor({6, 5, 1, 1}).Tensor({2, 3}, c10::kLong).Int(10).Int(-1).Bool(false).Out({10, 5});
  EXPECT_EQ(Evaluate("aten::embedding_dense_backward", bad).status, MetricStatus::kUnavailable);
}

// _embedding_bag_dense_backward over 6 lookups in 2 bags of D = 3.
CallBuilder BagDense(int64_t mode, bool freq, bool weights) {
  CallBuilder b("aten::_embedding_bag_dense_backward");
  b.Tensor({2, 3})
      .Tensor({6}, c10::kLong)
      .Tensor({6}, c10::kLong)
      .Tensor({2}, c10::kLong)
      .Tensor({2, 3}, c10::kLong)
      .Int(10)
      .Bool(freq)
      .Int(mode);
  if (weights) {
    b.Tensor({6});
  } else {
    b.None();
  }
  b.Int(-1).Out({10, 3});
  return b;
}

TEST(LayerBackwardEmbedding, BagDenseGradientPerMode) {
  const char* op = "aten::_embedding_bag_dense_backward";
  // sum: one axpy with scale 1 per lookup: D adds -> 6 * 3 = 18.
  EXPECT_EQ(Flops(op, BagDense(0, false, false)), 18);
  // mean: scale /= bag_size (1 per lookup), D multiplies + D adds -> 6 * (1 + 6) = 42.
  EXPECT_EQ(Flops(op, BagDense(1, false, false)), 42);
  // sum with per-sample weights: D multiplies + D adds -> 36.
  EXPECT_EQ(Flops(op, BagDense(0, false, true)), 36);
  // sum with frequency: 1 / count (1) + 2D -> 42; mean with frequency: 2 divides + 2D -> 48.
  EXPECT_EQ(Flops(op, BagDense(0, true, false)), 42);
  EXPECT_EQ(Flops(op, BagDense(1, true, false)), 48);
  // max: one add per bag and value: 2 * 3 = 6.
  EXPECT_EQ(Flops(op, BagDense(2, false, false)), 6);
}

TEST(LayerBackwardEmbedding, BagBackwardDenseAndSparse) {
  auto call = [](int64_t mode, bool sparse, bool weights) {
    CallBuilder b("aten::_embedding_bag_backward");
    b.Tensor({2, 3})
        .Tensor({6}, c10::kLong)
        .Tensor({2}, c10::kLong)
        .Tensor({6}, c10::kLong)
        .Tensor({2}, c10::kLong)
        .Tensor({2, 3}, c10::kLong)
        .Int(10)
        .Bool(false)
        .Int(mode)
        .Bool(sparse);
    if (weights) {
      b.Tensor({6});
    } else {
      b.None();
    }
    b.Int(-1).Out({10, 3});
    return b;
  };
  const char* op = "aten::_embedding_bag_backward";
  // Dense: the dense kernel's count (mean: 42, as above).
  EXPECT_EQ(Flops(op, call(1, false, false)), 42);
  // Sparse mean: rows gathered then divided by bag size: L * D = 18.
  EXPECT_EQ(Flops(op, call(1, true, false)), 18);
  // Sparse sum with per-sample weights: one multiply per gathered value: 18; plain sparse sum: 0.
  EXPECT_EQ(Flops(op, call(0, true, true)), 18);
  EXPECT_EQ(Flops(op, call(0, true, false)), 0);
  // Sparse max does not exist.
  EXPECT_EQ(Evaluate(op, call(2, true, false)).status, MetricStatus::kUnavailable);
  // Per-sample-weight gradient: a D = 3 dot per lookup, 2D each: 6 * 6 = 36.
  CallBuilder w("aten::_embedding_bag_per_sample_weights_backward");
  w.Tensor({2, 3})
      .Tensor({10, 3})
      .Tensor({6}, c10::kLong)
      .Tensor({2}, c10::kLong)
      .Tensor({6}, c10::kLong)
      .Int(0)
      .Int(-1)
      .Out({6});
  EXPECT_EQ(Flops("aten::_embedding_bag_per_sample_weights_backward", w), 36);
}

TEST(LayerBackwardDistance, CdistPerPairAndCoordinate) {
  // x1 (3,4), x2 (2,4): 6 pairs of M = 4 coordinates; cdist accumulates into x1 only.
  auto cdist = [](double p) {
    CallBuilder b("aten::_cdist_backward");
    b.Tensor({3, 2}).Tensor({3, 4}).Tensor({2, 4}).Double(p).Tensor({3, 2}).Out({3, 4});
    return b;
  };
  const char* op = "aten::_cdist_backward";
  // p = 1: diff + sign + multiply + accumulate = 4 per coordinate -> 16 per pair -> 96.
  EXPECT_EQ(Flops(op, cdist(1.0)), 6 * 4 * 4);
  // p = 2: diff + multiply + divide + accumulate = 4 per coordinate, + 2 for the
  // dist == 0 guard -> 18 per pair -> 108.
  EXPECT_EQ(Flops(op, cdist(2.0)), 6 * (4 * 4 + 2));
  // p = inf: diff + 9 + accumulate = 11 per coordinate -> 44 per pair -> 264.
  EXPECT_EQ(Flops(op, cdist(std::numeric_limits<double>::infinity())), 6 * 11 * 4);
  // p = 0: the kernel only zero-fills.
  EXPECT_EQ(Flops(op, cdist(0.0)), 0);
  // p = 3: no count (as the forward row).
  const FormulaResult r = Evaluate(op, cdist(3.0));
  EXPECT_EQ(r.status, MetricStatus::kUnavailable);
  EXPECT_EQ(r.code, "unsupported_norm_order");
  // Batched (2,3,4) x (2,2,4): 12 pairs -> 12 * 16 = 192 at p = 1.
  CallBuilder batched(op);
  batched.Tensor({2, 3, 2}).Tensor({2, 3, 4}).Tensor({2, 2, 4}).Double(1.0).Tensor({2, 3, 2}).Out({2, 3, 4});
  EXPECT_EQ(Flops(op, batched), 12 * 16);
}

TEST(LayerBackwardDistance, PdistAccumulatesIntoBothRows) {
  // self (3,4): 3 pairs of M = 4; two accumulations (row i +=, row j -=).
  auto pdist = [](double p) {
    CallBuilder b("aten::_pdist_backward");
    b.Tensor({3}).Tensor({3, 4}).Double(p).Tensor({3}).Out({3, 4});
    return b;
  };
  const char* op = "aten::_pdist_backward";
  EXPECT_EQ(Flops(op, pdist(1.0)), 3 * 5 * 4);                                       // (1 + 2 + 2) per coordinate -> 60
  EXPECT_EQ(Flops(op, pdist(2.0)), 3 * (5 * 4 + 2));                                 // 66
  EXPECT_EQ(Flops(op, pdist(std::numeric_limits<double>::infinity())), 3 * 12 * 4);  // 144
  EXPECT_EQ(Evaluate(op, pdist(1.5)).status, MetricStatus::kUnavailable);
}

// grid_sampler_2d_backward: input (1,2,5,5), grid (1,3,4,2) -> 3 x 4 = 12
// locations, 2 channels -> 24 (location, channel) values.
CallBuilder Grid(int64_t mode, bool input_grad) {
  CallBuilder b("aten::grid_sampler_2d_backward");
  b.Tensor({1, 2, 3, 4})
      .Tensor({1, 2, 5, 5})
      .Tensor({1, 3, 4, 2})
      .Int(mode)
      .Int(0)
      .Bool(false)
      .Bools({input_grad ? 1 : 0, 1});
  if (input_grad) {
    b.Out({1, 2, 5, 5});
  } else {
    b.OutNone();
  }
  b.Out({1, 3, 4, 2});
  return b;
}

TEST(LayerBackwardGridSampler, BilinearNearestBicubic) {
  const char* op = "aten::grid_sampler_2d_backward";
  // Bilinear (K = 4): input 8 per value; grid 2 axes * (4 products + 3 adds +
  // 1 multiply + 1 accumulate) = 18 per value, + 2 per location:
  // 8 * 24 + 18 * 24 + 2 * 12 = 192 + 432 + 24 = 648.
  EXPECT_EQ(Flops(op, Grid(0, true)), 648);
  // Without the input gradient: 432 + 24 = 456.
  EXPECT_EQ(Flops(op, Grid(0, false)), 456);
  // Nearest: one add per value for the input gradient, the grid gradient is 0: 24, or 0.
  EXPECT_EQ(Flops(op, Grid(1, true)), 24);
  EXPECT_EQ(Flops(op, Grid(1, false)), 0);
  // Bicubic (K = 16): 32 * 24 + 2 * 33 * 24 + 2 * 12 = 768 + 1584 + 24 = 2376.
  EXPECT_EQ(Flops(op, Grid(2, true)), 2376);
  // An empty input only zero-fills.
  CallBuilder empty(op);
  empty.Tensor({0, 2, 3, 4})
      .Tensor({0, 2, 5, 5})
      .Tensor({0, 3, 4, 2})
      .Int(0)
      .Int(0)
      .Bool(false)
      .Bools({1, 1})
      .Out({0, 2, 5, 5})
      .Out({0, 3, 4, 2});
  EXPECT_EQ(Flops(op, empty), 0);
}

}  // namespace
}  // namespace torchscan
