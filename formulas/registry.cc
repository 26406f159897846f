// The formula table (its rows, one family per file: registry_rows.h), the
// stated exclusions, and the lookups over both.
#include "formulas/registry.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "formulas/arithmetic.h"
#include "formulas/registry_rows.h"
#include "formulas/torch_compat.h"

namespace torchscan {
namespace {

// Every family's rows, in one table built once; the rows never change after.
absl::Span<const OperatorFormula> FormulaTable() {
  static const auto* table = [] {
    auto* t = new std::vector<OperatorFormula>();
    for (absl::Span<const OperatorFormula> family : {rows::Products(), rows::Elementwise(), rows::Reductions(),
                                                     rows::Indexing(), rows::Layers(), rows::Training()}) {
      t->insert(t->end(), family.begin(), family.end());
    }
    return t;
  }();
  return *table;
}

const absl::flat_hash_map<std::string_view, const OperatorFormula*>& FormulaIndex() {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, const OperatorFormula*>();
    for (const auto& f : FormulaTable()) m->emplace(f.op, &f);
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

absl::Span<const OperatorFormula> BuiltinOperatorFormulas() { return FormulaTable(); }

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
