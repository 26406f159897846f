// The formula table's layer rows (torchscan_flops_v1 fallbacks): softmax,
// normalization, pooling, dropout, embedding lookups, interpolation, the
// factories that compute their values and random sampling.
#include "formulas/registry_rows.h"

#include "formulas/misc.h"
#include "formulas/normalization.h"
#include "formulas/pooling.h"
#include "formulas/softmax.h"

namespace torchscan::rows {
namespace {

const OperatorFormula kRows[] = {
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
    // Window functions: computing factories (formulas/misc.h).
    TS_PW("hann_window", misc::Window<4>),
    TS_PW("hamming_window", misc::Window<4>),
    TS_PW("bartlett_window", misc::Window<4>),
    TS_PW("blackman_window", misc::Window<8>),
    TS_PW("kaiser_window", misc::Window<8>),
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
};

}  // namespace

absl::Span<const OperatorFormula> Layers() { return kRows; }

}  // namespace torchscan::rows
