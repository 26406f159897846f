#include "formulas/op_traits.h"

#include <string>

#include "absl/container/flat_hash_map.h"

namespace torchscan {
namespace {

using T = TrafficClass;
using R = ReceptiveRule;
constexpr uint16_t kPointwise = Token(TokenTrait::kPointwise);
constexpr uint16_t kShapeOnly = Token(TokenTrait::kShapeOnly);
constexpr uint16_t kReshape = Token(TokenTrait::kReshape);
constexpr uint16_t kMayAlias = Token(TokenTrait::kMayAlias);
constexpr uint16_t kMetadataInPlace = Token(TokenTrait::kMetadataInPlace);
constexpr uint16_t kAttention = Token(TokenTrait::kAttention);
constexpr uint16_t kSoftmax = Token(TokenTrait::kSoftmax);

// Note [One row per operator]
// Each analysis used to keep its own name list; they are columns of one
// row here, so an operator's behaviour everywhere is read in one line. A
// row names the spelling an analysis looks up: traffic asks for the
// functional name (in-place "add_" is "add"), token flow for the name with a
// trailing '_' dropped when it asks about pointwise calls and the name as
// called otherwise, receptive fields for the name as called.
//
// traffic: TrafficClass; token: TokenTrait bits; receptive: ReceptiveRule.
// Sorted by name.
constexpr OpTraitsRow kRows[] = {
    {"aten::_addmm_activation", T::kMatmul, 0, R::kGeneric},
    {"aten::_circular_pad", T::kByFormula, 0, R::kMixAlong},
    {"aten::_conj", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::_convolution", T::kByFormula, 0, R::kConvolution},
    {"aten::_efficient_attention_forward", T::kByFormula, kAttention, R::kGeneric},
    {"aten::_flash_attention_forward", T::kByFormula, kAttention, R::kGeneric},
    {"aten::_fused_rms_norm", T::kByFormula, 0, R::kNormalize},
    {"aten::_grouped_mm", T::kMatmul, 0, R::kGeneric},
    {"aten::_index_put_impl", T::kIndex, 0, R::kGeneric},
    {"aten::_int_mm", T::kMatmul, 0, R::kGeneric},
    {"aten::_log_softmax", T::kReduction, 0, R::kMixAlong},
    {"aten::_native_batch_norm_legit", T::kBatchNorm, 0, R::kGeneric},
    {"aten::_native_batch_norm_legit_no_training", T::kBatchNormInference, 0, R::kGeneric},
    {"aten::_native_multi_head_attention", T::kMatmul, kAttention, R::kAttention},
    {"aten::_reshape_alias", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::_safe_softmax", T::kReduction, 0, R::kGeneric},
    {"aten::_scaled_dot_product_flash_attention_for_cpu", T::kMatmul, 0, R::kGeneric},
    {"aten::_softmax", T::kReduction, kSoftmax, R::kMixAlong},
    {"aten::_to_copy", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::_transformer_decoder_only_layer_fwd", T::kByFormula, kAttention, R::kGeneric},
    {"aten::_transformer_encoder_layer_fwd", T::kMatmul, kAttention, R::kAttention},
    {"aten::_unsafe_view", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::_weight_norm", T::kReduction, 0, R::kGeneric},
    {"aten::_weight_norm_interface", T::kReduction, 0, R::kGeneric},
    {"aten::abs", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::add", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::addbmm", T::kMatmul, 0, R::kAddmm},
    {"aten::addcdiv", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::addcmul", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::addmm", T::kByFormula, 0, R::kAddmm},
    {"aten::addmv", T::kMatmul, 0, R::kGeneric},
    {"aten::addr", T::kMatmul, 0, R::kGeneric},
    {"aten::alias", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::all", T::kByFormula, 0, R::kReduce},
    {"aten::alpha_dropout", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::amax", T::kByFormula, 0, R::kReduce},
    {"aten::amin", T::kByFormula, 0, R::kReduce},
    {"aten::any", T::kByFormula, 0, R::kReduce},
    {"aten::argmax", T::kByFormula, 0, R::kReduce},
    {"aten::argmin", T::kByFormula, 0, R::kReduce},
    {"aten::argsort", T::kByFormula, 0, R::kMixAlong},
    {"aten::as_strided", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::as_strided_", T::kByFormula, kMetadataInPlace, R::kGeneric},
    {"aten::atan", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::baddbmm", T::kByFormula, 0, R::kAddmm},
    {"aten::bernoulli_", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::bitwise_not", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::bmm", T::kByFormula, 0, R::kMatmul},
    {"aten::broadcast_to", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::cat", T::kByFormula, 0, R::kCat},
    {"aten::ceil", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::celu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::chunk", T::kByFormula, kMayAlias, R::kSplit},
    {"aten::clamp", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::clamp_max", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::clamp_min", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::clone", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::col2im", T::kIndex, 0, R::kGeneric},
    {"aten::concat", T::kByFormula, 0, R::kCat},
    {"aten::concatenate", T::kByFormula, 0, R::kCat},
    {"aten::constant_pad_nd", T::kByFormula, 0, R::kPad},
    {"aten::contiguous", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::conv1d", T::kByFormula, 0, R::kConvNd},
    {"aten::conv2d", T::kByFormula, 0, R::kConvNd},
    {"aten::conv3d", T::kByFormula, 0, R::kConvNd},
    {"aten::convolution", T::kByFormula, 0, R::kConvolution},
    {"aten::copy", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::copy_", T::kByFormula, 0, R::kCopyInto},
    {"aten::cos", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::cosh", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::cummax", T::kByFormula, 0, R::kMixAlong},
    {"aten::cummin", T::kByFormula, 0, R::kMixAlong},
    {"aten::cumprod", T::kReduction, 0, R::kMixAlong},
    {"aten::cumsum", T::kReduction, 0, R::kMixAlong},
    {"aten::detach", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::detach_", T::kByFormula, kMetadataInPlace, R::kGeneric},
    {"aten::diagonal", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::dim", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::div", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::dot", T::kMatmul, 0, R::kGeneric},
    {"aten::dropout", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::elu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::embedding", T::kLookup, 0, R::kGeneric},
    {"aten::empty_like", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::eq", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::erf", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::erfc", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::exp", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::exp2", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::expand", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::expand_as", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::expm1", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::feature_dropout", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::fill_", T::kByFormula, kShapeOnly, R::kSource},
    {"aten::flatten", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::flip", T::kByFormula, 0, R::kMixAlong},
    {"aten::float_power", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::floor", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::fmod", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::full_like", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::gather", T::kLookup, 0, R::kGeneric},
    {"aten::ge", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::gelu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::gt", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::hardsigmoid", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::hardswish", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::hardtanh", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::index_put", T::kIndex, 0, R::kGeneric},
    {"aten::index_select", T::kLookup, 0, R::kGeneric},
    {"aten::isin", T::kIndex, 0, R::kGeneric},
    {"aten::layer_norm", T::kByFormula, 0, R::kNormalize},
    {"aten::le", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::leaky_relu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::lerp", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::lift_fresh", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::linalg_vector_norm", T::kByFormula, 0, R::kReduce},
    {"aten::linear", T::kMatmul, 0, R::kLinear},
    {"aten::log", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::log1p", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::log2", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::log_softmax", T::kByFormula, 0, R::kMixAlong},
    {"aten::logcumsumexp", T::kByFormula, 0, R::kMixAlong},
    {"aten::logical_and", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::logical_not", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::logical_or", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::logsumexp", T::kReduction, 0, R::kReduce},
    {"aten::lt", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::masked_fill", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::masked_scatter", T::kIndex, 0, R::kGeneric},
    {"aten::matmul", T::kMatmul, 0, R::kMatmul},
    {"aten::max", T::kByFormula, 0, R::kMaxMin},
    {"aten::maximum", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::mean", T::kByFormula, 0, R::kReduce},
    {"aten::min", T::kByFormula, 0, R::kMaxMin},
    {"aten::minimum", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::mish", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::mkldnn_convolution", T::kMatmul, 0, R::kGeneric},
    {"aten::mkldnn_rnn_layer", T::kMatmul, 0, R::kGeneric},
    {"aten::mm", T::kByFormula, 0, R::kMatmul},
    {"aten::movedim", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::mul", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::mv", T::kMatmul, 0, R::kGeneric},
    {"aten::nan_to_num", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::nanmean", T::kByFormula, 0, R::kReduce},
    {"aten::nansum", T::kByFormula, 0, R::kReduce},
    {"aten::narrow", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::native_batch_norm", T::kBatchNorm, 0, R::kGeneric},
    {"aten::native_dropout", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::native_group_norm", T::kReduction, 0, R::kGeneric},
    {"aten::native_layer_norm", T::kReduction, 0, R::kNormalize},
    {"aten::ne", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::neg", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::new_empty", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::new_empty_strided", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::new_full", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::new_ones", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::new_zeros", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::nonzero", T::kIndex, 0, R::kGeneric},
    {"aten::norm", T::kByFormula, 0, R::kReduce},
    {"aten::normal_", T::kByFormula, kShapeOnly, R::kSource},
    {"aten::numel", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::ones_like", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::permute", T::kByFormula, kMayAlias, R::kPermute},
    {"aten::permute_copy", T::kByFormula, 0, R::kPermute},
    {"aten::positive", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::pow", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::prod", T::kByFormula, 0, R::kReduce},
    {"aten::rand_like", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::randn_like", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::reciprocal", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::relu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::relu6", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::remainder", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::requires_grad_", T::kByFormula, kMetadataInPlace, R::kGeneric},
    {"aten::reshape", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::reshape_as", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::resolve_conj", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::resolve_neg", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::rms_norm", T::kReduction, 0, R::kNormalize},
    {"aten::roll", T::kByFormula, 0, R::kMixAlong},
    {"aten::round", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::rsqrt", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::rsub", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::scaled_dot_product_attention", T::kByFormula, kAttention, R::kAttention},
    {"aten::scatter", T::kIndex, 0, R::kGeneric},
    {"aten::scatter_add", T::kIndex, 0, R::kGeneric},
    {"aten::scatter_reduce", T::kIndex, 0, R::kGeneric},
    {"aten::select", T::kByFormula, kMayAlias, R::kSelect},
    {"aten::select_copy", T::kByFormula, 0, R::kSelect},
    {"aten::selu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sigmoid", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sign", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::silu", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sin", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sinh", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::size", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::slice", T::kByFormula, kMayAlias, R::kSlice},
    {"aten::slice_copy", T::kByFormula, 0, R::kSlice},
    {"aten::softmax", T::kByFormula, kSoftmax, R::kMixAlong},
    {"aten::softplus", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sort", T::kByFormula, 0, R::kMixAlong},
    {"aten::split", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::split_with_sizes", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::sqrt", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::square", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::squeeze", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::squeeze_", T::kByFormula, kReshape | kMetadataInPlace, R::kReshape},
    {"aten::squeeze_copy", T::kByFormula, kReshape, R::kReshape},
    {"aten::std", T::kByFormula, 0, R::kReduce},
    {"aten::std_mean", T::kByFormula, 0, R::kReduce},
    {"aten::stride", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::sub", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::sum", T::kByFormula, 0, R::kReduce},
    {"aten::swapaxes", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::sym_numel", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::sym_size", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::sym_stride", T::kByFormula, kShapeOnly, R::kGeneric},
    {"aten::t", T::kByFormula, kMayAlias, R::kPermute},
    {"aten::t_", T::kByFormula, kMetadataInPlace, R::kGeneric},
    {"aten::tan", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::tanh", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::tensor_split", T::kByFormula, kMayAlias, R::kSplit},
    {"aten::threshold", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::to", T::kByFormula, kPointwise | kMayAlias, R::kGeneric},
    {"aten::transpose", T::kByFormula, kMayAlias, R::kPermute},
    {"aten::transpose_", T::kByFormula, kMetadataInPlace, R::kGeneric},
    {"aten::transpose_copy", T::kByFormula, 0, R::kPermute},
    {"aten::true_divide", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::trunc", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::type_as", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::unbind", T::kByFormula, kMayAlias, R::kUnbind},
    {"aten::unbind_copy", T::kByFormula, 0, R::kUnbind},
    {"aten::unflatten", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::unfold", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::uniform_", T::kByFormula, kShapeOnly, R::kSource},
    {"aten::unsafe_chunk", T::kByFormula, 0, R::kSplit},
    {"aten::unsqueeze", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::unsqueeze_", T::kByFormula, kReshape | kMetadataInPlace, R::kReshape},
    {"aten::unsqueeze_copy", T::kByFormula, kReshape, R::kReshape},
    {"aten::var", T::kByFormula, 0, R::kReduce},
    {"aten::var_mean", T::kByFormula, 0, R::kReduce},
    {"aten::vdot", T::kMatmul, 0, R::kGeneric},
    {"aten::view", T::kByFormula, kReshape | kMayAlias, R::kView},
    {"aten::view_as", T::kByFormula, kReshape | kMayAlias, R::kReshape},
    {"aten::view_as_complex", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::view_as_real", T::kByFormula, kMayAlias, R::kGeneric},
    {"aten::view_copy", T::kByFormula, kReshape, R::kReshape},
    {"aten::where", T::kByFormula, kPointwise, R::kGeneric},
    {"aten::zero_", T::kByFormula, kShapeOnly, R::kSource},
    {"aten::zeros_like", T::kByFormula, kShapeOnly, R::kGeneric},
};

// Families by prefix: operators named by their arity or variant
// (max_pool2d_with_indices, upsample_bilinear2d, split_with_sizes, ...).
// Checked in order after a name's own row, for the columns it leaves at
// their default.
constexpr OpTraitsRow kFamilies[] = {
    {"aten::conv_transpose", T::kByFormula, 0, R::kConvTransposed},
    {"aten::max_pool", T::kByFormula, 0, R::kMaxPool},
    {"aten::avg_pool", T::kByFormula, 0, R::kAvgPool},
    {"aten::upsample_", T::kByFormula, 0, R::kUpsample},
    {"aten::_upsample_", T::kByFormula, 0, R::kUpsample},
    {"aten::reflection_pad", T::kByFormula, 0, R::kPad},
    {"aten::replication_pad", T::kByFormula, 0, R::kPad},
    {"aten::_scaled_dot_product", T::kByFormula, kAttention, R::kAttention},
    {"aten::native_batch_norm", T::kReduction, 0, R::kGeneric},
    {"aten::_native_batch_norm_legit", T::kReduction, 0, R::kGeneric},
    {"aten::split", T::kByFormula, 0, R::kSplit},
    {"aten::unsafe_split", T::kByFormula, 0, R::kSplit},
};

const absl::flat_hash_map<std::string_view, OpTraitsRow>& Index() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, OpTraitsRow>();
    for (const OpTraitsRow& r : kRows) m->emplace(r.op, r);
    return m;
  }();
  return *index;
}

}  // namespace

OpTraits TraitsOf(std::string_view op) {
  OpTraits t;
  const auto& index = Index();
  if (auto it = index.find(op); it != index.end()) {
    t.traffic = it->second.traffic;
    t.token = it->second.token;
    t.receptive = it->second.receptive;
  }
  for (const OpTraitsRow& f : kFamilies) {
    if (!op.starts_with(f.op)) continue;
    if (t.traffic == T::kByFormula) t.traffic = f.traffic;
    if (t.receptive == R::kGeneric) t.receptive = f.receptive;
    t.token |= f.token;
  }
  // Adaptive pooling in any namespace (aten, quantized, mkldnn, ...).
  if (t.receptive == R::kGeneric && op.find("adaptive_") != op.npos && op.find("_pool") != op.npos) {
    t.receptive = R::kAdaptivePool;
  }
  return t;
}

absl::Span<const OpTraitsRow> OpTraitsRows() { return kRows; }
absl::Span<const OpTraitsRow> OpTraitsFamilies() { return kFamilies; }

}  // namespace torchscan
