#include "formulas/op_traits.h"

#include <string>

#include "absl/container/flat_hash_map.h"

namespace torchscan {
namespace {

using T = TrafficClass;
using R = ReceptiveRule;
using K = TokenRule;
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
// traffic: TrafficClass; token: TokenTrait bits; receptive: ReceptiveRule;
// token rule: TokenRule.
// Sorted by name.
constexpr OpTraitsRow kRows[] = {
    {"aten::_addmm_activation", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::_circular_pad", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::_conj", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::_convolution", T::kByFormula, 0, R::kConvolution, K::kNone},
    {"aten::_efficient_attention_forward", T::kByFormula, kAttention, R::kGeneric, K::kNone},
    {"aten::_flash_attention_forward", T::kByFormula, kAttention, R::kGeneric, K::kNone},
    {"aten::_fused_rms_norm", T::kByFormula, 0, R::kNormalize, K::kNormalize},
    {"aten::_grouped_mm", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::_index_put_impl", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::_int_mm", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::_log_softmax", T::kReduction, 0, R::kMixAlong, K::kNormAlong},
    {"aten::_native_batch_norm_legit", T::kBatchNorm, 0, R::kGeneric, K::kNone},
    {"aten::_native_batch_norm_legit_no_training", T::kBatchNormInference, 0, R::kGeneric, K::kNone},
    {"aten::_native_multi_head_attention", T::kMatmul, kAttention, R::kAttention, K::kNone},
    {"aten::_reshape_alias", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::_safe_softmax", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::_scaled_dot_product_flash_attention_for_cpu", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::_softmax", T::kReduction, kSoftmax, R::kMixAlong, K::kNormAlong},
    {"aten::_to_copy", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::_transformer_decoder_only_layer_fwd", T::kByFormula, kAttention, R::kGeneric, K::kNone},
    {"aten::_transformer_encoder_layer_fwd", T::kMatmul, kAttention, R::kAttention, K::kNone},
    {"aten::_unsafe_view", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::_weight_norm", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::_weight_norm_interface", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::abs", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::add", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::addbmm", T::kMatmul, 0, R::kAddmm, K::kNone},
    {"aten::addcdiv", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::addcmul", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::addmm", T::kByFormula, 0, R::kAddmm, K::kAddmm},
    {"aten::addmv", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::addr", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::alias", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::all", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::alpha_dropout", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::amax", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::amin", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::any", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::argmax", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::argmin", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::argsort", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::as_strided", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::as_strided_", T::kByFormula, kMetadataInPlace, R::kGeneric, K::kNone},
    {"aten::atan", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::baddbmm", T::kByFormula, 0, R::kAddmm, K::kAddmm},
    {"aten::bernoulli_", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::bitwise_not", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::bmm", T::kByFormula, 0, R::kMatmul, K::kMatmul},
    {"aten::broadcast_to", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::cat", T::kByFormula, 0, R::kCat, K::kJoin},
    {"aten::ceil", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::celu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::chunk", T::kByFormula, kMayAlias, R::kSplit, K::kSplit},
    {"aten::clamp", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::clamp_max", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::clamp_min", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::clone", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::col2im", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::concat", T::kByFormula, 0, R::kCat, K::kJoin},
    {"aten::concatenate", T::kByFormula, 0, R::kCat, K::kJoin},
    {"aten::constant_pad_nd", T::kByFormula, 0, R::kPad, K::kNone},
    {"aten::contiguous", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::conv1d", T::kByFormula, 0, R::kConvNd, K::kNone},
    {"aten::conv2d", T::kByFormula, 0, R::kConvNd, K::kNone},
    {"aten::conv3d", T::kByFormula, 0, R::kConvNd, K::kNone},
    {"aten::convolution", T::kByFormula, 0, R::kConvolution, K::kNone},
    {"aten::copy", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::copy_", T::kByFormula, 0, R::kCopyInto, K::kNone},
    {"aten::cos", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::cosh", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::cummax", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::cummin", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::cumprod", T::kReduction, 0, R::kMixAlong, K::kNone},
    {"aten::cumsum", T::kReduction, 0, R::kMixAlong, K::kNone},
    {"aten::detach", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::detach_", T::kByFormula, kMetadataInPlace, R::kGeneric, K::kNone},
    {"aten::diagonal", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::dim", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::div", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::dot", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::dropout", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::elu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::embedding", T::kLookup, 0, R::kGeneric, K::kEmbedding},
    {"aten::empty_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::eq", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::erf", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::erfc", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::exp", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::exp2", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::expand", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::expand_as", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::expm1", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::feature_dropout", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::fill_", T::kByFormula, kShapeOnly, R::kSource, K::kNone},
    {"aten::flatten", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::flip", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::float_power", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::floor", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::fmod", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::full_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::gather", T::kLookup, 0, R::kGeneric, K::kNone},
    {"aten::ge", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::gelu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::glu", T::kByFormula, 0, R::kGeneric, K::kNormAlong},
    {"aten::gt", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::hardsigmoid", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::hardswish", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::hardtanh", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::index_put", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::index_select", T::kLookup, 0, R::kGeneric, K::kNone},
    {"aten::isin", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::layer_norm", T::kByFormula, 0, R::kNormalize, K::kNormalize},
    {"aten::le", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::leaky_relu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::lerp", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::lift_fresh", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::linalg_vector_norm", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::linear", T::kMatmul, 0, R::kLinear, K::kLinear},
    {"aten::log", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::log1p", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::log2", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::log_softmax", T::kByFormula, 0, R::kMixAlong, K::kNormAlong},
    {"aten::logcumsumexp", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::logical_and", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::logical_not", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::logical_or", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::logsumexp", T::kReduction, 0, R::kReduce, K::kNone},
    {"aten::lt", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::masked_fill", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::masked_scatter", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::matmul", T::kMatmul, 0, R::kMatmul, K::kMatmul},
    {"aten::max", T::kByFormula, 0, R::kMaxMin, K::kNone},
    {"aten::maximum", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::mean", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::min", T::kByFormula, 0, R::kMaxMin, K::kNone},
    {"aten::minimum", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::mish", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::mkldnn_convolution", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::mkldnn_rnn_layer", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::mm", T::kByFormula, 0, R::kMatmul, K::kMatmul},
    {"aten::movedim", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::mul", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::mv", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::nan_to_num", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::nanmean", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::nansum", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::narrow", T::kByFormula, kMayAlias, R::kGeneric, K::kSlice},
    {"aten::native_batch_norm", T::kBatchNorm, 0, R::kGeneric, K::kNone},
    {"aten::native_dropout", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::native_group_norm", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::native_layer_norm", T::kReduction, 0, R::kNormalize, K::kNormalize},
    {"aten::ne", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::neg", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::new_empty", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::new_empty_strided", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::new_full", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::new_ones", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::new_zeros", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::nonzero", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::norm", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::normal_", T::kByFormula, kShapeOnly, R::kSource, K::kNone},
    {"aten::numel", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::ones_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::permute", T::kByFormula, kMayAlias, R::kPermute, K::kPermute},
    {"aten::permute_copy", T::kByFormula, 0, R::kPermute, K::kPermute},
    {"aten::positive", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::pow", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::prod", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::rand_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::randn_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::reciprocal", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::relu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::relu6", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::remainder", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::repeat", T::kByFormula, 0, R::kGeneric, K::kRepeat},
    {"aten::repeat_interleave", T::kByFormula, 0, R::kGeneric, K::kRepeatInterleave},
    {"aten::requires_grad_", T::kByFormula, kMetadataInPlace, R::kGeneric, K::kNone},
    {"aten::reshape", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::reshape_as", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::resolve_conj", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::resolve_neg", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::rms_norm", T::kReduction, 0, R::kNormalize, K::kNormalize},
    {"aten::roll", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::round", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::rsqrt", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::rsub", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::scaled_dot_product_attention", T::kByFormula, kAttention, R::kAttention, K::kNone},
    {"aten::scatter", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::scatter_add", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::scatter_reduce", T::kIndex, 0, R::kGeneric, K::kNone},
    {"aten::select", T::kByFormula, kMayAlias, R::kSelect, K::kSelect},
    {"aten::select_copy", T::kByFormula, 0, R::kSelect, K::kNone},
    {"aten::selu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sigmoid", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sign", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::silu", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sin", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sinh", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::size", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::slice", T::kByFormula, kMayAlias, R::kSlice, K::kSlice},
    {"aten::slice_copy", T::kByFormula, 0, R::kSlice, K::kSlice},
    {"aten::softmax", T::kByFormula, kSoftmax, R::kMixAlong, K::kNormAlong},
    {"aten::softplus", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sort", T::kByFormula, 0, R::kMixAlong, K::kNone},
    {"aten::split", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::split_with_sizes", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::sqrt", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::square", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::squeeze", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::squeeze_", T::kByFormula, kReshape | kMetadataInPlace, R::kReshape, K::kNone},
    {"aten::squeeze_copy", T::kByFormula, kReshape, R::kReshape, K::kNone},
    {"aten::stack", T::kByFormula, 0, R::kGeneric, K::kJoin},
    {"aten::std", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::std_mean", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::stride", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::sub", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::sum", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::swapaxes", T::kByFormula, kMayAlias, R::kGeneric, K::kPermute},
    {"aten::sym_numel", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::sym_size", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::sym_stride", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
    {"aten::t", T::kByFormula, kMayAlias, R::kPermute, K::kPermute},
    {"aten::t_", T::kByFormula, kMetadataInPlace, R::kGeneric, K::kNone},
    {"aten::tan", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::tanh", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::tensor_split", T::kByFormula, kMayAlias, R::kSplit, K::kSplit},
    {"aten::threshold", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::to", T::kByFormula, kPointwise | kMayAlias, R::kGeneric, K::kNone},
    {"aten::transpose", T::kByFormula, kMayAlias, R::kPermute, K::kPermute},
    {"aten::transpose_", T::kByFormula, kMetadataInPlace, R::kGeneric, K::kPermute},
    {"aten::transpose_copy", T::kByFormula, 0, R::kPermute, K::kPermute},
    {"aten::true_divide", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::trunc", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::type_as", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::unbind", T::kByFormula, kMayAlias, R::kUnbind, K::kUnbind},
    {"aten::unbind_copy", T::kByFormula, 0, R::kUnbind, K::kUnbind},
    {"aten::unflatten", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::unfold", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::uniform_", T::kByFormula, kShapeOnly, R::kSource, K::kNone},
    {"aten::unsafe_chunk", T::kByFormula, 0, R::kSplit, K::kSplit},
    {"aten::unsqueeze", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::unsqueeze_", T::kByFormula, kReshape | kMetadataInPlace, R::kReshape, K::kNone},
    {"aten::unsqueeze_copy", T::kByFormula, kReshape, R::kReshape, K::kNone},
    {"aten::var", T::kByFormula, 0, R::kReduce, K::kReduce},
    {"aten::var_mean", T::kByFormula, 0, R::kReduce, K::kNone},
    {"aten::vdot", T::kMatmul, 0, R::kGeneric, K::kNone},
    {"aten::view", T::kByFormula, kReshape | kMayAlias, R::kView, K::kNone},
    {"aten::view_as", T::kByFormula, kReshape | kMayAlias, R::kReshape, K::kNone},
    {"aten::view_as_complex", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::view_as_real", T::kByFormula, kMayAlias, R::kGeneric, K::kNone},
    {"aten::view_copy", T::kByFormula, kReshape, R::kReshape, K::kNone},
    {"aten::where", T::kByFormula, kPointwise, R::kGeneric, K::kNone},
    {"aten::zero_", T::kByFormula, kShapeOnly, R::kSource, K::kNone},
    {"aten::zeros_like", T::kByFormula, kShapeOnly, R::kGeneric, K::kNone},
};

// Families by prefix: operators named by their arity or variant
// (max_pool2d_with_indices, upsample_bilinear2d, split_with_sizes, ...).
// Checked in order after a name's own row, for the columns it leaves at
// their default.
constexpr OpTraitsRow kFamilies[] = {
    {"aten::conv_transpose", T::kByFormula, 0, R::kConvTransposed, K::kNone},
    {"aten::max_pool", T::kByFormula, 0, R::kMaxPool, K::kNone},
    {"aten::avg_pool", T::kByFormula, 0, R::kAvgPool, K::kNone},
    {"aten::upsample_", T::kByFormula, 0, R::kUpsample, K::kNone},
    {"aten::_upsample_", T::kByFormula, 0, R::kUpsample, K::kNone},
    {"aten::reflection_pad", T::kByFormula, 0, R::kPad, K::kNone},
    {"aten::replication_pad", T::kByFormula, 0, R::kPad, K::kNone},
    {"aten::_scaled_dot_product", T::kByFormula, kAttention, R::kAttention, K::kNone},
    {"aten::native_batch_norm", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::_native_batch_norm_legit", T::kReduction, 0, R::kGeneric, K::kNone},
    {"aten::split", T::kByFormula, 0, R::kSplit, K::kSplit},
    {"aten::unsafe_split", T::kByFormula, 0, R::kSplit, K::kSplit},
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
    t.token_rule = it->second.token_rule;
  }
  for (const OpTraitsRow& f : kFamilies) {
    if (!op.starts_with(f.op)) continue;
    if (t.traffic == T::kByFormula) t.traffic = f.traffic;
    if (t.receptive == R::kGeneric) t.receptive = f.receptive;
    if (t.token_rule == K::kNone) t.token_rule = f.token_rule;
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
