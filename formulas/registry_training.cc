// The formula table's torchscan_training_v1 rows: the training-step extension
// of torchscan_flops_v1 (formulas/TRAINING.md holds its table: kernel, count,
// derivation, boundary).
#include "formulas/registry_rows.h"

#include "formulas/activation_backward.h"
#include "formulas/attention.h"
#include "formulas/layer_backward.h"
#include "formulas/losses.h"
#include "formulas/normalization_backward.h"
#include "formulas/optimizers.h"
#include "formulas/recurrent.h"
#include "formulas/torch_compat.h"

namespace torchscan::rows {
namespace {

const OperatorFormula kRows[] = {
    // @@activation_backward rows@@
    // Activation, softmax and dropout backward (formulas/activation_backward.h).
    {"aten::threshold_backward", activation_backward::Threshold, kF, /*pointwise=*/true},
    {"aten::gelu_backward", activation_backward::Gelu, kF, /*pointwise=*/true},
    {"aten::silu_backward", activation_backward::Silu, kF, /*pointwise=*/true},
    {"aten::sigmoid_backward", activation_backward::SigmoidTanh, kF, /*pointwise=*/true},
    {"aten::tanh_backward", activation_backward::SigmoidTanh, kF, /*pointwise=*/true},
    {"aten::hardtanh_backward", activation_backward::RangeMask, kF, /*pointwise=*/true},
    {"aten::hardshrink_backward", activation_backward::RangeMask, kF, /*pointwise=*/true},
    {"aten::softshrink_backward", activation_backward::RangeMask, kF, /*pointwise=*/true},
    {"aten::leaky_relu_backward", activation_backward::LeakyRelu, kF, /*pointwise=*/true},
    {"aten::elu_backward", activation_backward::Elu, kF, /*pointwise=*/true},
    {"aten::softplus_backward", activation_backward::Softplus, kF, /*pointwise=*/true},
    {"aten::mish_backward", activation_backward::Mish, kF, /*pointwise=*/true},
    {"aten::hardswish_backward", activation_backward::Hardswish, kF, /*pointwise=*/true},
    {"aten::hardsigmoid_backward", activation_backward::Hardsigmoid, kF, /*pointwise=*/true},
    {"aten::log_sigmoid_backward", activation_backward::LogSigmoid, kF, /*pointwise=*/true},
    {"aten::logit_backward", activation_backward::Logit, kF, /*pointwise=*/true},
    {"aten::_prelu_kernel_backward", activation_backward::Prelu, kF, /*pointwise=*/true},
    // Not single-pass over all operands (a branch reads noise or self; staged
    // halves; two multiplies; two passes per row): no pointwise module view.
    {"aten::rrelu_with_noise_backward", activation_backward::RreluWithNoise, kF},
    {"aten::glu_backward", activation_backward::Glu, kF},
    {"aten::native_dropout_backward", activation_backward::NativeDropout, kF},
    {"aten::_softmax_backward_data", activation_backward::SoftmaxData, kF},
    {"aten::_log_softmax_backward_data", activation_backward::LogSoftmaxData, kF},
    {"aten::_masked_softmax_backward", activation_backward::MaskedSoftmax, kF},
    // @@normalization_backward rows@@
    // Normalization backward (formulas/normalization_backward.h).
    {"aten::native_layer_norm_backward", normalization_backward::LayerNorm, kF},
    {"aten::native_group_norm_backward", normalization_backward::GroupNorm, kF},
    {"aten::native_batch_norm_backward", normalization_backward::BatchNorm, kF},
    {"aten::batch_norm_backward", normalization_backward::BatchNorm, kF},
    {"aten::cudnn_batch_norm_backward", normalization_backward::CudnnBatchNorm, kF},
    {"aten::miopen_batch_norm_backward", normalization_backward::CudnnBatchNorm, kF},
    {"aten::_fused_rms_norm_backward", normalization_backward::FusedRmsNorm, kF},
    {"aten::_weight_norm_interface_backward", normalization_backward::WeightNorm, kF},
    // @@layer_backward rows@@
    // Pooling, interpolation, embedding, distance and grid-sampling gradients (formulas/layer_backward.h).
    {"aten::max_pool2d_with_indices_backward", layer_backward::MaxPoolBackward, kF},
    {"aten::max_pool3d_with_indices_backward", layer_backward::MaxPoolBackward, kF},
    {"aten::adaptive_max_pool2d_backward", layer_backward::MaxPoolBackward, kF},
    {"aten::adaptive_max_pool3d_backward", layer_backward::MaxPoolBackward, kF},
    {"aten::avg_pool2d_backward", layer_backward::AvgPoolBackward, kF},
    {"aten::avg_pool3d_backward", layer_backward::AvgPoolBackward, kF},
    {"aten::_adaptive_avg_pool2d_backward", layer_backward::AdaptiveAvgPoolBackward, kF},
    {"aten::_adaptive_avg_pool3d_backward", layer_backward::AdaptiveAvgPoolBackward, kF},
    {"aten::reflection_pad1d_backward", layer_backward::PadBackward, kF},
    {"aten::reflection_pad2d_backward", layer_backward::PadBackward, kF},
    {"aten::reflection_pad3d_backward", layer_backward::PadBackward, kF},
    {"aten::replication_pad1d_backward", layer_backward::PadBackward, kF},
    {"aten::replication_pad2d_backward", layer_backward::PadBackward, kF},
    {"aten::replication_pad3d_backward", layer_backward::PadBackward, kF},
    {"aten::upsample_nearest1d_backward", layer_backward::NearestBackward, kF},
    {"aten::upsample_nearest2d_backward", layer_backward::NearestBackward, kF},
    {"aten::upsample_nearest3d_backward", layer_backward::NearestBackward, kF},
    {"aten::_upsample_nearest_exact1d_backward", layer_backward::NearestBackward, kF},
    {"aten::_upsample_nearest_exact2d_backward", layer_backward::NearestBackward, kF},
    {"aten::_upsample_nearest_exact3d_backward", layer_backward::NearestBackward, kF},
    {"aten::upsample_linear1d_backward", layer_backward::WeightedBackward<2>, kF},
    {"aten::upsample_bilinear2d_backward", layer_backward::WeightedBackward<4>, kF},
    {"aten::upsample_trilinear3d_backward", layer_backward::WeightedBackward<8>, kF},
    {"aten::upsample_bicubic2d_backward", layer_backward::WeightedBackward<16>, kF},
    {"aten::embedding_dense_backward", layer_backward::EmbeddingDenseBackward, kF},
    {"aten::_embedding_bag_backward", layer_backward::EmbeddingBagBackward, kF},
    {"aten::_embedding_bag_dense_backward", layer_backward::EmbeddingBagDenseBackward, kF},
    {"aten::_embedding_bag_per_sample_weights_backward", layer_backward::EmbeddingBagPerSampleWeightsBackward, kF},
    {"aten::_cdist_backward", layer_backward::CdistBackward, kF},
    {"aten::_pdist_backward", layer_backward::PdistBackward, kF},
    {"aten::grid_sampler_2d_backward", layer_backward::GridSampler2dBackward, kF},
    // @@losses rows@@
    // Loss kernels, forward and backward (formulas/losses.h). nll_loss and the
    // margin losses read only selected values: no pointwise module view.
    {"aten::nll_loss_forward", losses::NllLossForward, kF},
    {"aten::nll_loss2d_forward", losses::NllLossForward, kF},
    {"aten::nll_loss_backward", losses::NllLossBackward, kF},
    {"aten::nll_loss2d_backward", losses::NllLossBackward, kF},
    {"aten::mse_loss", losses::MseLoss, kF, /*pointwise=*/true},
    {"aten::mse_loss_backward", losses::MseLossBackward, kF, /*pointwise=*/true},
    {"aten::smooth_l1_loss", losses::SmoothL1OrHuberLoss, kF, /*pointwise=*/true},
    {"aten::smooth_l1_loss_backward", losses::SmoothL1OrHuberLossBackward, kF, /*pointwise=*/true},
    {"aten::huber_loss", losses::SmoothL1OrHuberLoss, kF, /*pointwise=*/true},
    {"aten::huber_loss_backward", losses::SmoothL1OrHuberLossBackward, kF, /*pointwise=*/true},
    {"aten::binary_cross_entropy", losses::BinaryCrossEntropy, kF, /*pointwise=*/true},
    {"aten::binary_cross_entropy_backward", losses::BinaryCrossEntropyBackward, kF, /*pointwise=*/true},
    {"aten::binary_cross_entropy_with_logits", losses::BinaryCrossEntropyWithLogits, kF, /*pointwise=*/true},
    {"aten::soft_margin_loss", losses::SoftMarginLoss, kF, /*pointwise=*/true},
    {"aten::soft_margin_loss_backward", losses::SoftMarginLossBackward, kF, /*pointwise=*/true},
    {"aten::multi_margin_loss", losses::MultiMarginLoss, kF},
    {"aten::multi_margin_loss_backward", losses::MultiMarginLossBackward, kF},
    {"aten::multilabel_margin_loss_forward", losses::MultilabelMarginLossForward, kF},
    {"aten::multilabel_margin_loss_backward", losses::MultilabelMarginLossBackward, kF},
// @@optimizers rows@@
// List kernels: the per-tensor row on each element, summed (formulas/optimizers.h). _foreach_lgamma
// and _foreach_powsum have no per-tensor row; _foreach_copy/_zero/_clone are zero-cost copies/fills.
#define TS_FOREACH(name) {"aten::_foreach_" name, optimizers::Foreach, kF}
    TS_FOREACH("abs"),
    TS_FOREACH("acos"),
    TS_FOREACH("add"),
    TS_FOREACH("addcdiv"),
    TS_FOREACH("addcmul"),
    TS_FOREACH("asin"),
    TS_FOREACH("atan"),
    TS_FOREACH("ceil"),
    TS_FOREACH("clamp_max"),
    TS_FOREACH("clamp_min"),
    TS_FOREACH("cos"),
    TS_FOREACH("cosh"),
    TS_FOREACH("div"),
    TS_FOREACH("erf"),
    TS_FOREACH("erfc"),
    TS_FOREACH("exp"),
    TS_FOREACH("expm1"),
    TS_FOREACH("floor"),
    TS_FOREACH("frac"),
    TS_FOREACH("lerp"),
    TS_FOREACH("log"),
    TS_FOREACH("log10"),
    TS_FOREACH("log1p"),
    TS_FOREACH("log2"),
    TS_FOREACH("max"),
    TS_FOREACH("maximum"),
    TS_FOREACH("minimum"),
    TS_FOREACH("mm"),
    TS_FOREACH("mul"),
    TS_FOREACH("neg"),
    TS_FOREACH("norm"),
    TS_FOREACH("pow"),
    TS_FOREACH("reciprocal"),
    TS_FOREACH("round"),
    TS_FOREACH("rsqrt"),
    TS_FOREACH("sigmoid"),
    TS_FOREACH("sign"),
    TS_FOREACH("sin"),
    TS_FOREACH("sinh"),
    TS_FOREACH("sqrt"),
    TS_FOREACH("sub"),
    TS_FOREACH("tan"),
    TS_FOREACH("tanh"),
    TS_FOREACH("trunc"),
#undef TS_FOREACH
    // Fused optimizer steps: the for-loop implementation's per-element operations.
    {"aten::_fused_adam", optimizers::FusedAdam, kF},
    {"aten::_fused_adamw", optimizers::FusedAdamW, kF},
    {"aten::_fused_sgd", optimizers::FusedSgd, kF},
    {"aten::_fused_adagrad", optimizers::FusedAdagrad, kF},
// @@attention_recurrent_backward rows@@
#if !TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
    {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", attention::SdpaCpuBackward, kF},
#endif
    {"aten::mkldnn_rnn_layer_backward", recurrent::MkldnnRnnLayerBackward, kF},
};

}  // namespace

absl::Span<const OperatorFormula> Training() { return kRows; }

}  // namespace torchscan::rows
