#include "formulas/module_costs.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "formulas/arithmetic.h"
#include "formulas/attention.h"
#include "formulas/compiled.h"
#include "formulas/convolution.h"
#include "formulas/elementwise.h"
#include "formulas/indexing.h"
#include "formulas/matmul.h"
#include "formulas/misc.h"
#include "formulas/normalization.h"
#include "formulas/pooling.h"
#include "formulas/reduction.h"
#include "formulas/shapes.h"
#include "formulas/softmax.h"

namespace torchscan {
namespace {

#define TS_MODULE(name, fn) {"aten::" name, fn}

const ModuleFormula kModuleFormulas[] = {
    // Products: K multiplies + K-1 adds per dot, one bias add per output.
    TS_MODULE("linear", matmul::LinearCosts),
    TS_MODULE("mm", matmul::MmCosts),
    TS_MODULE("addmm", matmul::AddmmCosts),
    TS_MODULE("bmm", matmul::BmmCosts),
    TS_MODULE("baddbmm", matmul::BaddbmmCosts),
    TS_MODULE("dot", matmul::DotCosts),
    TS_MODULE("vdot", matmul::DotCosts),
    TS_MODULE("mv", matmul::MvCosts),
    TS_MODULE("addmv", matmul::AddmvCosts),
    TS_MODULE("addr", matmul::AddrCosts),
    TS_MODULE("_grouped_mm", matmul::GroupedMmCosts),
    TS_MODULE("convolution", convolution::ConvolutionCosts),
    TS_MODULE("_convolution", convolution::ConvolutionCosts),
    TS_MODULE("_scaled_dot_product_flash_attention_for_cpu", attention::SdpaCpuCosts),
    TS_MODULE("_native_multi_head_attention", attention::NativeMultiHeadAttentionCosts),
    TS_MODULE("_transformer_encoder_layer_fwd", attention::TransformerEncoderLayerCosts),
    TS_MODULE("_scaled_dot_product_flash_attention_for_cpu_backward", attention::SdpaCpuBackwardCosts),
    // Normalization.
    TS_MODULE("native_batch_norm", normalization::BatchNormCosts),
    TS_MODULE("_native_batch_norm_legit", normalization::BatchNormCosts),
    TS_MODULE("_native_batch_norm_legit_no_training", normalization::BatchNormCosts),
    TS_MODULE("native_layer_norm", normalization::LayerNormCosts),
    TS_MODULE("native_group_norm", normalization::GroupNormCosts),
    TS_MODULE("rms_norm", normalization::RmsNormCosts),
    TS_MODULE("_weight_norm", normalization::WeightNormCosts),
    TS_MODULE("_weight_norm_interface", normalization::WeightNormCosts),
    // Softmax family (softmin decomposes into neg + softmax: 10N + 4R accesses).
    TS_MODULE("_softmax", softmax::SoftmaxCosts),
    TS_MODULE("_log_softmax", softmax::LogSoftmaxCosts),
    TS_MODULE("_safe_softmax", softmax::SafeSoftmaxCosts),
    // Pooling.
    TS_MODULE("max_pool1d", pooling::MaxPoolCosts),
    TS_MODULE("max_pool2d", pooling::MaxPoolCosts),
    TS_MODULE("max_pool3d", pooling::MaxPoolCosts),
    TS_MODULE("max_pool1d_with_indices", pooling::MaxPoolCosts),
    TS_MODULE("max_pool2d_with_indices", pooling::MaxPoolCosts),
    TS_MODULE("max_pool3d_with_indices", pooling::MaxPoolCosts),
    TS_MODULE("avg_pool1d", pooling::AvgPoolCosts),
    TS_MODULE("avg_pool2d", pooling::AvgPoolCosts),
    TS_MODULE("avg_pool3d", pooling::AvgPoolCosts),
    TS_MODULE("adaptive_avg_pool1d", pooling::AdaptiveAvgPoolCosts),
    TS_MODULE("adaptive_avg_pool2d", pooling::AdaptiveAvgPoolCosts),
    TS_MODULE("adaptive_avg_pool3d", pooling::AdaptiveAvgPoolCosts),
    TS_MODULE("_adaptive_avg_pool2d", pooling::AdaptiveAvgPoolCosts),
    TS_MODULE("_adaptive_avg_pool3d", pooling::AdaptiveAvgPoolCosts),
    TS_MODULE("adaptive_max_pool1d", pooling::AdaptiveMaxPoolCosts),
    TS_MODULE("adaptive_max_pool2d", pooling::AdaptiveMaxPoolCosts),
    TS_MODULE("adaptive_max_pool3d", pooling::AdaptiveMaxPoolCosts),
    // Dropout, lookups, interpolation.
    TS_MODULE("dropout", misc::DropoutCosts),
    TS_MODULE("native_dropout", misc::DropoutCosts),
    TS_MODULE("feature_dropout", misc::DropoutCosts),
    TS_MODULE("embedding", misc::EmbeddingCosts),
    TS_MODULE("embedding_renorm_", misc::EmbeddingRenormCosts),
    TS_MODULE("upsample_nearest1d", misc::NearestCosts),
    TS_MODULE("upsample_nearest2d", misc::NearestCosts),
    TS_MODULE("upsample_nearest3d", misc::NearestCosts),
    TS_MODULE("_upsample_nearest_exact1d", misc::NearestCosts),
    TS_MODULE("_upsample_nearest_exact2d", misc::NearestCosts),
    TS_MODULE("_upsample_nearest_exact3d", misc::NearestCosts),
    TS_MODULE("upsample_linear1d", misc::WeightedCosts<2>),
    TS_MODULE("upsample_bilinear2d", misc::WeightedCosts<4>),
    TS_MODULE("upsample_trilinear3d", misc::WeightedCosts<8>),
    TS_MODULE("upsample_bicubic2d", misc::WeightedCosts<16>),
    // Copies into part of a tensor, conditional negation.
    TS_MODULE("scatter_add", indexing::ScatterCosts),
    TS_MODULE("scatter_reduce", indexing::ScatterCosts),
    TS_MODULE("scatter", indexing::ScatterCosts),
    TS_MODULE("index_copy", indexing::IndexCopyCosts),
    TS_MODULE("index_put", indexing::IndexPutCosts),
    TS_MODULE("_index_put_impl", indexing::IndexPutCosts),
    TS_MODULE("_euclidean_dist", indexing::EuclideanDistCosts),
    TS_MODULE("grid_sampler_2d", indexing::GridSampler2dCosts),
    TS_MODULE("_embedding_bag", indexing::EmbeddingBagCosts),
    TS_MODULE("_embedding_bag_forward_only", indexing::EmbeddingBagCosts),
    TS_MODULE("resolve_neg", elementwise::ResolveCosts),
    TS_MODULE("resolve_conj", elementwise::ResolveCosts),
    {"torchscan::compiled_region", compiled::CompiledRegionCosts},
};
#undef TS_MODULE

// Operator-registry rows whose module view is their operator-view count, no
// MACs, every operand read once and every result written once: the
// torchscan_training_v1 kernels without products (one convention serves both
// views; formulas/TRAINING.md, "Module view"), and the rows the kernels
// below stand for. The per-tensor _foreach_ rows join them (but _foreach_mm).
constexpr std::string_view kSinglePassRows[] = {
    "aten::rrelu_with_noise_backward",
    "aten::glu_backward",
    "aten::native_dropout_backward",
    "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data",
    "aten::_masked_softmax_backward",
    "aten::native_layer_norm_backward",
    "aten::native_group_norm_backward",
    "aten::native_batch_norm_backward",
    "aten::batch_norm_backward",
    "aten::cudnn_batch_norm_backward",
    "aten::miopen_batch_norm_backward",
    "aten::_fused_rms_norm_backward",
    "aten::_weight_norm_interface_backward",
    "aten::max_pool2d_with_indices_backward",
    "aten::max_pool3d_with_indices_backward",
    "aten::adaptive_max_pool2d_backward",
    "aten::adaptive_max_pool3d_backward",
    "aten::avg_pool2d_backward",
    "aten::avg_pool3d_backward",
    "aten::_adaptive_avg_pool2d_backward",
    "aten::_adaptive_avg_pool3d_backward",
    "aten::reflection_pad1d_backward",
    "aten::reflection_pad2d_backward",
    "aten::reflection_pad3d_backward",
    "aten::replication_pad1d_backward",
    "aten::replication_pad2d_backward",
    "aten::replication_pad3d_backward",
    "aten::upsample_nearest1d_backward",
    "aten::upsample_nearest2d_backward",
    "aten::upsample_nearest3d_backward",
    "aten::_upsample_nearest_exact1d_backward",
    "aten::_upsample_nearest_exact2d_backward",
    "aten::_upsample_nearest_exact3d_backward",
    "aten::embedding_dense_backward",
    "aten::_embedding_bag_backward",
    "aten::_embedding_bag_dense_backward",
    "aten::nll_loss_forward",
    "aten::nll_loss2d_forward",
    "aten::nll_loss_backward",
    "aten::nll_loss2d_backward",
    "aten::multi_margin_loss",
    "aten::multi_margin_loss_backward",
    "aten::multilabel_margin_loss_forward",
    "aten::multilabel_margin_loss_backward",
    "aten::_fused_adam",
    "aten::_fused_adamw",
    "aten::_fused_sgd",
    "aten::_fused_adagrad",
    "aten::_transform_bias_rescale_qkv",
};

// Operator-view rows with no module-view formula, and why (the coverage
// audit lists them: their two views' classes differ).
constexpr char kGpuKernel[] =
    "a GPU kernel (CUDA, cuDNN, MIOpen, fused attention): its module-view products are not written; a CPU "
    "scan never reaches it";
constexpr char kBelowConvolution[] =
    "a CPU convolution kernel that runs below aten::convolution, whose module row owns it";
constexpr char kProductsNotWritten[] =
    "computes products or weighted sums whose module-view MACs are not written for this kernel: the module "
    "view is partial on it (the operator view counts it)";
const std::pair<std::string_view, const char*> kModuleGaps[] = {
    {"aten::cudnn_convolution", kGpuKernel},
    {"aten::_scaled_mm", kGpuKernel},
    {"aten::_scaled_dot_product_efficient_attention", kGpuKernel},
    {"aten::_scaled_dot_product_flash_attention", kGpuKernel},
    {"aten::_scaled_dot_product_cudnn_attention", kGpuKernel},
    {"aten::_scaled_dot_product_efficient_attention_backward", kGpuKernel},
    {"aten::_scaled_dot_product_flash_attention_backward", kGpuKernel},
    {"aten::_scaled_dot_product_cudnn_attention_backward", kGpuKernel},
    {"aten::_flash_attention_forward", kGpuKernel},
    {"aten::_efficient_attention_forward", kGpuKernel},
    {"aten::_flash_attention_backward", kGpuKernel},
    {"aten::_efficient_attention_backward", kGpuKernel},
    {"aten::convolution_overrideable", kBelowConvolution},
    {"aten::_slow_conv2d_forward", kBelowConvolution},
    {"aten::mkldnn_convolution", kBelowConvolution},
    {"aten::convolution_backward", kProductsNotWritten},
    {"aten::mkldnn_rnn_layer", kProductsNotWritten},
    {"aten::mkldnn_rnn_layer_backward", kProductsNotWritten},
    {"aten::addbmm", kProductsNotWritten},
    {"aten::_int_mm", kProductsNotWritten},
    {"aten::_addmm_activation", kProductsNotWritten},
    {"aten::_foreach_mm", kProductsNotWritten},
    {"aten::upsample_linear1d_backward", kProductsNotWritten},
    {"aten::upsample_bilinear2d_backward", kProductsNotWritten},
    {"aten::upsample_trilinear3d_backward", kProductsNotWritten},
    {"aten::upsample_bicubic2d_backward", kProductsNotWritten},
    {"aten::grid_sampler_2d_backward", kProductsNotWritten},
    {"aten::_cdist_forward", kProductsNotWritten},
    {"aten::_cdist_backward", kProductsNotWritten},
    {"aten::_pdist_forward", kProductsNotWritten},
    {"aten::_pdist_backward", kProductsNotWritten},
    {"aten::_embedding_bag_per_sample_weights_backward", kProductsNotWritten},
};

// Random sampling is the same visible exclusion in the module view.
ModuleCosts RandomSamplingCosts(const OpCall& call) { return ModuleCosts::Unavailable(misc::RandomSampling(call)); }

// The written module formulas plus one per pointwise row of the operator
// registry (same FLOPs, PointwiseCosts for MACs and accesses).
const absl::flat_hash_map<std::string_view, ModuleFormula>& ModuleIndex() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, ModuleFormula>();
    for (const auto& f : BuiltinOperatorFormulas()) {
      const bool per_tensor = f.op.substr(0, 15) == "aten::_foreach_" && f.op != "aten::_foreach_mm";
      if (f.pointwise || per_tensor) m->emplace(f.op, ModuleFormula{f.op, nullptr, f.flops});
      if (f.flops == misc::RandomSampling) m->emplace(f.op, ModuleFormula{f.op, RandomSamplingCosts, nullptr});
    }
    for (std::string_view op : kSinglePassRows) {
      if (const OperatorFormula* f = FindOperatorFormula(op))
        m->emplace(f->op, ModuleFormula{f->op, nullptr, f->flops});
    }
    for (const auto& f : kModuleFormulas) (*m)[f.op] = f;
    return m;
  }();
  return *index;
}

}  // namespace

ModuleCosts PointwiseCosts(const OpCall& call, FormulaFn flops) {
  ModuleCosts c;
  c.flops = flops(call);
  if (c.flops.status == MetricStatus::kUnavailable) return ModuleCosts::Unavailable(c.flops);
  c.macs = FormulaResult::Complete(0);
  Count accesses = 0;
  for (const ArgMeta& a : call.args) accesses += Elements(a);
  for (const ArgMeta& a : call.outputs) accesses += Elements(a);
  c.dmas = FormulaResult::Complete(accesses);
  return c;
}

ModuleCosts ZeroCostCosts(const OpCall& call, ZeroCostReason reason) {
  const FormulaResult zero = FormulaResult::Complete(0);
  // x.to(x.dtype), contiguous() of a contiguous tensor: handed back as is.
  if (ReturnedItsInput(call)) return {zero, zero, zero};
  Count out = 0;
  for (const ArgMeta& a : call.outputs) out += Elements(a);
  switch (reason) {
    case ZeroCostReason::kFill:
      return {zero, zero, FormulaResult::Complete(out)};
    case ZeroCostReason::kCopy: {
      if (call.name == "aten::constant_pad_nd") {
        // Reads the input values that survive negative pads, writes the output.
        const TensorMeta* x = DenseArg(call, 0);
        const ArgMeta& pad = call.arg(1);
        if (!x || pad.kind != ArgKind::kIntList) return ModuleCosts::Unavailable(NotDense(call));
        std::vector<int64_t> kept(x->sizes().begin(), x->sizes().end());
        const auto p = pad.ints();
        for (size_t i = 0; i + 1 < p.size() + 1 && i / 2 < kept.size(); i += 2) {
          int64_t& dim = kept[kept.size() - 1 - i / 2];
          dim += std::min<int64_t>(p[i], 0) + (i + 1 < p.size() ? std::min<int64_t>(p[i + 1], 0) : 0);
          if (dim < 0) dim = 0;
        }
        return {zero, zero, FormulaResult::Complete(Product(kept) + out)};
      }
      if (call.name == "aten::split_with_sizes_copy") {
        // Its pieces partition self (their sizes sum to the dim's): it reads
        // and writes every element of self once, whatever it returns (the
        // out= overload returns nothing).
        const TensorMeta* x = DenseArg(call, 0);
        if (!x) return ModuleCosts::Unavailable(NotDense(call));
        return {zero, zero, FormulaResult::Complete(2 * Count(x->numel()))};
      }
      return {zero, zero, FormulaResult::Complete(2 * out)};
    }
    case ZeroCostReason::kCommunication:
      // No arithmetic; what it reads and writes locally is the backend's business.
      return {zero, zero,
              FormulaResult::Unavailable("unsupported_operator_formula",
                                         "communication: its local memory accesses depend on the backend's "
                                         "algorithm (its bytes between processes: the communication section)")};
    default:
      return {zero, zero, zero};  // views, metadata, allocation
  }
}

absl::Span<const ModuleFormula> BuiltinModuleFormulas() { return kModuleFormulas; }

const char* ModuleViewGap(std::string_view op) {
  for (const auto& [name, why] : kModuleGaps) {
    if (name == op || name == FunctionalName(op)) return why;
  }
  return nullptr;
}

const ModuleFormula* FindModuleFormula(std::string_view op) {
  const auto& index = ModuleIndex();
  if (auto it = index.find(op); it != index.end()) return &it->second;
  if (auto it = index.find(FunctionalName(op)); it != index.end()) return &it->second;
  return nullptr;
}

ModuleCosts ModuleFormula::Evaluate(const OpCall& call) const {
  return pointwise_flops ? PointwiseCosts(call, pointwise_flops) : costs(call);
}

}  // namespace torchscan
