#include "formulas/arithmetic.h"

#include <string>

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

Arithmetic ReductionArithmetic(const OpCall& call, size_t dtype_arg) {
  const ArgMeta& d = call.arg(dtype_arg);
  if (d.kind == ArgKind::kInt) return ArithmeticOfDtype(static_cast<c10::ScalarType>(d.to_int()));
  if (call.output(0).is_tensor()) return ArithmeticOfDtype(call.output(0).tensor().dtype);
  return ArithmeticOf(call);
}

FormulaResult CountFor(const OpCall& call, Arithmetic a, Count count) {
  switch (a) {
    case Arithmetic::kReal: return FormulaResult::Complete(count);
    case Arithmetic::kInteger:
    case Arithmetic::kNone: return FormulaResult::Complete(0);
    case Arithmetic::kComplex:
      return FormulaResult::Unavailable(
          "complex_arithmetic",
          std::string(call.name) + ": complex arithmetic has no TorchScan convention; "
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
    case ArgKind::kBool: return static_cast<double>(a.to_int());
    case ArgKind::kDouble: return a.to_double();
    default: return std::nullopt;
  }
}

}  // namespace torchscan
