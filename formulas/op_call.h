// Value-free metadata of one executed operator call: what every formula reads.
//
// The recorder (torchscan_dispatch/) fills these from the boxed stack; tests
// build them by hand. Nothing here refers to a tensor: sizes, strides, dtype,
// device and scalar values only. Pointers refer to storage owned by the
// recorder's arena (or by the test), which outlives every formula call. The
// structs are kept small because one is written per argument of every call.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <string_view>

namespace torchscan {

struct TensorMeta {
  bool defined = false;
  bool nested = false;  // ragged nested or symbolic: no concrete rectangular shape
  bool strided = true;  // false for sparse / mkldnn / other non-strided layouts
  // A Python number wrapped as a 0-d tensor for the call (`0.5 * x`): made
  // without a recorded call, at any freed address, and never data.
  bool wrapped = false;
  // Identity of the tensor object (its TensorImpl address) for data-flow
  // analyses: which call's output fed which call. Never dereferenced.
  uintptr_t identity = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DeviceType device = c10::DeviceType::CPU;
  int32_t ndim = 0;
  const int64_t* size_data = nullptr;    // ndim values
  const int64_t* stride_data = nullptr;  // ndim values, or nullptr (non-strided layouts)

  c10::ArrayRef<int64_t> sizes() const { return {size_data, static_cast<size_t>(ndim)}; }
  c10::ArrayRef<int64_t> strides() const { return {stride_data, stride_data ? static_cast<size_t>(ndim) : 0}; }
  int64_t dim() const { return ndim; }
  int64_t size(int64_t d) const { return size_data[d < 0 ? d + ndim : d]; }
  // Fits int64_t: PyTorch refuses a tensor whose element count does not.
  // A zero size makes it 0 whatever the other sizes (whose product alone
  // may pass int64_t, which PyTorch allows), so check for one first.
  int64_t numel() const {
    for (int32_t i = 0; i < ndim; ++i) {
      if (size_data[i] == 0) return 0;
    }
    int64_t n = 1;
    for (int32_t i = 0; i < ndim; ++i) n *= size_data[i];
    return n;
  }
};

enum class ArgKind : uint8_t {
  kNone,  // None / undefined tensor / undefined optional
  kTensor,
  kInt,  // also SymInt with a concrete value
  kDouble,
  kBool,
  kIntList,     // int[] / SymInt[]
  kBoolList,    // bool[] (stored as 0/1 ints)
  kDoubleList,  // float[]
  kTensorList,  // Tensor[] / Tensor?[] (undefined entries stay undefined)
  kString,
  kOther,  // Device, Generator, complex, objects ...
};

class ArgMeta {
 public:
  ArgKind kind = ArgKind::kNone;
  uint32_t count = 0;  // list length / string length

  bool is_none() const { return kind == ArgKind::kNone; }
  bool is_tensor() const { return kind == ArgKind::kTensor; }
  const TensorMeta& tensor() const { return *u_.tensor; }
  int64_t to_int() const { return u_.i; }  // kInt, kBool
  double to_double() const { return u_.d; }
  bool to_bool() const { return u_.i != 0; }
  c10::ArrayRef<int64_t> ints() const { return {u_.ints, count}; }  // kIntList, kBoolList
  c10::ArrayRef<double> doubles() const { return {u_.doubles, count}; }
  c10::ArrayRef<TensorMeta> tensors() const { return {u_.tensors, count}; }
  std::string_view str() const { return {u_.str, count}; }

  static ArgMeta None() { return ArgMeta(); }
  static ArgMeta Tensor(const TensorMeta* t) {
    return Make(ArgKind::kTensor, 0, [&](U& u) { u.tensor = t; });
  }
  static ArgMeta Int(int64_t v) {
    return Make(ArgKind::kInt, 0, [&](U& u) { u.i = v; });
  }
  static ArgMeta Bool(bool v) {
    return Make(ArgKind::kBool, 0, [&](U& u) { u.i = v ? 1 : 0; });
  }
  static ArgMeta Double(double v) {
    return Make(ArgKind::kDouble, 0, [&](U& u) { u.d = v; });
  }
  static ArgMeta Ints(ArgKind k, const int64_t* p, uint32_t n) {
    return Make(k, n, [&](U& u) { u.ints = p; });
  }
  static ArgMeta Doubles(const double* p, uint32_t n) {
    return Make(ArgKind::kDoubleList, n, [&](U& u) { u.doubles = p; });
  }
  static ArgMeta Tensors(const TensorMeta* p, uint32_t n) {
    return Make(ArgKind::kTensorList, n, [&](U& u) { u.tensors = p; });
  }
  static ArgMeta String(const char* p, uint32_t n) {
    return Make(ArgKind::kString, n, [&](U& u) { u.str = p; });
  }
  static ArgMeta Other() {
    return Make(ArgKind::kOther, 0, [](U&) {});
  }

 private:
  union U {
    int64_t i;
    double d;
    const TensorMeta* tensor;
    const int64_t* ints;
    const double* doubles;
    const TensorMeta* tensors;
    const char* str;
  };
  template <class F>
  static ArgMeta Make(ArgKind k, uint32_t n, F&& set) {
    ArgMeta a;
    a.kind = k;
    a.count = n;
    set(a.u_);
    return a;
  }
  U u_{0};
};

// One call: the operator's identity, its operands and its returns.
struct OpCall {
  std::string_view name;      // "aten::mm"
  std::string_view overload;  // "" or "out"
  // The operands in schema order (keyword-only ones included). An out=
  // overload's destinations (schema `is_out()`: the trailing `Tensor(a!) out`
  // arguments) are not operands: they are written, never read, and the
  // recorder's caller leaves them out (they are the returns).
  c10::ArrayRef<ArgMeta> args;
  c10::ArrayRef<ArgMeta> outputs;
  // From the schema: every return may alias an input without writing it
  // (`Tensor(a) self -> Tensor(a)`, as for aten::to or aten::contiguous). A
  // call that returned its very input (same identity) then did nothing.
  bool returns_alias = false;
  // An out= overload: the outputs are the caller's destinations, whose dtype
  // takes no part in type promotion (arithmetic.h: ComputationArithmetic).
  bool out_form = false;

  // Argument i, or a None argument when the call has fewer.
  const ArgMeta& arg(size_t i) const { return i < args.size() ? args[i] : kNoneArg; }
  const ArgMeta& output(size_t i) const { return i < outputs.size() ? outputs[i] : kNoneArg; }

  static inline const ArgMeta kNoneArg{};
};

}  // namespace torchscan
