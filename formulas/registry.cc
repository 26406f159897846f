#include "formulas/registry.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "formulas/activation_backward.h"
#include "formulas/arithmetic.h"
#include "formulas/attention.h"
#include "formulas/compiled.h"
#include "formulas/convolution.h"
#include "formulas/elementwise.h"
#include "formulas/indexing.h"
#include "formulas/layer_backward.h"
#include "formulas/losses.h"
#include "formulas/matmul.h"
#include "formulas/misc.h"
#include "formulas/normalization.h"
#include "formulas/normalization_backward.h"
#include "formulas/optimizers.h"
#include "formulas/pooling.h"
#include "formulas/recurrent.h"
#include "formulas/reduction.h"
#include "formulas/selection.h"
#include "formulas/softmax.h"
#include "formulas/torch_compat.h"

namespace torchscan {
namespace {

constexpr FormulaSource kN = FormulaSource::kNative;
constexpr FormulaSource kF = FormulaSource::kFallback;

// The native rows mirror torch.utils.flop_counter's registry of the release
// built against (torch/utils/flop_counter.py, `flop_registry`), operator for
// operator: 2.11 to 2.14 have the same rows, 2.15 adds the CPU flash kernel.
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

// torchscan_flops_v1 fallbacks: one op per value for scalar arithmetic,
// exp/sqrt/erf-like math, comparison and selection.
#define TS_ROW(name, fn) {"aten::" name, fn, kF}
#define TS_PW(name, fn) {"aten::" name, fn, kF, /*pointwise=*/true}
    TS_PW("add", elementwise::AddSub),
    TS_PW("sub", elementwise::AddSub),
    TS_PW("rsub", elementwise::AddSub),
    TS_PW("div", elementwise::Div),
    TS_PW("floor_divide", elementwise::PerOutput<2>),  // divide + floor
    TS_PW("mul", elementwise::PerOutput<1>),
    TS_PW("maximum", elementwise::PerOutput<1>),
    TS_PW("minimum", elementwise::PerOutput<1>),
    TS_PW("fmax", elementwise::PerOutput<1>),
    TS_PW("fmin", elementwise::PerOutput<1>),
    TS_PW("atan2", elementwise::PerOutput<1>),
    TS_PW("remainder", elementwise::PerOutput<1>),
    TS_PW("fmod", elementwise::PerOutput<1>),
    TS_PW("hypot", elementwise::PerOutput<1>),
    TS_PW("copysign", elementwise::PerOutput<1>),
    TS_PW("pow", elementwise::PerOutput<1>),
    TS_PW("float_power", elementwise::PerOutput<1>),
    TS_PW("eq", elementwise::PerOutput<1>),
    TS_PW("ne", elementwise::PerOutput<1>),
    TS_PW("lt", elementwise::PerOutput<1>),
    TS_PW("le", elementwise::PerOutput<1>),
    TS_PW("gt", elementwise::PerOutput<1>),
    TS_PW("ge", elementwise::PerOutput<1>),
    TS_PW("where", elementwise::PerOutput<1>),
    TS_PW("masked_fill", elementwise::PerOutput<1>),
    TS_PW("logical_and", elementwise::PerOutput<1>),
    TS_PW("logical_or", elementwise::PerOutput<1>),
    TS_PW("logical_xor", elementwise::PerOutput<1>),
    TS_PW("logical_not", elementwise::PerOutput<1>),
    TS_PW("bitwise_not", elementwise::PerOutput<1>),
    TS_PW("bitwise_and", elementwise::PerOutput<1>),
    TS_PW("bitwise_or", elementwise::PerOutput<1>),
    TS_PW("bitwise_xor", elementwise::PerOutput<1>),
    TS_PW("clamp", elementwise::Clamp),
    TS_PW("clamp_min", elementwise::PerOutput<1>),
    TS_PW("clamp_max", elementwise::PerOutput<1>),
    TS_PW("relu", elementwise::PerOutput<1>),
    TS_PW("isnan", elementwise::PerOutput<1>),
    TS_PW("sign", elementwise::PerOutput<1>),
    TS_PW("sgn", elementwise::PerOutput<1>),
    TS_PW("neg", elementwise::PerOutput<1>),
    TS_PW("abs", elementwise::PerOutput<1>),
    TS_PW("exp", elementwise::PerOutput<1>),
    TS_PW("exp2", elementwise::PerOutput<1>),
    TS_PW("expm1", elementwise::PerOutput<1>),
    TS_PW("log", elementwise::PerOutput<1>),
    TS_PW("log2", elementwise::PerOutput<1>),
    TS_PW("log10", elementwise::PerOutput<1>),
    TS_PW("log1p", elementwise::PerOutput<1>),
    TS_PW("sqrt", elementwise::PerOutput<1>),
    TS_PW("rsqrt", elementwise::PerOutput<1>),
    TS_PW("sin", elementwise::PerOutput<1>),
    TS_PW("cos", elementwise::PerOutput<1>),
    TS_PW("tan", elementwise::PerOutput<1>),
    TS_PW("asin", elementwise::PerOutput<1>),
    TS_PW("acos", elementwise::PerOutput<1>),
    TS_PW("atan", elementwise::PerOutput<1>),
    TS_PW("sinh", elementwise::PerOutput<1>),
    TS_PW("cosh", elementwise::PerOutput<1>),
    TS_PW("asinh", elementwise::PerOutput<1>),
    TS_PW("acosh", elementwise::PerOutput<1>),
    TS_PW("atanh", elementwise::PerOutput<1>),
    TS_PW("erf", elementwise::PerOutput<1>),
    TS_PW("erfc", elementwise::PerOutput<1>),
    TS_PW("erfinv", elementwise::PerOutput<1>),
    TS_PW("reciprocal", elementwise::PerOutput<1>),
    TS_PW("ceil", elementwise::PerOutput<1>),
    TS_PW("floor", elementwise::PerOutput<1>),
    TS_PW("round", elementwise::PerOutput<1>),
    TS_PW("trunc", elementwise::PerOutput<1>),
    TS_PW("frac", elementwise::PerOutput<1>),
    TS_PW("addcmul", elementwise::Addc),
    TS_PW("addcdiv", elementwise::Addc),
    // Schema views that negate (conjugate) when the input carries the bit.
    TS_ROW("resolve_neg", elementwise::Resolve),
    TS_ROW("resolve_conj", elementwise::Resolve),
    TS_PW("lerp", elementwise::Lerp),
    // Activations: the table's symbolic expansions per element.
    TS_PW("hardtanh", elementwise::PerOutput<2>),
    TS_PW("threshold", elementwise::PerOutput<2>),
    TS_PW("hardshrink", elementwise::PerOutput<3>),
    TS_PW("leaky_relu", elementwise::PerOutput<4>),
    TS_PW("prelu", elementwise::PerOutput<4>),
    TS_PW("_prelu_kernel", elementwise::PerOutput<4>),
    TS_PW("rrelu_with_noise", elementwise::RreluWithNoise),
    TS_PW("hardsigmoid", elementwise::PerOutput<4>),
    TS_PW("sigmoid", elementwise::PerOutput<4>),
    TS_PW("hardswish", elementwise::PerOutput<5>),
    TS_PW("softshrink", elementwise::PerOutput<5>),
    TS_PW("silu", elementwise::PerOutput<5>),
    TS_PW("glu", elementwise::PerOutput<5>),
    TS_PW("gelu", elementwise::Gelu),
    TS_PW("elu", elementwise::PerOutput<6>),
    TS_PW("tanh", elementwise::PerOutput<6>),
    TS_PW("celu", elementwise::PerOutput<7>),
    TS_PW("selu", elementwise::PerOutput<7>),
    TS_PW("log_sigmoid", elementwise::PerOutput<7>),
    TS_PW("log_sigmoid_forward", elementwise::PerOutput<7>),
    TS_PW("softplus", elementwise::PerOutput<7>),
    TS_PW("mish", elementwise::PerOutput<10>),
    // Reductions and scans.
    TS_PW("sum", reduction::Sum),
    TS_PW("nansum", reduction::Sum),
    TS_PW("prod", reduction::Sum),
    TS_PW("mean", reduction::Mean),
    TS_PW("amax", reduction::Fold),
    TS_PW("amin", reduction::Fold),
    TS_PW("max", reduction::MaxMin),
    TS_PW("min", reduction::MaxMin),
    TS_PW("cumsum", reduction::Cumulative),
    TS_PW("cumprod", reduction::Cumulative),
    TS_PW("linalg_vector_norm", reduction::VectorNorm),
    TS_PW("norm", reduction::VectorNorm),
    TS_PW("var", reduction::Variance),
    TS_PW("var_mean", reduction::Variance),
    TS_PW("std", reduction::StandardDeviation),
    TS_PW("std_mean", reduction::StandardDeviation),
    TS_PW("any", reduction::Fold),
    TS_PW("all", reduction::Fold),
    TS_PW("argmax", reduction::Fold),
    TS_PW("argmin", reduction::Fold),
    TS_PW("isinf", elementwise::PerOutput<1>),
    TS_PW("isposinf", elementwise::PerOutput<1>),
    TS_PW("isneginf", elementwise::PerOutput<1>),
    TS_PW("isfinite", elementwise::PerOutput<1>),
    TS_PW("aminmax", reduction::Aminmax),
    TS_PW("logsumexp", reduction::Logsumexp),
    // Sums of overlapping windows (F.fold): the sum rule over what lands in the output.
    TS_PW("col2im", reduction::Col2im),
    // Selection of the kept triangle: one per value (causal masks).
    TS_PW("tril", elementwise::PerOutput<1>),
    TS_PW("triu", elementwise::PerOutput<1>),
    // Per 3-vector: 6 multiplies + 3 subtractions for 3 values.
    TS_PW("linalg_cross", elementwise::PerOutput<3>),
    // x * log(y), selecting 0 where x == 0: log + multiply + selection.
    TS_PW("xlogy", elementwise::PerOutput<3>),
    TS_PW("isin", indexing::Isin),
    // Scatter/gather that compute, and distances.
    TS_PW("scatter_add", indexing::ScatterAdd),
    TS_PW("scatter_reduce", indexing::ScatterReduce),
    TS_PW("scatter", indexing::Scatter),
    TS_PW("index_put", indexing::IndexPut),
    TS_PW("_index_put_impl", indexing::IndexPut),
    TS_PW("masked_scatter", indexing::MaskedScatter),
    TS_ROW("index_copy", indexing::IndexCopy),
    TS_PW("nonzero", indexing::Nonzero),
    TS_ROW("_cdist_forward", indexing::Cdist),
    TS_ROW("_euclidean_dist", indexing::EuclideanDist),
    TS_ROW("_pdist_forward", indexing::Pdist),
    TS_ROW("_embedding_bag", indexing::EmbeddingBag),
    TS_ROW("_embedding_bag_forward_only", indexing::EmbeddingBag),
    TS_PW("index_add", indexing::IndexAdd),
    TS_PW("index_reduce", indexing::IndexReduce),
    TS_PW("affine_grid_generator", indexing::AffineGridGenerator),
    // Integer-only arithmetic (shifts, gcd/lcm): excluded, zero.
    TS_PW("__lshift__", elementwise::PerOutput<1>),
    TS_PW("__rshift__", elementwise::PerOutput<1>),
    TS_PW("bitwise_left_shift", elementwise::PerOutput<1>),
    TS_PW("bitwise_right_shift", elementwise::PerOutput<1>),
    TS_PW("gcd", elementwise::PerOutput<1>),
    TS_PW("lcm", elementwise::PerOutput<1>),
    TS_ROW("grid_sampler_2d", indexing::GridSampler2d),
    // Softmax family.
    TS_ROW("_softmax", softmax::Softmax),
    TS_ROW("_safe_softmax", softmax::SafeSoftmax),
    TS_ROW("_log_softmax", softmax::LogSoftmax),
    // Normalization.
    TS_ROW("native_layer_norm", normalization::LayerNorm),
    TS_ROW("native_group_norm", normalization::GroupNorm),
    TS_ROW("native_batch_norm", normalization::BatchNorm),
    TS_ROW("_native_batch_norm_legit", normalization::BatchNorm),
    TS_ROW("_native_batch_norm_legit_no_training", normalization::BatchNorm),
    TS_ROW("rms_norm", normalization::RmsNorm),
    TS_ROW("_weight_norm", normalization::WeightNorm),
    TS_ROW("_weight_norm_interface", normalization::WeightNorm),
    // Pooling.
    TS_ROW("max_pool1d", pooling::MaxPool),
    TS_ROW("max_pool2d", pooling::MaxPool),
    TS_ROW("max_pool3d", pooling::MaxPool),
    TS_ROW("max_pool1d_with_indices", pooling::MaxPool),
    TS_ROW("max_pool2d_with_indices", pooling::MaxPool),
    TS_ROW("max_pool3d_with_indices", pooling::MaxPool),
    TS_ROW("avg_pool1d", pooling::AvgPool),
    TS_ROW("avg_pool2d", pooling::AvgPool),
    TS_ROW("avg_pool3d", pooling::AvgPool),
    TS_ROW("adaptive_avg_pool1d", pooling::AdaptiveAvgPool),
    TS_ROW("adaptive_avg_pool2d", pooling::AdaptiveAvgPool),
    TS_ROW("adaptive_avg_pool3d", pooling::AdaptiveAvgPool),
    TS_ROW("_adaptive_avg_pool2d", pooling::AdaptiveAvgPool),
    TS_ROW("_adaptive_avg_pool3d", pooling::AdaptiveAvgPool),
    TS_ROW("adaptive_max_pool1d", pooling::AdaptiveMaxPool),
    TS_ROW("adaptive_max_pool2d", pooling::AdaptiveMaxPool),
    TS_ROW("adaptive_max_pool3d", pooling::AdaptiveMaxPool),
    // Dropout, lookups, interpolation.
    TS_ROW("dropout", misc::Dropout),
    TS_ROW("native_dropout", misc::Dropout),
    TS_ROW("feature_dropout", misc::Dropout),
    TS_ROW("embedding", misc::Embedding),
    TS_ROW("embedding_renorm_", misc::EmbeddingRenorm),
    TS_ROW("upsample_nearest1d", misc::Nearest),
    TS_ROW("upsample_nearest2d", misc::Nearest),
    TS_ROW("upsample_nearest3d", misc::Nearest),
    TS_ROW("_upsample_nearest_exact1d", misc::Nearest),
    TS_ROW("_upsample_nearest_exact2d", misc::Nearest),
    TS_ROW("_upsample_nearest_exact3d", misc::Nearest),
    TS_ROW("upsample_linear1d", misc::Weighted<2>),
    TS_ROW("upsample_bilinear2d", misc::Weighted<4>),
    TS_ROW("upsample_trilinear3d", misc::Weighted<8>),
    TS_ROW("upsample_bicubic2d", misc::Weighted<16>),
    // Factories that compute their values (formulas/CONVENTIONS.md); fills are zero-cost rules.
    TS_PW("linspace", misc::Linspace),
    TS_PW("logspace", misc::Logspace),
    TS_PW("arange", misc::Arange),
    TS_PW("range", misc::Arange),
    // torchscan_selection_v1 (formulas/CONVENTIONS.md): comparisons of sorting, selection and search.
    TS_PW("sort", selection::Sort),
    TS_PW("argsort", selection::Sort),
    TS_PW("msort", selection::Sort),
    TS_PW("topk", selection::Topk),
    TS_PW("kthvalue", selection::Kthvalue),
    TS_PW("median", selection::Median),
    TS_PW("nanmedian", selection::Median),
    TS_PW("mode", selection::Mode),
    TS_PW("_unique2", selection::Unique),
    TS_PW("_unique", selection::Unique),
    TS_PW("unique_consecutive", selection::UniqueConsecutive),
    TS_PW("unique_dim", selection::UniqueDim),
    TS_PW("unique_dim_consecutive", selection::UniqueDim),
    TS_PW("searchsorted", selection::Searchsorted),
    TS_PW("bucketize", selection::Bucketize),
    TS_PW("histc", selection::Histc),
    // Window functions: computing factories (formulas/misc.h).
    TS_PW("hann_window", misc::Window<4>),
    TS_PW("hamming_window", misc::Window<4>),
    TS_PW("bartlett_window", misc::Window<4>),
    TS_PW("blackman_window", misc::Window<8>),
    TS_PW("kaiser_window", misc::Window<8>),
    // More exp/log/erf-like functions: one per value (the table's rule), or their stated expansions.
    TS_PW("angle", elementwise::PerOutput<1>),
    TS_PW("deg2rad", elementwise::PerOutput<1>),
    TS_PW("rad2deg", elementwise::PerOutput<1>),
    TS_PW("digamma", elementwise::PerOutput<1>),
    TS_PW("lgamma", elementwise::PerOutput<1>),
    TS_PW("polygamma", elementwise::PerOutput<1>),
    TS_PW("i0", elementwise::PerOutput<1>),
    TS_PW("igamma", elementwise::PerOutput<1>),
    TS_PW("igammac", elementwise::PerOutput<1>),
    TS_PW("heaviside", elementwise::PerOutput<1>),
    TS_PW("nextafter", elementwise::PerOutput<1>),
    TS_PW("signbit", elementwise::PerOutput<1>),
    TS_PW("frexp", elementwise::PerOutput<1>),
    TS_PW("conj_physical", elementwise::PerOutput<0>),
    // ldexp: x * 2^e (2); nan_to_num: NaN, +inf and -inf tests with their selections (3);
    // sinc: sin(pi x) / (pi x) and the x == 0 selection (4); log-add-exp: max, a - b, |.|,
    // negate, exp, log1p, add (7), base 2 also scales by 1/ln 2 (8).
    TS_PW("ldexp", elementwise::PerOutput<2>),
    TS_PW("nan_to_num", elementwise::PerOutput<3>),
    TS_PW("sinc", elementwise::PerOutput<4>),
    TS_PW("logaddexp", elementwise::PerOutput<7>),
    TS_PW("logaddexp2", elementwise::PerOutput<8>),
    TS_PW("logit", elementwise::Logit),
    TS_PW("mvlgamma", elementwise::Mvlgamma),
#define TS_SPECIAL(name) TS_PW("special_" name, elementwise::PerOutput<1>)
    TS_SPECIAL("airy_ai"),
    TS_SPECIAL("bessel_j0"),
    TS_SPECIAL("bessel_j1"),
    TS_SPECIAL("bessel_y0"),
    TS_SPECIAL("bessel_y1"),
    TS_SPECIAL("modified_bessel_i0"),
    TS_SPECIAL("modified_bessel_i1"),
    TS_SPECIAL("modified_bessel_k0"),
    TS_SPECIAL("modified_bessel_k1"),
    TS_SPECIAL("scaled_modified_bessel_k0"),
    TS_SPECIAL("scaled_modified_bessel_k1"),
    TS_SPECIAL("spherical_bessel_j0"),
    TS_SPECIAL("erfcx"),
    TS_SPECIAL("i0e"),
    TS_SPECIAL("i1"),
    TS_SPECIAL("i1e"),
    TS_SPECIAL("log_ndtr"),
    TS_SPECIAL("ndtri"),
#undef TS_SPECIAL
    // entr: -x ln x, selecting 0 at 0 and -inf below (log, multiply, negate, selection: 4);
    // xlog1py: as xlogy with log1p (3).
    TS_PW("special_entr", elementwise::PerOutput<4>),
    TS_PW("special_xlog1py", elementwise::PerOutput<3>),
    // Whole-tensor comparisons and sums.
    TS_PW("equal", elementwise::PerInput<1>),
    TS_PW("count_nonzero", elementwise::PerInput<1>),
    TS_PW("hash_tensor", elementwise::PerInput<0>),  // bit arithmetic on the values: integer, zero
    TS_PW("allclose", elementwise::Allclose),
    TS_PW("dist", elementwise::Dist),
    TS_PW("trace", elementwise::Trace),
    TS_PW("bincount", elementwise::Bincount),
    TS_PW("cummax", reduction::Cumulative),
    TS_PW("cummin", reduction::Cumulative),
    TS_PW("logcumsumexp", elementwise::LogCumsumExp),
    TS_PW("renorm", elementwise::Renorm),
    TS_PW("segment_reduce", elementwise::SegmentReduce),
    // Visible exclusions: random sampling has no count.
    TS_ROW("rand", misc::RandomSampling),
    TS_ROW("randn", misc::RandomSampling),
    TS_ROW("rand_like", misc::RandomSampling),
    TS_ROW("randn_like", misc::RandomSampling),
    TS_ROW("randint", misc::RandomSampling),
    TS_ROW("randint_like", misc::RandomSampling),
    TS_ROW("randperm", misc::RandomSampling),
    TS_ROW("bernoulli", misc::RandomSampling),
    TS_ROW("normal", misc::RandomSampling),
    TS_ROW("uniform", misc::RandomSampling),
    TS_ROW("exponential", misc::RandomSampling),
    TS_ROW("geometric", misc::RandomSampling),
    TS_ROW("cauchy", misc::RandomSampling),
    TS_ROW("log_normal", misc::RandomSampling),
    TS_ROW("random", misc::RandomSampling),
    TS_ROW("multinomial", misc::RandomSampling),
    TS_ROW("poisson", misc::RandomSampling),
    TS_ROW("_standard_gamma", misc::RandomSampling),
    TS_ROW("binomial", misc::RandomSampling),
    TS_ROW("_sample_dirichlet", misc::RandomSampling),
    TS_ROW("normal_functional", misc::RandomSampling),

    // torchscan_training_v1: the training-step extension of torchscan_flops_v1
    // (formulas/TRAINING.md holds its table: kernel, count, derivation, boundary).
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
#undef TS_ROW
#undef TS_PW
};

const absl::flat_hash_map<std::string_view, const OperatorFormula*>& FormulaIndex() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, const OperatorFormula*>();
    for (const auto& f : kFormulas) m->emplace(f.op, &f);
    return m;
  }();
  return *index;
}

constexpr char kFactorizationGap[] =
    "a dense matrix factorization or solve (LAPACK: pivoting, iterative or blocked algorithms); "
    "torchscan_flops_v1 has no convention for its count";
constexpr char kPolynomialGap[] =
    "an orthogonal polynomial of degree n evaluated by its recurrence: n steps, n read from a tensor's "
    "values (TorchScan records no values)";
constexpr char kSeriesGap[] =
    "the Hurwitz zeta function: a series summed until it converges, its length set by the values";
constexpr char kHistogramGap[] =
    "histogram / histogramdd with bin edges: a binary search per value over edges given by values; "
    "torchscan_selection_v1 has rows for histc, searchsorted and bucketize, not yet for these";
constexpr char kFftGap[] = "FFT: complex transforms have no torchscan_flops_v1 convention";
constexpr char kCtcGap[] =
    "CTC loss: dynamic programming over alignments; its count depends on each sample's input and target "
    "lengths (values, not shapes); torchscan_training_v1 has no convention for it";
constexpr char kGradScalerGap[] =
    "gradient scaling (torch.amp.GradScaler): whether a step is skipped and how the scale changes depend "
    "on the gradients' values; torchscan_training_v1 has no convention for it";

constexpr char kReductionAcrossProcesses[] =
    "a reduction across processes: the backend combines what it receives, by an algorithm and reduce op "
    "torchscan_flops_v1 has no convention for; its bytes are in the communication section";

const Exclusion kExclusions[] = {
    {"c10d::allreduce_", kReductionAcrossProcesses},
    {"c10d::allreduce_coalesced_", kReductionAcrossProcesses},
    {"c10d::reduce_", kReductionAcrossProcesses},
    {"c10d::reduce_scatter_", kReductionAcrossProcesses},
    {"c10d::_reduce_scatter_base_", kReductionAcrossProcesses},
    {"c10d::reduce_scatter_tensor_coalesced_", kReductionAcrossProcesses},
    {"_c10d_functional::all_reduce", kReductionAcrossProcesses},
    {"_c10d_functional::all_reduce_coalesced", kReductionAcrossProcesses},
    {"_c10d_functional::reduce_scatter_tensor", kReductionAcrossProcesses},
    {"_c10d_functional::reduce_scatter_tensor_out", kReductionAcrossProcesses},
    {"_c10d_functional::reduce_scatter_tensor_coalesced", kReductionAcrossProcesses},
    {"_c10d_functional_autograd::reduce_scatter_tensor", kReductionAcrossProcesses},
#define TS_LAPACK(name) {"aten::" name, kFactorizationGap}
    TS_LAPACK("_linalg_det"),
    TS_LAPACK("_linalg_eigh"),
    TS_LAPACK("_linalg_eigvals"),
    TS_LAPACK("_linalg_slogdet"),
    TS_LAPACK("_linalg_solve_ex"),
    TS_LAPACK("_linalg_svd"),
    TS_LAPACK("cholesky"),
    TS_LAPACK("cholesky_inverse"),
    TS_LAPACK("cholesky_solve"),
    TS_LAPACK("geqrf"),
    TS_LAPACK("linalg_cholesky_ex"),
    TS_LAPACK("linalg_eig"),
    TS_LAPACK("linalg_householder_product"),
    TS_LAPACK("linalg_inv_ex"),
    TS_LAPACK("linalg_ldl_factor_ex"),
    TS_LAPACK("linalg_lu"),
    TS_LAPACK("linalg_lu_factor_ex"),
    TS_LAPACK("linalg_matrix_exp"),
    TS_LAPACK("linalg_qr"),
    TS_LAPACK("linalg_solve_triangular"),
    TS_LAPACK("triangular_solve"),
    TS_LAPACK("linalg_lu_solve"),
    TS_LAPACK("lu_unpack"),
    TS_LAPACK("ormqr"),
    TS_LAPACK("linalg_ldl_solve"),
    TS_LAPACK("linalg_pinv"),
    // torch 2.14 on: the polar decomposition and the Hermitian matrix square root.
    TS_LAPACK("linalg_polar"),
    TS_LAPACK("linalg_matrix_sqrth"),
#undef TS_LAPACK
#define TS_POLY(name) {"aten::special_" name, kPolynomialGap}
    TS_POLY("chebyshev_polynomial_t"),
    TS_POLY("chebyshev_polynomial_u"),
    TS_POLY("chebyshev_polynomial_v"),
    TS_POLY("chebyshev_polynomial_w"),
    TS_POLY("hermite_polynomial_h"),
    TS_POLY("hermite_polynomial_he"),
    TS_POLY("laguerre_polynomial_l"),
    TS_POLY("legendre_polynomial_p"),
    TS_POLY("shifted_chebyshev_polynomial_t"),
    TS_POLY("shifted_chebyshev_polynomial_u"),
    TS_POLY("shifted_chebyshev_polynomial_v"),
    TS_POLY("shifted_chebyshev_polynomial_w"),
#undef TS_POLY
    {"aten::special_zeta", kSeriesGap},
    {"aten::histogram", kHistogramGap},
    {"aten::_histogramdd_bin_edges", kHistogramGap},
    {"aten::_histogramdd_from_bin_cts", kHistogramGap},
    {"aten::_histogramdd_from_bin_tensors", kHistogramGap},
    {"aten::_fft_r2c", kFftGap},
    {"aten::_fft_c2r", kFftGap},
    {"aten::_fft_c2c", kFftGap},
    {"aten::_ctc_loss", kCtcGap},
    {"aten::_ctc_loss_backward", kCtcGap},
    {"aten::_amp_foreach_non_finite_check_and_unscale", kGradScalerGap},
    {"aten::_amp_update_scale", kGradScalerGap},
};

}  // namespace

const char* StatedExclusion(std::string_view op) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, const char*>();
    for (const auto& e : kExclusions) m->emplace(e.op, e.reason);
    return m;
  }();
  auto it = index->find(op);
  if (it == index->end()) it = index->find(FunctionalName(op));  // in-place variants share the reason
  return it == index->end() ? nullptr : it->second;
}

absl::Span<const Exclusion> StatedExclusions() { return kExclusions; }

const char* NativeConvention() {
  return "torch.utils.flop_counter of torch " TORCHSCAN_TORCH_RELEASE
#if TORCHSCAN_NATIVE_CPU_FLASH_ATTENTION
         " (the CPU flash attention kernel and its backward counted as their matrix products)";
#else
         " (no native formula for the CPU flash attention kernel: TorchScan's CPU SDPA fallback rows)";
#endif
}

const char* FormulaSourceName(FormulaSource s) {
  switch (s) {
    case FormulaSource::kCaller:
      return "caller";
    case FormulaSource::kNative:
      return "native";
    case FormulaSource::kFallback:
      return "torchscan_fallback";
  }
  return "unknown";
}

absl::Span<const OperatorFormula> BuiltinOperatorFormulas() { return kFormulas; }

FormulaResult EvaluateOperatorFormula(const OperatorFormula& f, const OpCall& call) {
  FormulaResult r = f.flops(call);
  if (f.source == FormulaSource::kNative && r.status == MetricStatus::kComplete &&
      ArithmeticOf(call) == Arithmetic::kComplex) {
    return FormulaResult::Partial(r.value, "complex_arithmetic",
                                  std::string(call.name) + ": complex products counted as real ones (a lower bound)");
  }
  return r;
}

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

bool OutsideFormulaRows(const c10::OperatorName& op) { return op.name == "aten::where" && op.overload_name.empty(); }

}  // namespace torchscan
