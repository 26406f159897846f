#include "formulas/arithmetic.h"

#include <string>

#include "absl/container/flat_hash_set.h"
#include "formulas/registry.h"

namespace torchscan {

Arithmetic ArithmeticOfDtype(c10::ScalarType t) {
  if (c10::isComplexType(t)) return Arithmetic::kComplex;
  if (c10::isFloatingType(t)) return Arithmetic::kReal;
  return Arithmetic::kInteger;
}

Arithmetic ArithmeticOf(const OpCall& call) {
  Arithmetic result = Arithmetic::kNone;
  auto see = [&](const TensorMeta& t) {
    if (!t.defined) return;
    const Arithmetic a = ArithmeticOfDtype(t.dtype);
    if (a == Arithmetic::kComplex || result == Arithmetic::kComplex) {
      result = Arithmetic::kComplex;
    } else if (a == Arithmetic::kReal || result == Arithmetic::kReal) {
      result = Arithmetic::kReal;
    } else {
      result = Arithmetic::kInteger;
    }
  };
  for (const ArgMeta& a : call.args) {
    if (a.is_tensor()) see(a.tensor());
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& t : a.tensors()) see(t);
    }
  }
  return result;
}

Arithmetic ArithmeticWithScalars(const OpCall& call) {
  const Arithmetic tensors = ArithmeticOf(call);
  if (tensors == Arithmetic::kComplex || tensors == Arithmetic::kReal) return tensors;
  for (const ArgMeta& a : call.args) {
    if (a.kind == ArgKind::kDouble) return Arithmetic::kReal;
  }
  return tensors;
}

bool PromotesIntegersToFloat(std::string_view op) {
  // Checked against torch 2.13: each returns float32 for int64 operands.
  static const auto* names = new absl::flat_hash_set<std::string_view>{"aten::div",
                                                                       "aten::true_divide",
                                                                       "aten::atan2",
                                                                       "aten::arctan2",
                                                                       "aten::copysign",
                                                                       "aten::float_power",
                                                                       "aten::exp",
                                                                       "aten::exp2",
                                                                       "aten::expm1",
                                                                       "aten::log",
                                                                       "aten::log2",
                                                                       "aten::log10",
                                                                       "aten::log1p",
                                                                       "aten::sqrt",
                                                                       "aten::rsqrt",
                                                                       "aten::sin",
                                                                       "aten::cos",
                                                                       "aten::tan",
                                                                       "aten::asin",
                                                                       "aten::acos",
                                                                       "aten::atan",
                                                                       "aten::sinh",
                                                                       "aten::cosh",
                                                                       "aten::asinh",
                                                                       "aten::acosh",
                                                                       "aten::atanh",
                                                                       "aten::erf",
                                                                       "aten::erfc",
                                                                       "aten::erfinv",
                                                                       "aten::reciprocal",
                                                                       "aten::sigmoid",
                                                                       "aten::tanh",
                                                                       "aten::xlogy",
                                                                       "aten::logsumexp",
                                                                       "aten::sinc",
                                                                       "aten::logit",
                                                                       "aten::lgamma",
                                                                       "aten::digamma",
                                                                       "aten::i0",
                                                                       "aten::deg2rad",
                                                                       "aten::rad2deg",
                                                                       "aten::special_i0e",
                                                                       "aten::special_i1",
                                                                       "aten::special_i1e",
                                                                       "aten::special_ndtr",
                                                                       "aten::special_ndtri",
                                                                       "aten::special_erfcx",
                                                                       "aten::special_log_ndtr",
                                                                       "aten::special_xlog1py",
                                                                       "aten::special_entr",
                                                                       "aten::logaddexp",
                                                                       "aten::logaddexp2",
                                                                       "aten::special_bessel_j0",
                                                                       "aten::special_bessel_j1",
                                                                       "aten::special_bessel_y0",
                                                                       "aten::special_bessel_y1",
                                                                       "aten::special_modified_bessel_i0",
                                                                       "aten::special_modified_bessel_i1",
                                                                       "aten::special_modified_bessel_k0",
                                                                       "aten::special_modified_bessel_k1",
                                                                       "aten::special_scaled_modified_bessel_k0",
                                                                       "aten::special_scaled_modified_bessel_k1",
                                                                       "aten::special_spherical_bessel_j0",
                                                                       "aten::special_airy_ai",
                                                                       "aten::polygamma",
                                                                       "aten::angle",
                                                                       "aten::mvlgamma"};
  return names->contains(FunctionalName(op));
}

Arithmetic ComputationArithmetic(const OpCall& call, Arithmetic operands) {
  if (operands != Arithmetic::kInteger) return operands;
  const ArgMeta& out = call.output(0);
  if (!out.is_tensor() || !out.tensor().defined || !c10::isFloatingType(out.tensor().dtype)) return operands;
  if (call.out_form && !PromotesIntegersToFloat(call.name)) return operands;  // computed in the operands' dtype
  // Division with a rounding mode keeps integer operands integral (floor and
  // trunc division of integers), whatever dtype the destination has.
  if (FunctionalName(call.name) == "aten::div" && call.arg(2).kind == ArgKind::kString) return operands;
  return Arithmetic::kReal;
}

Arithmetic ReductionArithmetic(const OpCall& call, size_t dtype_arg) {
  const ArgMeta& d = call.arg(dtype_arg);
  if (d.kind == ArgKind::kInt) return ArithmeticOfDtype(static_cast<c10::ScalarType>(d.to_int()));
  if (call.output(0).is_tensor()) return ArithmeticOfDtype(call.output(0).tensor().dtype);
  return ArithmeticOf(call);
}

FormulaResult CountFor(const OpCall& call, Arithmetic a, Count count) {
  switch (a) {
    case Arithmetic::kReal:
      return FormulaResult::Complete(count);
    case Arithmetic::kInteger:
    case Arithmetic::kNone:
      return FormulaResult::Complete(0);
    case Arithmetic::kComplex:
      return FormulaResult::Unavailable("complex_arithmetic", std::string(call.name) +
                                                                  ": complex arithmetic has no TorchScan convention; "
                                                                  "supply a caller formula (custom_mapping) for it");
  }
  return FormulaResult::Complete(count);
}

const TensorMeta* DenseArg(const OpCall& call, size_t i) {
  const ArgMeta& a = call.arg(i);
  if (!a.is_tensor()) return nullptr;
  const TensorMeta& t = a.tensor();
  return (t.nested || !t.strided) ? nullptr : &t;
}

const TensorMeta* DenseOutput(const OpCall& call, size_t i) {
  const ArgMeta& a = call.output(i);
  if (!a.is_tensor()) return nullptr;
  const TensorMeta& t = a.tensor();
  return (t.nested || !t.strided) ? nullptr : &t;
}

FormulaResult NotDense(const OpCall& call) {
  return FormulaResult::Unavailable(
      "unsupported_operator_formula",
      std::string(call.name) + ": sparse, nested or symbolic-shape tensors have no TorchScan count");
}

Count Elements(const ArgMeta& a) {
  if (a.is_tensor()) return a.tensor().nested ? 0 : a.tensor().numel();
  Count n = 0;  // a list's elements together need not fit int64_t
  if (a.kind == ArgKind::kTensorList) {
    for (const TensorMeta& t : a.tensors()) n += t.defined && !t.nested ? t.numel() : 0;
  }
  return n;
}

bool ReturnedItsInput(const OpCall& call) {
  if (!call.returns_alias || call.outputs.empty()) return false;
  for (const ArgMeta& o : call.outputs) {
    if (!o.is_tensor() || o.tensor().identity == 0) return false;
    bool found = false;
    for (const ArgMeta& a : call.args) found = found || (a.is_tensor() && a.tensor().identity == o.tensor().identity);
    if (!found) return false;
  }
  return true;
}

std::optional<double> ScalarArg(const OpCall& call, size_t i) {
  const ArgMeta& a = call.arg(i);
  switch (a.kind) {
    case ArgKind::kInt:
    case ArgKind::kBool:
      return static_cast<double>(a.to_int());
    case ArgKind::kDouble:
      return a.to_double();
    default:
      return std::nullopt;
  }
}

}  // namespace torchscan
