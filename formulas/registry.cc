#include "formulas/registry.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "formulas/attention.h"
#include "formulas/convolution.h"
#include "formulas/matmul.h"

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
    // Products PyTorch runs as their own kernels without a native formula.
    {"aten::dot", matmul::Dot, kF},
    {"aten::vdot", matmul::Dot, kF},
    {"aten::mv", matmul::Mv, kF},
    {"aten::addmv", matmul::Addmv, kF},
    {"aten::addbmm", matmul::Addbmm, kF},
    {"aten::addr", matmul::Addr, kF},
    {"aten::_int_mm", matmul::IntMm, kF},
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
