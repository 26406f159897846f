// The operator table (formulas/op_traits.cc): one row per operator, families
// by prefix. Each expectation is the behaviour the analyses rely on, stated
// from the operator's definition (what the kernel does), not read back from
// the table.
#include <gtest/gtest.h>

#include <string>

#include "formulas/op_traits.h"

namespace torchscan {
namespace {

TEST(OpTraits, RowsAreUniqueAndSorted) {
  std::string last;
  for (const OpTraitsRow& r : OpTraitsRows()) {
    EXPECT_LT(last, std::string(r.op)) << r.op;  // sorted, so each operator has one row
    last = std::string(r.op);
  }
}

TEST(OpTraits, UnknownOperatorHasDefaults) {
  const OpTraits t = TraitsOf("mylib::custom");
  EXPECT_EQ(t.traffic, TrafficClass::kByFormula);
  EXPECT_EQ(t.token, 0);
  EXPECT_EQ(t.receptive, ReceptiveRule::kGeneric);
}

TEST(OpTraits, ColumnsOfOneOperator) {
  // softmax normalises over an axis: a reduction kernel, positions mixed along the dim.
  const OpTraits s = TraitsOf("aten::_softmax");
  EXPECT_EQ(s.traffic, TrafficClass::kReduction);
  EXPECT_TRUE(s.Has(TokenTrait::kSoftmax));
  EXPECT_EQ(s.receptive, ReceptiveRule::kMixAlong);
  // view reshapes and may alias its input.
  const OpTraits v = TraitsOf("aten::view");
  EXPECT_TRUE(v.Has(TokenTrait::kReshape));
  EXPECT_TRUE(v.Has(TokenTrait::kMayAlias));
  EXPECT_FALSE(v.Has(TokenTrait::kPointwise));
  EXPECT_EQ(v.receptive, ReceptiveRule::kView);
  // add is elementwise; its in-place spelling has no row of its own (callers drop the '_').
  EXPECT_TRUE(TraitsOf("aten::add").Has(TokenTrait::kPointwise));
  EXPECT_EQ(TraitsOf("aten::add_").token, 0);
  // squeeze_ changes metadata in place, and is a reshape.
  EXPECT_TRUE(TraitsOf("aten::squeeze_").Has(TokenTrait::kMetadataInPlace));
  EXPECT_EQ(TraitsOf("aten::squeeze_").receptive, ReceptiveRule::kReshape);
}

TEST(OpTraits, FamiliesFillTheColumnsARowLeavesAtDefault) {
  // The CPU flash kernel: its own row says product (no native row before
  // 2.15); the _scaled_dot_product family says attention.
  const OpTraits f = TraitsOf("aten::_scaled_dot_product_flash_attention_for_cpu");
  EXPECT_EQ(f.traffic, TrafficClass::kMatmul);
  EXPECT_TRUE(f.Has(TokenTrait::kAttention));
  EXPECT_EQ(f.receptive, ReceptiveRule::kAttention);
  // Batch norm in inference keeps its own class over the family's reduction.
  EXPECT_EQ(TraitsOf("aten::_native_batch_norm_legit_no_training").traffic, TrafficClass::kBatchNormInference);
  EXPECT_EQ(TraitsOf("aten::_native_batch_norm_legit_functional").traffic, TrafficClass::kReduction);
  EXPECT_EQ(TraitsOf("aten::native_batch_norm_backward").traffic, TrafficClass::kReduction);
  // Windows named by arity.
  EXPECT_EQ(TraitsOf("aten::max_pool2d_with_indices").receptive, ReceptiveRule::kMaxPool);
  EXPECT_EQ(TraitsOf("aten::conv_transpose2d").receptive, ReceptiveRule::kConvTransposed);
  EXPECT_EQ(TraitsOf("aten::upsample_bilinear2d").receptive, ReceptiveRule::kUpsample);
  EXPECT_EQ(TraitsOf("aten::reflection_pad2d").receptive, ReceptiveRule::kPad);
  EXPECT_EQ(TraitsOf("aten::split_with_sizes").receptive, ReceptiveRule::kSplit);
  // Adaptive pooling in any namespace.
  EXPECT_EQ(TraitsOf("aten::_adaptive_avg_pool2d").receptive, ReceptiveRule::kAdaptivePool);
  EXPECT_EQ(TraitsOf("quantized::adaptive_avg_pool2d").receptive, ReceptiveRule::kAdaptivePool);
}

TEST(OpTraits, TokenRules) {
  // transpose_ swaps two dims in place, narrow takes a range of one, stack
  // joins a list along a new dim, split_with_sizes cuts one into pieces.
  EXPECT_EQ(TraitsOf("aten::transpose_").token_rule, TokenRule::kPermute);
  EXPECT_EQ(TraitsOf("aten::narrow").token_rule, TokenRule::kSlice);
  EXPECT_EQ(TraitsOf("aten::stack").token_rule, TokenRule::kJoin);
  EXPECT_EQ(TraitsOf("aten::split_with_sizes").token_rule, TokenRule::kSplit);
  // An elementwise operator needs no rule of its own: the pointwise trait.
  EXPECT_EQ(TraitsOf("aten::add").token_rule, TokenRule::kNone);
}

TEST(OpTraits, ARowAndAFamilyCombine) {
  // split has a row (its pieces may alias the input) and is in the split
  // family (each piece is a range of one dim).
  const OpTraits s = TraitsOf("aten::split");
  EXPECT_TRUE(s.Has(TokenTrait::kMayAlias));
  EXPECT_EQ(s.receptive, ReceptiveRule::kSplit);
}

}  // namespace
}  // namespace torchscan
