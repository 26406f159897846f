#include "formulas/registry.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "formulas/attention.h"
#include "formulas/convolution.h"
#include "formulas/elementwise.h"
#include "formulas/matmul.h"
#include "formulas/misc.h"
#include "formulas/normalization.h"
#include "formulas/pooling.h"
#include "formulas/reduction.h"
#include "formulas/softmax.h"

namespace torchscan {
namespace {

constexpr FormulaSource kN = FormulaSource::kNative;
constexpr FormulaSource kF = FormulaSource::kFallback;

// The native rows mirror torch.utils.flop_counter's registry in torch 2.13
// (torch/utils/flop_counter.py, `flop_registry`), operator for operator.
const OperatorFormula kFormulas[] = {
    {"aten::mm", matmul::Mm, kN},
    {"aten::addmm", matmul::Addmm, kN},
    {"aten::bmm", matmul::Bmm, kN},
    {"aten::baddbmm", matmul::Baddbmm, kN},
    {"aten::_scaled_mm", matmul::ScaledMm, kN},
    {"aten::convolution", convolution::Convolution, kN},
    {"aten::_convolution", convolution::Convolution, kN},
    {"aten::convolution_overrideable", convolution::Convolution, kN},
    {"aten::cudnn_convolution", convolution::DirectConvolution, kN},
    {"aten::_slow_conv2d_forward", convolution::DirectConvolution, kN},
    {"aten::convolution_backward", convolution::ConvolutionBackward, kN},
    {"aten::_scaled_dot_product_efficient_attention", attention::SdpaForward, kN},
    {"aten::_scaled_dot_product_flash_attention", attention::SdpaForward, kN},
    {"aten::_scaled_dot_product_cudnn_attention", attention::SdpaForward, kN},
    {"aten::_scaled_dot_product_efficient_attention_backward", attention::SdpaBackward, kN},
    {"aten::_scaled_dot_product_flash_attention_backward", attention::SdpaBackward, kN},
    {"aten::_scaled_dot_product_cudnn_attention_backward", attention::SdpaBackward, kN},
    {"aten::_flash_attention_forward", attention::FlashForward, kN},
    {"aten::_efficient_attention_forward", attention::EfficientForward, kN},
    {"aten::_flash_attention_backward", attention::FlashBackward, kN},
    {"aten::_efficient_attention_backward", attention::EfficientBackward, kN},
    // The CPU flash kernel FlopCounterMode has no entry for; same convention.
    {"aten::_scaled_dot_product_flash_attention_for_cpu", attention::SdpaForward, kF},
    {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", attention::SdpaBackward, kF},
    // PyTorch's fused attention fast paths (nn.MultiheadAttention / nn.TransformerEncoderLayer in eval).
    {"aten::_native_multi_head_attention", attention::NativeMultiHeadAttention, kF},
    {"aten::_transformer_encoder_layer_fwd", attention::TransformerEncoderLayer, kF},
    // Products PyTorch runs as their own kernels without a native formula.
    {"aten::dot", matmul::Dot, kF},
    {"aten::vdot", matmul::Dot, kF},
    {"aten::mv", matmul::Mv, kF},
    {"aten::addmv", matmul::Addmv, kF},
    {"aten::addbmm", matmul::Addbmm, kF},
    {"aten::addr", matmul::Addr, kF},
    {"aten::_int_mm", matmul::IntMm, kF},

    // torchscan_flops_v1 fallbacks: one op per value for scalar arithmetic,
    // exp/sqrt/erf-like math, comparison and selection.
#define TS_ROW(name, fn) {"aten::" name, fn, kF}
    TS_ROW("add", elementwise::AddSub), TS_ROW("sub", elementwise::AddSub),
    TS_ROW("rsub", elementwise::AddSub), TS_ROW("div", elementwise::Div),
    TS_ROW("floor_divide", elementwise::PerOutput<2>),  // divide + floor
    TS_ROW("mul", elementwise::PerOutput<1>), TS_ROW("maximum", elementwise::PerOutput<1>),
    TS_ROW("minimum", elementwise::PerOutput<1>), TS_ROW("fmax", elementwise::PerOutput<1>),
    TS_ROW("fmin", elementwise::PerOutput<1>), TS_ROW("atan2", elementwise::PerOutput<1>),
    TS_ROW("remainder", elementwise::PerOutput<1>), TS_ROW("fmod", elementwise::PerOutput<1>),
    TS_ROW("hypot", elementwise::PerOutput<1>), TS_ROW("copysign", elementwise::PerOutput<1>),
    TS_ROW("pow", elementwise::PerOutput<1>), TS_ROW("float_power", elementwise::PerOutput<1>),
    TS_ROW("eq", elementwise::PerOutput<1>), TS_ROW("ne", elementwise::PerOutput<1>),
    TS_ROW("lt", elementwise::PerOutput<1>), TS_ROW("le", elementwise::PerOutput<1>),
    TS_ROW("gt", elementwise::PerOutput<1>), TS_ROW("ge", elementwise::PerOutput<1>),
    TS_ROW("where", elementwise::PerOutput<1>), TS_ROW("masked_fill", elementwise::PerOutput<1>),
    TS_ROW("logical_and", elementwise::PerOutput<1>), TS_ROW("logical_or", elementwise::PerOutput<1>),
    TS_ROW("logical_xor", elementwise::PerOutput<1>), TS_ROW("logical_not", elementwise::PerOutput<1>),
    TS_ROW("bitwise_not", elementwise::PerOutput<1>), TS_ROW("bitwise_and", elementwise::PerOutput<1>),
    TS_ROW("bitwise_or", elementwise::PerOutput<1>), TS_ROW("bitwise_xor", elementwise::PerOutput<1>),
    TS_ROW("clamp", elementwise::Clamp), TS_ROW("clamp_min", elementwise::PerOutput<1>),
    TS_ROW("clamp_max", elementwise::PerOutput<1>), TS_ROW("relu", elementwise::PerOutput<1>),
    TS_ROW("isnan", elementwise::PerOutput<1>), TS_ROW("sign", elementwise::PerOutput<1>),
    TS_ROW("sgn", elementwise::PerOutput<1>), TS_ROW("neg", elementwise::PerOutput<1>),
    TS_ROW("abs", elementwise::PerOutput<1>), TS_ROW("exp", elementwise::PerOutput<1>),
    TS_ROW("exp2", elementwise::PerOutput<1>), TS_ROW("expm1", elementwise::PerOutput<1>),
    TS_ROW("log", elementwise::PerOutput<1>), TS_ROW("log2", elementwise::PerOutput<1>),
    TS_ROW("log10", elementwise::PerOutput<1>), TS_ROW("log1p", elementwise::PerOutput<1>),
    TS_ROW("sqrt", elementwise::PerOutput<1>), TS_ROW("rsqrt", elementwise::PerOutput<1>),
    TS_ROW("sin", elementwise::PerOutput<1>), TS_ROW("cos", elementwise::PerOutput<1>),
    TS_ROW("tan", elementwise::PerOutput<1>), TS_ROW("asin", elementwise::PerOutput<1>),
    TS_ROW("acos", elementwise::PerOutput<1>), TS_ROW("atan", elementwise::PerOutput<1>),
    TS_ROW("sinh", elementwise::PerOutput<1>), TS_ROW("cosh", elementwise::PerOutput<1>),
    TS_ROW("asinh", elementwise::PerOutput<1>), TS_ROW("acosh", elementwise::PerOutput<1>),
    TS_ROW("atanh", elementwise::PerOutput<1>), TS_ROW("erf", elementwise::PerOutput<1>),
    TS_ROW("erfc", elementwise::PerOutput<1>), TS_ROW("erfinv", elementwise::PerOutput<1>),
    TS_ROW("reciprocal", elementwise::PerOutput<1>), TS_ROW("ceil", elementwise::PerOutput<1>),
    TS_ROW("floor", elementwise::PerOutput<1>), TS_ROW("round", elementwise::PerOutput<1>),
    TS_ROW("trunc", elementwise::PerOutput<1>), TS_ROW("frac", elementwise::PerOutput<1>),
    TS_ROW("addcmul", elementwise::Addc), TS_ROW("addcdiv", elementwise::Addc),
    TS_ROW("lerp", elementwise::Lerp),
    // Activations: the table's symbolic expansions per element.
    TS_ROW("hardtanh", elementwise::PerOutput<2>), TS_ROW("threshold", elementwise::PerOutput<2>),
    TS_ROW("hardshrink", elementwise::PerOutput<3>), TS_ROW("leaky_relu", elementwise::PerOutput<4>),
    TS_ROW("prelu", elementwise::PerOutput<4>), TS_ROW("_prelu_kernel", elementwise::PerOutput<4>),
    TS_ROW("rrelu_with_noise", elementwise::RreluWithNoise),
    TS_ROW("hardsigmoid", elementwise::PerOutput<4>), TS_ROW("sigmoid", elementwise::PerOutput<4>),
    TS_ROW("hardswish", elementwise::PerOutput<5>), TS_ROW("softshrink", elementwise::PerOutput<5>),
    TS_ROW("silu", elementwise::PerOutput<5>), TS_ROW("glu", elementwise::PerOutput<5>),
    TS_ROW("gelu", elementwise::Gelu), TS_ROW("elu", elementwise::PerOutput<6>),
    TS_ROW("tanh", elementwise::PerOutput<6>), TS_ROW("celu", elementwise::PerOutput<7>),
    TS_ROW("selu", elementwise::PerOutput<7>), TS_ROW("log_sigmoid", elementwise::PerOutput<7>),
    TS_ROW("log_sigmoid_forward", elementwise::PerOutput<7>), TS_ROW("softplus", elementwise::PerOutput<7>),
    TS_ROW("mish", elementwise::PerOutput<10>),
    // Reductions and scans.
    TS_ROW("sum", reduction::Sum), TS_ROW("nansum", reduction::Sum), TS_ROW("prod", reduction::Sum),
    TS_ROW("mean", reduction::Mean), TS_ROW("amax", reduction::Fold), TS_ROW("amin", reduction::Fold),
    TS_ROW("max", reduction::MaxMin), TS_ROW("min", reduction::MaxMin),
    TS_ROW("cumsum", reduction::Cumulative), TS_ROW("cumprod", reduction::Cumulative),
    TS_ROW("linalg_vector_norm", reduction::VectorNorm), TS_ROW("norm", reduction::VectorNorm),
    // Softmax family.
    TS_ROW("_softmax", softmax::Softmax), TS_ROW("_safe_softmax", softmax::SafeSoftmax),
    TS_ROW("_log_softmax", softmax::LogSoftmax),
    // Normalization.
    TS_ROW("native_layer_norm", normalization::LayerNorm),
    TS_ROW("native_group_norm", normalization::GroupNorm),
    TS_ROW("native_batch_norm", normalization::BatchNorm),
    TS_ROW("_native_batch_norm_legit", normalization::BatchNorm),
    TS_ROW("_native_batch_norm_legit_no_training", normalization::BatchNorm),
    TS_ROW("rms_norm", normalization::RmsNorm), TS_ROW("_weight_norm", normalization::WeightNorm),
    TS_ROW("_weight_norm_interface", normalization::WeightNorm),
    // Pooling.
    TS_ROW("max_pool1d", pooling::MaxPool), TS_ROW("max_pool2d", pooling::MaxPool),
    TS_ROW("max_pool3d", pooling::MaxPool), TS_ROW("max_pool1d_with_indices", pooling::MaxPool),
    TS_ROW("max_pool2d_with_indices", pooling::MaxPool), TS_ROW("max_pool3d_with_indices", pooling::MaxPool),
    TS_ROW("avg_pool1d", pooling::AvgPool), TS_ROW("avg_pool2d", pooling::AvgPool),
    TS_ROW("avg_pool3d", pooling::AvgPool),
    TS_ROW("adaptive_avg_pool1d", pooling::AdaptiveAvgPool), TS_ROW("adaptive_avg_pool2d", pooling::AdaptiveAvgPool),
    TS_ROW("adaptive_avg_pool3d", pooling::AdaptiveAvgPool), TS_ROW("_adaptive_avg_pool2d", pooling::AdaptiveAvgPool),
    TS_ROW("_adaptive_avg_pool3d", pooling::AdaptiveAvgPool),
    TS_ROW("adaptive_max_pool1d", pooling::AdaptiveMaxPool), TS_ROW("adaptive_max_pool2d", pooling::AdaptiveMaxPool),
    TS_ROW("adaptive_max_pool3d", pooling::AdaptiveMaxPool),
    // Dropout, lookups, interpolation.
    TS_ROW("dropout", misc::Dropout), TS_ROW("native_dropout", misc::Dropout),
    TS_ROW("feature_dropout", misc::Dropout),
    TS_ROW("embedding", misc::Embedding), TS_ROW("embedding_renorm_", misc::EmbeddingRenorm),
    TS_ROW("upsample_nearest1d", misc::Nearest), TS_ROW("upsample_nearest2d", misc::Nearest),
    TS_ROW("upsample_nearest3d", misc::Nearest), TS_ROW("_upsample_nearest_exact1d", misc::Nearest),
    TS_ROW("_upsample_nearest_exact2d", misc::Nearest), TS_ROW("_upsample_nearest_exact3d", misc::Nearest),
    TS_ROW("upsample_linear1d", misc::Weighted<2>), TS_ROW("upsample_bilinear2d", misc::Weighted<4>),
    TS_ROW("upsample_trilinear3d", misc::Weighted<8>), TS_ROW("upsample_bicubic2d", misc::Weighted<16>),
    // Visible exclusions: random sampling has no count.
    TS_ROW("rand", misc::RandomSampling), TS_ROW("randn", misc::RandomSampling),
    TS_ROW("rand_like", misc::RandomSampling), TS_ROW("randn_like", misc::RandomSampling),
    TS_ROW("randint", misc::RandomSampling), TS_ROW("randint_like", misc::RandomSampling),
    TS_ROW("randperm", misc::RandomSampling), TS_ROW("bernoulli", misc::RandomSampling),
    TS_ROW("normal", misc::RandomSampling), TS_ROW("uniform", misc::RandomSampling),
    TS_ROW("exponential", misc::RandomSampling), TS_ROW("geometric", misc::RandomSampling),
    TS_ROW("cauchy", misc::RandomSampling), TS_ROW("log_normal", misc::RandomSampling),
    TS_ROW("random", misc::RandomSampling), TS_ROW("multinomial", misc::RandomSampling),
    TS_ROW("poisson", misc::RandomSampling), TS_ROW("_standard_gamma", misc::RandomSampling),
#undef TS_ROW
};

const absl::flat_hash_map<std::string_view, const OperatorFormula*>& FormulaIndex() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, const OperatorFormula*>();
    for (const auto& f : kFormulas) m->emplace(f.op, &f);
    return m;
  }();
  return *index;
}

// Operators whose cost is zero by what they do, not by their schema's alias
// annotations. Copies and conversions move values without arithmetic
// (torchscan_flops_v1: "views/copies/fills/allocation ... are excluded").
const absl::flat_hash_map<std::string_view, ZeroCostReason>& ZeroCostNames() {
  using R = ZeroCostReason;
  static const auto* names = new absl::flat_hash_map<std::string_view, ZeroCostReason>{
      // metadata
      {"aten::size", R::kMetadata}, {"aten::sym_size", R::kMetadata},
      {"aten::stride", R::kMetadata}, {"aten::sym_stride", R::kMetadata},
      {"aten::numel", R::kMetadata}, {"aten::sym_numel", R::kMetadata},
      {"aten::dim", R::kMetadata}, {"aten::storage_offset", R::kMetadata},
      {"aten::sym_storage_offset", R::kMetadata}, {"aten::is_contiguous", R::kMetadata},
      {"aten::sym_is_contiguous", R::kMetadata}, {"aten::is_strides_like_format", R::kMetadata},
      {"aten::is_non_overlapping_and_dense", R::kMetadata}, {"aten::is_same_size", R::kMetadata},
      {"aten::is_leaf", R::kMetadata}, {"aten::output_nr", R::kMetadata},
      {"aten::_version", R::kMetadata}, {"aten::requires_grad_", R::kMetadata},
      {"aten::retain_grad", R::kMetadata}, {"aten::retains_grad", R::kMetadata},
      {"aten::_has_compatible_shallow_copy_type", R::kMetadata},
      {"aten::detach_", R::kMetadata}, {"aten::set_data", R::kMetadata},
      {"aten::is_complex", R::kMetadata}, {"aten::is_floating_point", R::kMetadata},
      {"aten::is_conj", R::kMetadata}, {"aten::is_neg", R::kMetadata},
      {"aten::is_inference", R::kMetadata}, {"aten::result_type", R::kMetadata},
      {"aten::can_cast", R::kMetadata}, {"aten::promote_types", R::kMetadata},
      {"aten::_local_scalar_dense", R::kMetadata}, {"aten::item", R::kMetadata},
      {"aten::_assert_async", R::kMetadata}, {"aten::_assert_tensor_metadata", R::kMetadata},
      {"aten::sym_constrain_range_for_size", R::kMetadata},
      {"aten::record_stream", R::kMetadata}, {"aten::_nested_tensor_size", R::kMetadata},
      {"prim::layout", R::kMetadata}, {"prim::device", R::kMetadata},
      // allocation
      {"aten::empty", R::kAllocation}, {"aten::empty_like", R::kAllocation},
      {"aten::empty_strided", R::kAllocation}, {"aten::new_empty", R::kAllocation},
      {"aten::new_empty_strided", R::kAllocation}, {"aten::resize_", R::kAllocation},
      {"aten::resize_as_", R::kAllocation}, {"aten::_resize_output_", R::kAllocation},
      {"aten::empty_permuted", R::kAllocation},
      // constants
      {"aten::zeros", R::kFill}, {"aten::zeros_like", R::kFill}, {"aten::new_zeros", R::kFill},
      {"aten::ones", R::kFill}, {"aten::ones_like", R::kFill}, {"aten::new_ones", R::kFill},
      {"aten::full", R::kFill}, {"aten::full_like", R::kFill}, {"aten::new_full", R::kFill},
      {"aten::fill_", R::kFill}, {"aten::fill", R::kFill}, {"aten::zero_", R::kFill},
      {"aten::scalar_tensor", R::kFill}, {"aten::arange", R::kFill}, {"aten::eye", R::kFill},
      {"aten::lift_fresh", R::kFill}, {"aten::lift_fresh_copy", R::kFill},
      // copies, conversions, gathers
      {"aten::copy_", R::kCopy}, {"aten::copy", R::kCopy}, {"aten::clone", R::kCopy},
      {"aten::_to_copy", R::kCopy}, {"aten::to", R::kCopy}, {"aten::_copy_from", R::kCopy},
      {"aten::_copy_from_and_resize", R::kCopy}, {"aten::contiguous", R::kCopy},
      {"aten::cat", R::kCopy}, {"aten::stack", R::kCopy}, {"aten::_unsafe_view", R::kCopy},
      {"aten::index_select", R::kCopy}, {"aten::gather", R::kCopy},
      {"aten::_reshape_copy", R::kCopy}, {"aten::repeat", R::kCopy},
      {"aten::constant_pad_nd", R::kCopy}, {"aten::flip", R::kCopy}, {"aten::roll", R::kCopy},
      {"aten::index", R::kCopy},
      {"aten::select_backward", R::kCopy}, {"aten::slice_backward", R::kCopy},
      {"aten::expand_copy", R::kCopy}, {"aten::permute_copy", R::kCopy},
      {"aten::view_copy", R::kCopy}, {"aten::t_copy", R::kCopy},
      {"aten::transpose_copy", R::kCopy},
  };
  return *names;
}

}  // namespace

const char* FormulaSourceName(FormulaSource s) {
  switch (s) {
    case FormulaSource::kCaller: return "caller";
    case FormulaSource::kNative: return "native";
    case FormulaSource::kFallback: return "torchscan_fallback";
  }
  return "unknown";
}

const char* ZeroCostReasonName(ZeroCostReason r) {
  switch (r) {
    case ZeroCostReason::kNone: return "none";
    case ZeroCostReason::kView: return "view";
    case ZeroCostReason::kMetadata: return "metadata";
    case ZeroCostReason::kAllocation: return "allocation";
    case ZeroCostReason::kFill: return "fill";
    case ZeroCostReason::kCopy: return "copy";
  }
  return "unknown";
}

absl::Span<const OperatorFormula> BuiltinOperatorFormulas() { return kFormulas; }

std::string_view FunctionalName(std::string_view op) {
  if (op.size() > 1 && op.back() == '_' && op[op.size() - 2] != '_') return op.substr(0, op.size() - 1);
  return op;
}

const OperatorFormula* FindOperatorFormula(std::string_view op) {
  const auto& index = FormulaIndex();
  if (auto it = index.find(op); it != index.end()) return it->second;
  if (auto it = index.find(FunctionalName(op)); it != index.end()) return it->second;
  return nullptr;
}

ZeroCostReason ClassifyZeroCost(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  const auto& names = ZeroCostNames();
  if (auto it = names.find(std::string_view(name)); it != names.end()) return it->second;
  const auto& returns = schema.returns();
  if (returns.empty()) return ZeroCostReason::kNone;
  for (const auto& r : returns) {
    const c10::AliasInfo* alias = r.alias_info();
    if (alias == nullptr || alias->isWrite()) return ZeroCostReason::kNone;
  }
  return ZeroCostReason::kView;
}

}  // namespace torchscan
