#include "torchscan_dispatch/recorder.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/List.h>

#include <cstring>

namespace torchscan {
namespace {

absl::Span<const int64_t> CopyInts(Arena& arena, c10::IntArrayRef xs) {
  int64_t* out = arena.Alloc<int64_t>(xs.size());
  if (!xs.empty()) std::memcpy(out, xs.data(), xs.size() * sizeof(int64_t));
  return {out, xs.size()};
}

void FillTensor(Arena& arena, const at::Tensor& t, TensorMeta& m) {
  m.defined = t.defined();
  if (!m.defined) return;
  m.dtype = t.scalar_type();
  m.device = t.device().type();
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->is_nested()) {
    m.nested = true;  // ragged: no rectangular shape to report
    return;
  }
  if (impl->has_symbolic_sizes_strides()) {
    m.nested = true;  // symbolic shapes: not concrete, formulas must not guess
    return;
  }
  m.sizes = CopyInts(arena, t.sizes());
  if (t.layout() == c10::kStrided) m.strides = CopyInts(arena, t.strides());
}

void Fill(Arena& arena, const c10::IValue& v, ArgMeta& a) {
  if (v.isNone()) {
    a.kind = ArgKind::kNone;
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    a.kind = t.defined() ? ArgKind::kTensor : ArgKind::kNone;
    FillTensor(arena, t, a.tensor);
  } else if (v.isInt()) {
    a.kind = ArgKind::kInt;
    a.i = v.toInt();
  } else if (v.isSymInt()) {
    auto maybe = v.toSymInt().maybe_as_int();
    a.kind = maybe ? ArgKind::kInt : ArgKind::kOther;
    a.i = maybe.value_or(0);
  } else if (v.isDouble()) {
    a.kind = ArgKind::kDouble;
    a.d = v.toDouble();
  } else if (v.isBool()) {
    a.kind = ArgKind::kBool;
    a.i = v.toBool() ? 1 : 0;
  } else if (v.isIntList()) {
    a.kind = ArgKind::kIntList;
    const auto list = v.toIntList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i);
    a.ints = {out, list.size()};
  } else if (v.isSymIntList()) {
    const auto list = v.toSymIntList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    a.kind = ArgKind::kIntList;
    for (size_t i = 0; i < list.size(); ++i) {
      auto maybe = list.get(i).maybe_as_int();
      if (!maybe) {
        a.kind = ArgKind::kOther;
        return;
      }
      out[i] = *maybe;
    }
    a.ints = {out, list.size()};
  } else if (v.isBoolList()) {
    a.kind = ArgKind::kBoolList;
    const auto list = v.toBoolList();
    int64_t* out = arena.Alloc<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i) ? 1 : 0;
    a.ints = {out, list.size()};
  } else if (v.isDoubleList()) {
    a.kind = ArgKind::kDoubleList;
    const auto list = v.toDoubleList();
    double* out = arena.Alloc<double>(list.size());
    for (size_t i = 0; i < list.size(); ++i) out[i] = list.get(i);
    a.doubles = {out, list.size()};
  } else if (v.isTensorList()) {
    a.kind = ArgKind::kTensorList;
    const auto list = v.toTensorList();
    TensorMeta* out = arena.Alloc<TensorMeta>(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      new (&out[i]) TensorMeta();
      FillTensor(arena, list.get(i), out[i]);
    }
    a.tensors = {out, list.size()};
  } else if (v.isList()) {
    // Tensor?[] arrives as a generic list of optional tensors.
    const auto list = v.toListRef();
    TensorMeta* out = arena.Alloc<TensorMeta>(list.size());
    a.kind = ArgKind::kTensorList;
    for (size_t i = 0; i < list.size(); ++i) {
      new (&out[i]) TensorMeta();
      if (list[i].isTensor()) {
        FillTensor(arena, list[i].toTensor(), out[i]);
      } else if (!list[i].isNone()) {
        a.kind = ArgKind::kOther;
        return;
      }
    }
    a.tensors = {out, list.size()};
  } else if (v.isString()) {
    a.kind = ArgKind::kString;
    const auto& s = v.toStringRef();
    char* out = arena.Alloc<char>(s.size());
    std::memcpy(out, s.data(), s.size());
    a.str = {out, s.size()};
  } else {
    a.kind = ArgKind::kOther;  // Device, Generator, complex, objects ...
  }
}

}  // namespace

absl::Span<const ArgMeta> RecordValues(Arena& arena, absl::Span<const c10::IValue> values) {
  ArgMeta* out = arena.Alloc<ArgMeta>(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    new (&out[i]) ArgMeta();
    Fill(arena, values[i], out[i]);
  }
  return {out, values.size()};
}

}  // namespace torchscan
