// What the engine knows about an operator beyond its formula, one row per
// operator: how its memory traffic is classed, how the token-flow pass and
// the receptive-field pass treat it. The analyses ask this table, never a
// name list of their own; adding an operator is one row in op_traits.cc
// (formulas/README.md, "How to add an operator").
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/types/span.h"

namespace torchscan {

// How the traffic analysis classes a call's kernel (beyond its formula row).
enum class TrafficClass : uint8_t {
  kByFormula,           // from its formula row: native rows are products, pointwise rows pointwise
  kMatmul,              // a product, convolution or attention kernel with no native row
  kReduction,           // computes over a whole axis, whatever its output's size
  kIndex,               // a pointwise-flagged row that scatters or selects data-dependently: not fused
  kLookup,              // reads the rows it gathers, not its whole table (embedding, gather)
  kBatchNorm,           // batch norm: pointwise in inference (training = False), else a reduction
  kBatchNormInference,  // batch norm without batch statistics: pointwise
};

// How the token-flow pass treats a call (bit flags; an operator may have several).
enum class TokenTrait : uint16_t {
  kPointwise = 1 << 0,        // elementwise: a position reads the inputs at that position (in-place too)
  kShapeOnly = 1 << 1,        // the result depends on the inputs' shapes only, or overwrites its input
  kReshape = 1 << 2,          // a view or reshape: the token axis is followed through the new shape
  kMayAlias = 1 << 3,         // the result may share its input's memory
  kMetadataInPlace = 1 << 4,  // in place on metadata, not values: leaves its views alone
  kAttention = 1 << 5,        // an attention kernel (fused or not)
  kSoftmax = 1 << 6,          // softmax, functional or its kernel (the mask query reports it)
};
constexpr uint16_t Token(TokenTrait t) { return static_cast<uint16_t>(t); }

// The token-flow pass's rule for a call with tracked inputs, beyond the
// pointwise and reshape traits (one per operator).
enum class TokenRule : uint8_t {
  kNone,              // no rule of its own: its decomposition's calls are followed, or the axis is lost
  kLinear,            // linear(x, weight): contracts x's last dim
  kMatmul,            // mm / bmm / matmul
  kAddmm,             // addmm / baddbmm (the products are arguments 1 and 2)
  kEmbedding,         // embedding(weight, indices): a lookup per index
  kPermute,           // permute / transpose / t / swapaxes
  kSlice,             // slice / narrow
  kSelect,            // select
  kRepeat,            // repeat
  kRepeatInterleave,  // repeat_interleave
  kJoin,              // cat / stack of a tensor list
  kNormAlong,         // softmax / log_softmax / glu along one dim
  kNormalize,         // layer / RMS norm over the trailing dims
  kReduce,            // reduces over dims
  kUnbind,            // one output per index of a dim
  kSplit,             // pieces of a dim (split, chunk, tensor_split)
};

// The receptive-field pass's rule for a call (one per operator).
enum class ReceptiveRule : uint8_t {
  kGeneric,         // every output position may read every input position of the dims it keeps
  kSource,          // makes a new tensor (fills, random fills): no positions of the inputs
  kConvolution,     // convolution / _convolution (transposed from its argument)
  kConvNd,          // conv1d, conv2d, conv3d
  kConvTransposed,  // conv_transpose<N>d
  kMaxPool,         // max_pool<N>d
  kAvgPool,         // avg_pool<N>d
  kAdaptivePool,    // adaptive_{avg,max}_pool<N>d
  kUpsample,        // upsample_* (the axes from the name, else all but batch and channels)
  kPad,             // constant, reflection and replication padding
  kPermute,         // permute / transpose / t
  kReshape,         // views and reshapes
  kView,            // aten::view: a reshape, except the dtype overload (generic)
  kSlice,           // slice
  kSelect,          // select
  kCat,             // concatenation along a dim
  kCopyInto,        // copy_(self, src): the result holds src's positions
  kLinear,          // linear(x, weight): contracts x's last dim
  kMatmul,          // mm / bmm / matmul
  kAddmm,           // addmm / baddbmm / addbmm (the products are arguments 1 and 2)
  kAttention,       // scaled-dot-product and multi-head attention
  kNormalize,       // layer / RMS norm over the trailing dims
  kMixAlong,        // mixes positions along one dim (softmax, scans, sort, flip, roll)
  kReduce,          // reduces over dims
  kMaxMin,          // max / min: a reduction, except the binary (other) overload (generic)
  kUnbind,          // one output per index of a dim
  kSplit,           // pieces of a dim (split, chunk, tensor_split)
};

struct OpTraits {
  TrafficClass traffic = TrafficClass::kByFormula;
  uint16_t token = 0;  // TokenTrait bits
  ReceptiveRule receptive = ReceptiveRule::kGeneric;
  TokenRule token_rule = TokenRule::kNone;

  bool Has(TokenTrait t) const { return (token & Token(t)) != 0; }
};

// One row: an operator's qualified name without overload ("aten::mm"), or,
// in the families, a name prefix ("aten::max_pool").
struct OpTraitsRow {
  std::string_view op;
  TrafficClass traffic;
  uint16_t token;
  ReceptiveRule receptive;
  TokenRule token_rule;
};

// The traits of "ns::name" exactly as given (callers pick the spelling: an
// in-place "name_" has its own row where it behaves differently). An
// operator's own row first; a column it leaves at its default comes from the
// first family whose prefix the name starts with (token bits are united).
OpTraits TraitsOf(std::string_view op);

// Every row and every family (for tests and the coverage audit).
absl::Span<const OpTraitsRow> OpTraitsRows();
absl::Span<const OpTraitsRow> OpTraitsFamilies();

}  // namespace torchscan
