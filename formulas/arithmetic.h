// Shared rules of the TorchScan fallback convention (torchscan_flops_v1):
// which dtype an operation computes in, and how that dtype changes a count.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "formulas/op_call.h"
#include "formulas/result.h"

namespace torchscan {

enum class Arithmetic : uint8_t {
  kReal,     // floating point: counted
  kInteger,  // integer / boolean: excluded from fallback counts (zero)
  kComplex,  // incomplete without a caller override
  kNone,     // no tensor operand: constant-only arithmetic, excluded
};

// The arithmetic of a call from its tensor *arguments* (outputs and scalar
// coefficients do not decide it, per the table's addcmul/addcdiv and power
// rules): complex if any is complex, else real if any is floating point.
Arithmetic ArithmeticOf(const OpCall& call);
// Same, also letting floating-point scalar operands promote (binary ops and
// powers: `int_tensor * 0.5` computes in floating point).
Arithmetic ArithmeticWithScalars(const OpCall& call);
Arithmetic ArithmeticOfDtype(c10::ScalarType t);
// The dtype a pointwise call computes in (type promotion's computation
// dtype), from its operands' arithmetic `operands` (ArithmeticOf or
// ArithmeticWithScalars, per the operator's stated rule): when the operands
// are integral (or boolean) but the result is floating, the call computed in
// that floating dtype (sqrt, exp and true division of integers): real. An
// out= call's destination takes no part in promotion, so there the
// operator's own promotion decides (PromotesIntegersToFloat). Comparisons
// of integers (a bool result) stay integer arithmetic.
Arithmetic ComputationArithmetic(const OpCall& call, Arithmetic operands);
// Operators whose integral operands are promoted to the default floating
// dtype (PyTorch's "float" unary and binary ops: true division, exp/log,
// roots, trigonometric and error functions, ...).
bool PromotesIntegersToFloat(std::string_view op);
// Reduction dtype: an explicit dtype argument, else the output's, else the input's.
Arithmetic ReductionArithmetic(const OpCall& call, size_t dtype_arg);

// Applies the dtype rule to a real-arithmetic count.
FormulaResult CountFor(const OpCall& call, Arithmetic a, Count count);

// The first output, when it is a dense strided tensor; nullptr otherwise.
const TensorMeta* DenseOutput(const OpCall& call, size_t i = 0);
// Argument i, when it is a dense strided tensor; nullptr otherwise.
const TensorMeta* DenseArg(const OpCall& call, size_t i);
// Unavailable result for sparse, nested or symbolic-shape calls.
FormulaResult NotDense(const OpCall& call);

// Elements of a tensor or tensor-list value (0 for anything else, and for
// undefined or nested tensors).
Count Elements(const ArgMeta& a);

// True when the call returned one of its operands (same tensor identity)
// for every output, and its schema lets its returns alias its inputs
// without writing them (OpCall::returns_alias): it moved and computed
// nothing. Unknown identities (0) never match.
bool ReturnedItsInput(const OpCall& call);

// Scalar-valued argument (int, float or bool); nullopt when absent/None.
std::optional<double> ScalarArg(const OpCall& call, size_t i);

}  // namespace torchscan
