// The formula table's matrix products, convolutions, attention, recurrent
// layers and compiled regions (forward): torch.utils.flop_counter's native
// rows and the fallbacks for the products it has no entry for.
#include "formulas/registry_rows.h"

#include "formulas/attention.h"
#include "formulas/compiled.h"
#include "formulas/convolution.h"
#include "formulas/matmul.h"
#include "formulas/recurrent.h"
#include "formulas/torch_compat.h"

namespace torchscan::rows {
namespace {

// The native rows mirror torch.utils.flop_counter's registry of the release
// built against (torch/utils/flop_counter.py, `flop_registry`), operator for
// operator: 2.11 to 2.14 have the same rows, 2.15 adds the CPU flash kernel.
const OperatorFormula kRows[] = {
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
#if TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
    {"aten::_scaled_dot_product_flash_attention_for_cpu", attention::SdpaForward, kN},
    {"aten::_scaled_dot_product_flash_attention_for_cpu_backward", attention::SdpaBackward, kN},
#else
    // The CPU flash kernel FlopCounterMode has no entry for before 2.15: with
    // no native formula, the table's "CPU SDPA fallback" row applies
    // (complete). Its backward is a torchscan_training_v1 row (below).
    {"aten::_scaled_dot_product_flash_attention_for_cpu", attention::SdpaCpu, kF},
#endif
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
    {"aten::_grouped_mm", matmul::GroupedMm, kF},
    {"aten::_addmm_activation", matmul::AddmmActivation, kF},
    {"aten::mkldnn_convolution", convolution::DirectConvolution, kF},
    {"aten::mkldnn_rnn_layer", recurrent::MkldnnRnnLayer, kF},
    {"aten::_transform_bias_rescale_qkv", attention::TransformBiasRescaleQkv, kF},
    // A compiled graph's fused kernels: unknown work in every view (never zero).
    {"torchscan::compiled_region", compiled::CompiledRegion, kF},
};

}  // namespace

absl::Span<const OperatorFormula> Products() { return kRows; }

}  // namespace torchscan::rows
