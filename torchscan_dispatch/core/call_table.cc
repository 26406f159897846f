#include "torchscan_dispatch/core/call_table.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

namespace torchscan {
std::atomic<CustomClassRecorder>& CustomClassRecorderSlot() {
  static std::atomic<CustomClassRecorder> slot{nullptr};
  return slot;
}

void SetCustomClassRecorder(CustomClassRecorder recorder) {
  CustomClassRecorderSlot().store(recorder, std::memory_order_release);
}

namespace {

// Fills `m` from `t`; sizes and strides share one arena allocation.
void FillTensor(Arena& arena, const at::Tensor& t, TensorMeta& m, CallTensors& ids) {
  m = TensorMeta();
  if (!t.defined()) return;
  m.defined = true;
  m.identity = ids.Number(reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()));
  m.dtype = t.scalar_type();
  m.device = t.device().type();
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  m.wrapped = impl->is_wrapped_number();
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

ArgMeta Record(Arena& arena, const c10::IValue& v, CallTensors& ids) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return ArgMeta::None();
    TensorMeta* m = arena.Alloc<TensorMeta>(1);
    FillTensor(arena, t, *m, ids);
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
    for (size_t i = 0; i < list.size(); ++i) FillTensor(arena, list.get(i), out[i], ids);
    return ArgMeta::Tensors(out, list.size());
  }
  if (v.isList()) {
    // Tensor?[] arrives as a generic list of optional tensors.
    const auto list = v.toListRef();
    // Scalar[] (the per-tensor scalars of _foreach_div_.ScalarList and the
    // like) arrives as a generic list of numbers: kDoubleList.
    if (!list.empty() && std::all_of(list.begin(), list.end(),
                                     [](const c10::IValue& e) { return e.isInt() || e.isDouble() || e.isBool(); })) {
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
        FillTensor(arena, list[i].toTensor(), out[i], ids);
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
  // c10d's ProcessGroup / ReduceOp: their names (SetCustomClassRecorder).
  if (v.isObject()) {
    const CustomClassRecorder custom = CustomClassRecorderSlot().load(std::memory_order_acquire);
    return custom != nullptr ? custom(arena, v) : ArgMeta::Other();
  }
  return ArgMeta::Other();
}

// Copies the metadata of `values` into `arena`, numbering their tensors in `ids`.
absl::Span<const ArgMeta> RecordValues(Arena& arena, absl::Span<const c10::IValue> values, CallTensors& ids) {
  ArgMeta* out = arena.Alloc<ArgMeta>(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Record(arena, values[i], ids);
  return {out, values.size()};
}

// Note [Repeated calls]
// A model makes the same few hundred calls over and over, so the signature a
// call gets is mostly the one its operator got last time. CallTable keeps,
// per operator and keys, the last two running-call signatures, and each
// running-call signature the finished one it last ended as; a call is first
// compared with those guesses in place, against its IValues, without
// recording into the arena or hashing. The comparison is what recording and
// SameValues would decide, value by value (tensor numbers included: it
// numbers the call's tensors in the same order as recording does), so a guess
// that matches is the very signature Intern would have found; any value it
// does not know how to compare in place (symbolic ints, objects, ...) fails
// it, and the call is recorded as before. Clear drops every guess with the
// signatures.

// Shapes have a few dimensions: a loop the compiler keeps inline is cheaper
// than a call to memcmp, which is most of a repeated call's matching.
inline bool SameInts(const int64_t* a, const int64_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// `t` is what FillTensor recorded as `m`; numbers it in `ids` as FillTensor does.
bool MatchTensor(const TensorMeta& m, const at::Tensor& t, CallTensors& ids) {
  if (!t.defined()) return !m.defined;  // an undefined one is always TensorMeta()
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!m.defined || m.identity != ids.Number(reinterpret_cast<uintptr_t>(impl))) return false;
  if (m.dtype != t.scalar_type() || m.device != t.device().type() || m.wrapped != impl->is_wrapped_number())
    return false;
  if (impl->is_nested() || impl->has_symbolic_sizes_strides()) return m.nested;  // nothing else recorded
  if (m.nested) return false;
  const c10::IntArrayRef sizes = impl->sizes();
  const size_t n = sizes.size();
  const bool strided = impl->layout() == c10::kStrided;
  if (static_cast<size_t>(m.ndim) != n || m.strided != strided) return false;
  if (n == 0) return true;
  if (!SameInts(m.size_data, sizes.data(), n)) return false;
  // A strided tensor's recorded strides are never null (FillTensor).
  return !strided || SameInts(m.stride_data, impl->strides().data(), n);
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// `v` is what Record recorded as `m` (false also for values only Record compares).
bool MatchValue(const ArgMeta& m, const c10::IValue& v, CallTensors& ids) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return m.kind == ArgKind::kNone;
    return m.kind == ArgKind::kTensor && MatchTensor(m.tensor(), t, ids);
  }
  if (v.isNone()) return m.kind == ArgKind::kNone;
  if (v.isInt()) return m.kind == ArgKind::kInt && m.to_int() == v.toInt();
  if (v.isDouble()) return m.kind == ArgKind::kDouble && SameBits(m.to_double(), v.toDouble());
  if (v.isBool()) return m.kind == ArgKind::kBool && m.to_int() == (v.toBool() ? 1 : 0);
  if (v.isDevice() || v.isGenerator()) return m.kind == ArgKind::kOther;
  if (v.isString()) return m.kind == ArgKind::kString && m.str() == v.toStringRef();
  if (!v.isList()) return false;  // symbolic ints, objects, ...: Record decides
  const c10::ArrayRef<c10::IValue> list = v.toListRef();
  if (m.count != list.size()) return false;
  if (v.isIntList()) {
    if (m.kind != ArgKind::kIntList) return false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (m.ints()[i] != list[i].toInt()) return false;
    }
    return true;
  }
  if (v.isBoolList()) {
    if (m.kind != ArgKind::kBoolList) return false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (m.ints()[i] != (list[i].toBool() ? 1 : 0)) return false;
    }
    return true;
  }
  if (v.isDoubleList()) {
    if (m.kind != ArgKind::kDoubleList) return false;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!SameBits(m.doubles()[i], list[i].toDouble())) return false;
    }
    return true;
  }
  if (v.isSymIntList()) return false;
  if (m.kind == ArgKind::kTensorList) {
    // Tensor[], or a generic list Record read as Tensor?[]; a non-empty
    // list of numbers was recorded as kDoubleList and fails at its first.
    for (size_t i = 0; i < list.size(); ++i) {
      const c10::IValue& e = list[i];
      if (e.isTensor()) {
        if (!MatchTensor(m.tensors()[i], e.toTensor(), ids)) return false;
      } else if (!e.isNone() || m.tensors()[i].defined) {
        return false;
      }
    }
    return true;
  }
  if (m.kind == ArgKind::kDoubleList && !list.empty()) {
    // Scalar[]: a generic list of numbers (Record converts each).
    for (size_t i = 0; i < list.size(); ++i) {
      const c10::IValue& e = list[i];
      double d;
      if (e.isDouble()) {
        d = e.toDouble();
      } else if (e.isInt()) {
        d = static_cast<double>(e.toInt());
      } else if (e.isBool()) {
        d = e.toBool() ? 1.0 : 0.0;
      } else {
        return false;
      }
      if (!SameBits(m.doubles()[i], d)) return false;
    }
    return true;
  }
  return false;
}

bool MatchValues(absl::Span<const ArgMeta> recorded, absl::Span<const c10::IValue> values, CallTensors& ids) {
  if (recorded.size() != values.size()) return false;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!MatchValue(recorded[i], values[i], ids)) return false;
  }
  return true;
}

}  // namespace
// ---- Call-local tensor numbers.

void CallTensors::Reset(const uintptr_t* ids, size_t n) {
  ids_.resize(n);
  for (size_t i = 0; i < n; ++i) ids_[i] = ids[i];  // a few addresses: no memmove call
  if (!index_.empty()) index_.clear();
  if (ids_.size() > kLinear) IndexAll();
}

void CallTensors::Truncate(size_t n) {
  if (ids_.size() <= n) return;
  ids_.resize(n);
  index_.clear();
  if (ids_.size() > kLinear) IndexAll();
}

void CallTensors::IndexAll() {
  for (size_t i = 0; i < ids_.size(); ++i) index_.emplace(ids_[i], static_cast<uint32_t>(i + 1));
}

uint32_t CallTensors::Number(uintptr_t address) {
  if (ids_.size() <= kLinear) {
    for (size_t i = 0; i < ids_.size(); ++i) {
      if (ids_[i] == address) return static_cast<uint32_t>(i + 1);
    }
    ids_.push_back(address);
    if (ids_.size() > kLinear) IndexAll();  // a long tensor list: from now on by hash
    return static_cast<uint32_t>(ids_.size());
  }
  auto [it, added] = index_.emplace(address, static_cast<uint32_t>(ids_.size() + 1));
  if (added) ids_.push_back(address);
  return it->second;
}

// ---- Signatures: hashed and compared by content.

namespace {

inline void Mix(uint64_t& h, uint64_t v) {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
}

inline uint64_t Bits(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

void MixTensor(uint64_t& h, const TensorMeta& t) {
  Mix(h, static_cast<uint64_t>(t.defined) | static_cast<uint64_t>(t.nested) << 1 |
             static_cast<uint64_t>(t.strided) << 2 | static_cast<uint64_t>(t.wrapped) << 3 |
             static_cast<uint64_t>(t.dtype) << 8 | static_cast<uint64_t>(t.device) << 16 |
             static_cast<uint64_t>(static_cast<uint32_t>(t.ndim)) << 32);
  Mix(h, t.identity);
  for (int64_t s : t.sizes()) Mix(h, static_cast<uint64_t>(s));
  Mix(h, t.stride_data != nullptr);
  for (int64_t s : t.strides()) Mix(h, static_cast<uint64_t>(s));
}

uint64_t HashValues(uint64_t h, absl::Span<const ArgMeta> values) {
  Mix(h, values.size());
  for (const ArgMeta& a : values) {
    Mix(h, static_cast<uint64_t>(a.kind) | static_cast<uint64_t>(a.count) << 8);
    switch (a.kind) {
      case ArgKind::kTensor:
        MixTensor(h, a.tensor());
        break;
      case ArgKind::kInt:
      case ArgKind::kBool:
        Mix(h, static_cast<uint64_t>(a.to_int()));
        break;
      case ArgKind::kDouble:
        Mix(h, Bits(a.to_double()));
        break;
      case ArgKind::kIntList:
      case ArgKind::kBoolList:
        for (int64_t v : a.ints()) Mix(h, static_cast<uint64_t>(v));
        break;
      case ArgKind::kDoubleList:
        for (double d : a.doubles()) Mix(h, Bits(d));
        break;
      case ArgKind::kTensorList:
        for (const TensorMeta& t : a.tensors()) MixTensor(h, t);
        break;
      case ArgKind::kString:
        for (char c : a.str()) Mix(h, static_cast<unsigned char>(c));
        break;
      case ArgKind::kNone:
      case ArgKind::kOther:
        break;
    }
  }
  return h;
}

bool SameInts(c10::ArrayRef<int64_t> a, c10::ArrayRef<int64_t> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(int64_t)) == 0);
}

bool SameTensor(const TensorMeta& a, const TensorMeta& b) {
  return a.defined == b.defined && a.nested == b.nested && a.strided == b.strided && a.wrapped == b.wrapped &&
         a.identity == b.identity && a.dtype == b.dtype && a.device == b.device && a.ndim == b.ndim &&
         SameInts(a.sizes(), b.sizes()) && (a.stride_data == nullptr) == (b.stride_data == nullptr) &&
         SameInts(a.strides(), b.strides());
}

// Bitwise for doubles: a NaN scalar equals itself, 0.0 and -0.0 differ.
bool SameDoubles(c10::ArrayRef<double> a, c10::ArrayRef<double> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

bool SameValues(absl::Span<const ArgMeta> a, absl::Span<const ArgMeta> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const ArgMeta &x = a[i], &y = b[i];
    if (x.kind != y.kind || x.count != y.count) return false;
    switch (x.kind) {
      case ArgKind::kTensor:
        if (!SameTensor(x.tensor(), y.tensor())) return false;
        break;
      case ArgKind::kInt:
      case ArgKind::kBool:
        if (x.to_int() != y.to_int()) return false;
        break;
      case ArgKind::kDouble: {
        const double dx = x.to_double(), dy = y.to_double();
        if (!SameDoubles({&dx, 1}, {&dy, 1})) return false;
        break;
      }
      case ArgKind::kIntList:
      case ArgKind::kBoolList:
        if (!SameInts(x.ints(), y.ints())) return false;
        break;
      case ArgKind::kDoubleList:
        if (!SameDoubles(x.doubles(), y.doubles())) return false;
        break;
      case ArgKind::kTensorList:
        for (size_t k = 0; k < x.count; ++k) {
          if (!SameTensor(x.tensors()[k], y.tensors()[k])) return false;
        }
        break;
      case ArgKind::kString:
        if (x.str() != y.str()) return false;
        break;
      case ArgKind::kNone:
      case ArgKind::kOther:
        break;
    }
  }
  return true;
}

}  // namespace

uint64_t HashCallValues(uint64_t seed, absl::Span<const ArgMeta> values) { return HashValues(seed, values); }

bool CallTable::Eq::operator()(const CallSig* a, const CallSig* b) const {
  if (a == b) return true;
  if (a->hash != b->hash || a->started != b->started || a->finished != b->finished || a->raised != b->raised ||
      a->unfinished != b->unfinished) {
    return false;
  }
  // A finished call's signature extends the one it ran with: the operator,
  // keys and operands are that one's.
  if (a->started != nullptr) return SameValues(a->outputs, b->outputs);
  return a->op == b->op && a->keys == b->keys && SameValues(a->args, b->args);
}

const CallSig* CallTable::Intern(const CallSig& probe, const Arena::Mark& mark) {
  if (auto it = sigs_.find(&probe); it != sigs_.end()) {
    arena_.Rewind(mark);  // what the probe recorded
    return *it;
  }
  const CallSig* kept = &kept_.Emplace(probe);
  sigs_.insert(kept);
  return kept;
}

CallTable::Slot& CallTable::SlotFor(const c10::OperatorHandle& op, c10::DispatchKeySet keys) {
  const uint64_t h = (std::hash<c10::OperatorHandle>()(op) ^ keys.raw_repr()) * 0x9E3779B97F4A7C15ull;
  return recent_[h >> (64 - kSlotBits)];
}

const CallSig* CallTable::Start(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                absl::Span<const c10::IValue> args, CallTensors& tensors) {
  // Note [Repeated calls]: the latest guesses first.
  Slot& slot = SlotFor(op, keys);
  for (int w = 0; w < 2; ++w) {
    const CallSig* guess = slot.way[w];
    if (guess == nullptr) break;
    if (guess->op != op || guess->keys != keys) continue;
    tensors.Reset(nullptr, 0);
    if (MatchValues(guess->args, args, tensors)) {
      if (w == 1) std::swap(slot.way[0], slot.way[1]);
      ++guessed_;
      return guess;
    }
  }
  const Arena::Mark mark = arena_.GetMark();
  tensors.Reset(nullptr, 0);
  CallSig probe(op, keys);
  probe.args = RecordValues(arena_, args, tensors);
  probe.arg_tensors = probe.tensors = static_cast<uint32_t>(tensors.addresses().size());
  uint64_t h = std::hash<c10::OperatorHandle>()(op);
  Mix(h, keys.raw_repr());
  probe.hash = HashValues(h, probe.args);
  const CallSig* sig = Intern(probe, mark);
  if (slot.way[0] != sig) {
    slot.way[1] = slot.way[0];
    slot.way[0] = sig;
  }
  return sig;
}

namespace {

// The running call `started`, finished: its operator, keys and operands.
CallSig Ended(const CallSig* started) {
  CallSig s(started->op, started->keys);
  s.args = started->args;
  s.arg_tensors = s.tensors = started->arg_tensors;
  s.started = started;
  s.finished = true;
  return s;
}

}  // namespace

const CallSig* CallTable::Finish(const CallSig* started, absl::Span<const c10::IValue> outputs, CallTensors& tensors) {
  // Note [Repeated calls]: how the call ended last time, first.
  if (const CallSig* guess = started->last_finished) {
    const size_t had = tensors.addresses().size();
    if (MatchValues(guess->outputs, outputs, tensors)) {
      ++guessed_;
      return guess;
    }
    tensors.Truncate(had);
  }
  const Arena::Mark mark = arena_.GetMark();
  CallSig probe = Ended(started);
  probe.outputs = RecordValues(arena_, outputs, tensors);
  probe.tensors = static_cast<uint32_t>(tensors.addresses().size());
  uint64_t h = started->hash;
  Mix(h, 1);
  probe.hash = HashValues(h, probe.outputs);
  const CallSig* sig = Intern(probe, mark);
  started->last_finished = sig;
  return sig;
}

const CallSig* CallTable::Stop(const CallSig* started, StopHow how) {
  const Arena::Mark mark = arena_.GetMark();
  CallSig probe = Ended(started);
  probe.raised = how == StopHow::kRaised;
  probe.unfinished = how == StopHow::kUnfinished;
  uint64_t h = started->hash;
  Mix(h, 2 + static_cast<uint64_t>(how));
  probe.hash = HashValues(h, probe.outputs);
  return Intern(probe, mark);
}

const CallSig* CallTable::Unfinished(const CallSig* finished) {
  const Arena::Mark mark = arena_.GetMark();
  CallSig probe = Ended(finished->started != nullptr ? finished->started : finished);
  probe.outputs = finished->outputs;  // the kept metadata: shared, not copied
  probe.tensors = finished->tensors;
  probe.unfinished = true;
  uint64_t h = finished->hash;
  Mix(h, 5);
  probe.hash = h;
  return Intern(probe, mark);
}

void CallTable::Clear() {
  recent_.fill(Slot());
  sigs_.clear();
  kept_.Clear();
  arena_.Clear();
}

}  // namespace torchscan
