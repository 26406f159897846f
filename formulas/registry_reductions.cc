// The formula table's reductions, scans and whole-tensor comparisons and sums
// (torchscan_flops_v1 fallbacks).
#include "formulas/registry_rows.h"

#include "formulas/elementwise.h"
#include "formulas/reduction.h"

namespace torchscan::rows {
namespace {

const OperatorFormula kRows[] = {
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
    TS_PW("aminmax", reduction::Aminmax),
    TS_PW("logsumexp", reduction::Logsumexp),
    // Sums of overlapping windows (F.fold): the sum rule over what lands in the output.
    TS_PW("col2im", reduction::Col2im),
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
};

}  // namespace

absl::Span<const OperatorFormula> Reductions() { return kRows; }

}  // namespace torchscan::rows
