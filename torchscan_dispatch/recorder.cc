#include "torchscan_dispatch/recorder.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstring>

#include "torchscan_dispatch/communication.h"

namespace torchscan {
namespace {

// Fills `m` from `t`; sizes and strides share one arena allocation.
void FillTensor(Arena& arena, const at::Tensor& t, TensorMeta& m) {
  m = TensorMeta();
  if (!t.defined()) return;
  m.defined = true;
  m.identity = reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl());
  m.dtype = t.scalar_type();
  m.device = t.device().type();
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->is_nested() || impl->has_symbolic_sizes_strides()) {
    m.nested = true;  // no concrete rectangular shape: formulas must not guess
    return;
  }
  const c10::IntArrayRef sizes = impl->sizes();
  const size_t n = sizes.size();
  const bool strided = impl->layout() == c10::kStrided;
  m.strided = strided;
  int64_t* out = arena.Alloc<int64_t>(strided ? 2 * n : n);
  if (n) std::memcpy(out, sizes.data(), n * sizeof(int64_t));
  m.ndim = static_cast<int32_t>(n);
  m.size_data = out;
  if (strided) {
    const c10::IntArrayRef strides = impl->strides();
    if (n) std::memcpy(out + n, strides.data(), n * sizeof(int64_t));
    m.stride_data = out + n;
  }
}

ArgMeta Record(Arena& arena, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return ArgMeta::None();
    TensorMeta* m = arena.Alloc<TensorMeta>(1);
    FillTensor(arena, t, *m);
    return ArgMeta::Tensor(m);
  }
  if (v.isNone()) return ArgMeta::None();
  if (v.isInt()) return ArgMeta::Int(v.toInt());
  if (v.isDouble()) return ArgMeta::Double(v.toDouble());
  if (v.isBool()) return ArgMeta::Bool(v.toBool());
  if (v.isSymInt()) {
    auto maybe = v.toSymInt().maybe_as_int();
    return maybe ? ArgMeta::Int(*maybe) : ArgMeta::Other();
  }
  if (v.isIntList()) {
    const auto list = v.toIntList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i);
    return ArgMeta::Ints(ArgKind::kIntList, out, list.size());
  }
  if (v.isSymIntList()) {
    const auto list = v.toSymIntList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      auto maybe = list.get(i).maybe_as_int();
      if (!maybe) return ArgMeta::Other();
      out[i] = *maybe;
    }
    return ArgMeta::Ints(ArgKind::kIntList, out, list.size());
  }
  if (v.isBoolList()) {
    const auto list = v.toBoolList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i) ? 1 : 0;
    return ArgMeta::Ints(ArgKind::kBoolList, out, list.size());
  }
  if (v.isDoubleList()) {
    const auto list = v.toDoubleList();
    double* out = arena.Alloc<double>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i);
    return ArgMeta::Doubles(out, list.size());
  }
  if (v.isTensorList()) {
    const auto list = v.toTensorList();
    TensorMeta* out = arena.Alloc<TensorMeta>(list.size());
    for (size_t i = 0; i < list.size(); ++i) FillTensor(arena, list.get(i), out[i]);
    return ArgMeta::Tensors(out, list.size());
  }
  if (v.isList()) {
    // Tensor?[] arrives as a generic list of optional tensors.
    const auto list = v.toListRef();
    // Scalar[] (the per-tensor scalars of _foreach_div_.ScalarList and the
    // like) arrives as a generic list of numbers: kDoubleList.
    if (!list.empty() && std::all_of(list.begin(), list.end(), [](const c10::IValue& e) {
          return e.isInt() || e.isDouble() || e.isBool();
        })) {
      double* out = arena.Alloc<double>(list.size());
      for (size_t i = 0; i < list.size(); ++i) {
        const c10::IValue& e = list[i];
        out[i] = e.isDouble() ? e.toDouble() : e.isInt() ? static_cast<double>(e.toInt()) : (e.toBool() ? 1.0 : 0.0);
      }
      return ArgMeta::Doubles(out, list.size());
    }
    TensorMeta* out = arena.Alloc<TensorMeta>(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].isTensor()) {
        FillTensor(arena, list[i].toTensor(), out[i]);
      } else if (list[i].isNone()) {
        out[i] = TensorMeta();
      } else {
        return ArgMeta::Other();
      }
    }
    return ArgMeta::Tensors(out, list.size());
  }
  if (v.isString()) {
    const auto& s = v.toStringRef();
    char* out = arena.Alloc<char>(s.size());
    std::memcpy(out, s.data(), s.size());
    return ArgMeta::String(out, s.size());
  }
  // c10d's ProcessGroup / ReduceOp: their names (communication.cc).
  if (v.isObject()) return RecordCustomClass(arena, v);
  return ArgMeta::Other();
}

}  // namespace

absl::Span<const ArgMeta> RecordValues(Arena& arena, absl::Span<const c10::IValue> values) {
  ArgMeta* out = arena.Alloc<ArgMeta>(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Record(arena, values[i]);
  return {out, values.size()};
}

}  // namespace torchscan
