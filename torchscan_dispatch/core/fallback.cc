// The boxed fallback: every ATen call made while a scan is active in this
// thread passes through here once, is recorded, and continues below the mode
// key. No strings, no locks, no formula work on this path.
#include "torchscan_dispatch/core/fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/adaptive_avg_pool2d_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/batch_norm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/contiguous_ops.h>
#include <ATen/ops/conv2d_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/cos_ops.h>
#include <ATen/ops/detach_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/dropout_ops.h>
#include <ATen/ops/_embedding_bag_forward_only_ops.h>
#include <ATen/ops/_embedding_bag_ops.h>
#include <ATen/ops/embedding_bag_ops.h>
#include <ATen/ops/embedding_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/expand_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/flatten_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/hardsigmoid_ops.h>
#include <ATen/ops/hardswish_ops.h>
#include <ATen/ops/hardtanh_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/layer_norm_ops.h>
#include <ATen/ops/linear_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/matmul_ops.h>
#include <ATen/ops/max_pool2d_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/narrow_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/permute_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/reshape_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/scaled_dot_product_attention_ops.h>
#include <ATen/ops/select_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sin_ops.h>
#include <ATen/ops/slice_ops.h>
#include <ATen/ops/softmax_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/t_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/to_ops.h>
#include <ATen/ops/transpose_ops.h>
#include <ATen/ops/unsqueeze_ops.h>
#include <ATen/ops/view_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <memory>
#include <mutex>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "torchscan_dispatch/core/all_threads.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {
namespace {

// Pause depth of this thread (PauseThreadRecording); initial-exec like every
// engine TLS variable.
thread_local int tls_paused __attribute__((tls_model("initial-exec"))) = 0;

// Whether the calls the kernel makes may run below the mode key: no recorder
// wants them (they would add nothing to a report). `op_owner`: the
// operator's cached part of OwnsSubtreeInBothViews (CallSig::owner), if known.
bool SkipsChildren(const c10::OperatorHandle& op, c10::DispatchKeySet after, absl::Span<const c10::IValue> args,
                   bool skip_children, int8_t* op_owner) {
  // A torch.func call's physical work is in its children (see PlanView).
  return skip_children && !after.has(c10::DispatchKey::FuncTorchBatched) &&
         !after.has(c10::DispatchKey::FuncTorchGradWrapper) && OwnsSubtreeInBothViews(op, after, args, op_owner);
}

// Runs the call below the mode key, its kernel's calls too when SkipsChildren.
void Redispatch(const c10::OperatorHandle& op, c10::DispatchKeySet after, torch::jit::Stack* stack,
                absl::Span<const c10::IValue> args, bool skip_children, int8_t* op_owner = nullptr) {
  if (SkipsChildren(op, after, args, skip_children, op_owner)) {
    c10::impl::ExcludeDispatchKeyGuard no_children(kModeKey);
    op.redispatchBoxed(after, stack);
    return;
  }
  op.redispatchBoxed(after, stack);
}

// Every recorder that sees a call: this thread's scans (nested ones chain
// through `outer`) and its log in an all-threads scan.
void RecordEverywhere(Recorder* top, const c10::OperatorHandle& op, c10::DispatchKeySet after, torch::jit::Stack* stack,
                      absl::Span<const c10::IValue> args, size_t num_returns) {
  if (tls_paused > 0) {
    op.redispatchBoxed(after, stack);
    return;
  }
  std::shared_ptr<ThreadLog> log = AllThreadsLog();
  if (top == nullptr && log == nullptr) {
    // The key came from an all-threads scan that has stopped, or was
    // inherited by a thread that no scan covers.
    if (!LeaveFinishedAllThreadsScan()) {
      UnattributedCalls().fetch_add(1, std::memory_order_relaxed);
      if (AddsNoFlopsOfItsOwn(op, after)) UnattributedZeroCostCalls().fetch_add(1, std::memory_order_relaxed);
    }
    op.redispatchBoxed(after, stack);
    return;
  }
  absl::InlinedVector<std::pair<Recorder*, int32_t>, 4> open;
  bool skip_children = true;
  for (Recorder* r = top; r != nullptr; r = r->outer) {
    open.emplace_back(r, r->Begin(op, after, args));
    skip_children = skip_children && !r->record_owned_children;
  }
  int32_t logged = -1;
  if (log) {
    log->Lock();
    if (!log->sealed) logged = log->recorder.Begin(op, after, args);
    skip_children = skip_children && !log->recorder.record_owned_children;
    log->Unlock();
  }
  auto finish = [&](absl::FunctionRef<void(Recorder&, int32_t)> f) {
    for (auto& [r, i] : open) f(*r, i);
    if (logged < 0) return;
    log->Lock();
    if (!log->sealed) f(log->recorder, logged);
    log->Unlock();
  };
  try {
    Redispatch(op, after, stack, args, skip_children);
  } catch (...) {
    finish([](Recorder& r, int32_t i) { r.Abort(i); });
    throw;
  }
  const size_t num_out = std::min(num_returns, stack->size());
  absl::Span<const c10::IValue> outs(stack->data() + stack->size() - num_out, num_out);
  finish([outs](Recorder& r, int32_t i) { r.End(i, outs); });
}

// The common case: one scan of this thread (`top`), not paused, and no
// all-threads scan.
inline bool OnlyThisScan(const Recorder* top) {
  return top != nullptr && top->outer == nullptr && tls_paused == 0 &&
         AllThreadsGeneration().load(std::memory_order_relaxed) == 0;
}

void ScanFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const c10::DispatchKeySet after = ks & kAfterMode;
  const auto& schema = op.schema();
  const size_t num_args = std::min(RecordedArguments(schema), stack->size());
  const size_t num_returns = RecordedReturns(schema);
  absl::Span<const c10::IValue> args(stack->data() + stack->size() - num_args, num_args);

  Recorder* top = ThreadTopRecorder();
  if (C10_UNLIKELY(!OnlyThisScan(top))) {
    RecordEverywhere(top, op, after, stack, args, num_returns);
    return;
  }
  const int32_t index = top->Begin(op, after, args);
  try {
    Redispatch(op, after, stack, args, !top->record_owned_children, &top->events()[index].sig->owner);
  } catch (...) {
    top->Abort(index);
    throw;
  }
  const size_t num_out = std::min(num_returns, stack->size());
  top->End(index, absl::Span<const c10::IValue>(stack->data() + stack->size() - num_out, num_out));
}

// Note [Typed kernels]
// The fallback is boxed: PyTorch copies a call's arguments into a heap stack
// of IValues to reach it and unboxes them again below it, which costs more
// than half of what recording a small call costs. The operators models call most
// get an unboxed kernel on the mode key instead. In the common case (one
// scan of this thread, no all-threads scan, not paused) it records the very
// IValues boxing would make (the same constructors), from the C stack, and
// continues below the mode key unboxed; in every other case it boxes the
// call and runs the fallback itself. Both paths record the same call.
// TORCHSCAN_TYPED_KERNELS=0 in the environment, when the library loads,
// leaves every operator to the fallback (tests compare the two).

// A call's operands as the IValues boxing would make, except that tensors
// are borrowed (no reference count traffic): the recorder copies metadata
// and keeps no IValue, and a copy of a borrowed IValue owns its tensor.
template <class... Args>
class CallValues {
 public:
  explicit CallValues(const Args&... args) {
    try {
      size_t i = 0;
      ((values_[i++] = Value(args)), ...);
    } catch (...) {  // a list operand's allocation; the borrowed ones must not be released
      Forget();
      throw;
    }
  }
  ~CallValues() { Forget(); }
  CallValues(const CallValues&) = delete;
  CallValues& operator=(const CallValues&) = delete;

  absl::Span<const c10::IValue> span() const { return values_; }

  template <class T>
  static c10::IValue Value(const T& v) {
    if constexpr (std::is_same_v<T, at::Tensor>) {
      return c10::IValue(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(v));
    } else {
      return c10::IValue(v);
    }
  }

 private:
  void Forget() {
    for (size_t i = 0; i < sizeof...(Args); ++i) {
      if (kBorrowed[i]) c10::MaybeOwnedTraits<c10::IValue>::destroyBorrow(values_[i]);
    }
  }
  static constexpr std::array<bool, sizeof...(Args)> kBorrowed{std::is_same_v<Args, at::Tensor>...};
  std::array<c10::IValue, sizeof...(Args)> values_;
};

// A result of several tensors (embedding_bag's four), recorded as boxing
// returns them: one IValue each, in order.
template <class R>
struct TensorTuple : std::false_type {};
template <class... T>
struct TensorTuple<std::tuple<T...>> : std::bool_constant<(std::is_same_v<T, at::Tensor> && ...)> {
  using R = std::tuple<T...>;
  static R FromStack(torch::jit::Stack& stack) { return FromStack(stack, std::index_sequence_for<T...>()); }
  template <size_t... I>
  static R FromStack(torch::jit::Stack& stack, std::index_sequence<I...>) {
    const size_t first = stack.size() - sizeof...(T);
    return R(std::move(stack[first + I]).toTensor()...);
  }
};

template <class Op, class Sig = typename Op::schema>
struct Typed;

template <class Op, class R, class... Args>
struct Typed<Op, R(Args...)> {
  // A functional operator returns a new tensor, or several; an in-place one
  // its first operand (what PyTorch's boxing assumes of it too).
  static_assert(std::is_same_v<R, at::Tensor> || std::is_same_v<R, at::Tensor&> || TensorTuple<R>::value);

  static const c10::OperatorHandle& Handle() {
    static const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return op;
  }

  static R Boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks, Args... args) {
    torch::jit::Stack stack;
    stack.reserve(sizeof...(Args));
    (stack.emplace_back(args), ...);
    ScanFallback(op, ks, &stack);
    if constexpr (std::is_same_v<R, at::Tensor>) {
      return std::move(stack.back()).toTensor();
    } else if constexpr (TensorTuple<R>::value) {
      return TensorTuple<R>::FromStack(stack);
    } else {
      return std::get<0>(std::forward_as_tuple(args...));
    }
  }

  static R Run(c10::DispatchKeySet ks, Args... args) {
    const c10::OperatorHandle& op = Handle();
    Recorder* top = ThreadTopRecorder();
    if (C10_UNLIKELY(!OnlyThisScan(top))) {
      return Boxed(op, ks, args...);
    }
    const c10::DispatchKeySet after = ks & kAfterMode;
    const CallValues<std::decay_t<Args>...> operands(args...);
    const absl::Span<const c10::IValue> values = operands.span();
    const int32_t index = top->Begin(op, after, values);
    int8_t* owner = &top->events()[index].sig->owner;
    R out = [&]() -> R {
      try {
        if (SkipsChildren(op, after, values, !top->record_owned_children, owner)) {
          c10::impl::ExcludeDispatchKeyGuard no_children(kModeKey);
          return Op::redispatch(after, args...);
        }
        return Op::redispatch(after, args...);
      } catch (...) {
        top->Abort(index);
        throw;
      }
    }();
    if constexpr (TensorTuple<R>::value) {
      std::apply(
          [&](const auto&... outputs) {
            const CallValues<std::decay_t<decltype(outputs)>...> result(outputs...);
            top->End(index, result.span());
          },
          out);
    } else {
      const CallValues<at::Tensor> result(out);
      top->End(index, result.span());
    }
    return out;
  }

  static void Register(torch::Library& lib) {
    std::string name = std::string(Op::name).substr(std::string_view("aten::").size());
    if (*Op::overload_name) name = absl::StrCat(name, ".", Op::overload_name);
    lib.impl(name.c_str(), torch::CppFunction::makeFromUnboxedFunction(
                               c10::CompileTimeFunctionPointer<R(c10::DispatchKeySet, Args...), &Run>()));
  }
};

// An operator this PyTorch does not have, or has with another signature,
// stays with the fallback, which records it the same way.
template <class Op>
void Add(torch::Library& lib) {
  try {
    Typed<Op>::Register(lib);
  } catch (const c10::Error&) {
  }
}

// The operators of Note [Typed kernels]: those the CNNs and transformers of
// the benchmark and the zoo call most, as the mode key sees them
// (composites before they decompose).
void RegisterTypedKernels(torch::Library& lib) {
  // Elementwise arithmetic and activations.
  Add<at::_ops::add_Tensor>(lib);
  Add<at::_ops::sub_Tensor>(lib);
  Add<at::_ops::mul_Tensor>(lib);
  Add<at::_ops::div_Tensor>(lib);
  Add<at::_ops::pow_Tensor_Scalar>(lib);
  Add<at::_ops::neg>(lib);
  Add<at::_ops::exp>(lib);
  Add<at::_ops::rsqrt>(lib);
  Add<at::_ops::sin>(lib);
  Add<at::_ops::cos>(lib);
  Add<at::_ops::tanh>(lib);
  Add<at::_ops::sigmoid>(lib);
  Add<at::_ops::relu>(lib);
  Add<at::_ops::gelu>(lib);
  Add<at::_ops::silu>(lib);
  Add<at::_ops::hardswish>(lib);
  Add<at::_ops::hardsigmoid>(lib);
  Add<at::_ops::hardtanh>(lib);
  Add<at::_ops::abs>(lib);
  Add<at::_ops::sqrt>(lib);
  Add<at::_ops::clamp_min>(lib);
  Add<at::_ops::where_self>(lib);
  Add<at::_ops::masked_fill_Scalar>(lib);
  Add<at::_ops::add__Tensor>(lib);
  Add<at::_ops::mul__Tensor>(lib);
  Add<at::_ops::relu_>(lib);
  Add<at::_ops::silu_>(lib);
  Add<at::_ops::hardswish_>(lib);
  Add<at::_ops::hardtanh_>(lib);
  Add<at::_ops::clamp_min_>(lib);
  Add<at::_ops::div__Tensor>(lib);
  Add<at::_ops::div__Scalar>(lib);
  Add<at::_ops::copy_>(lib);
  Add<at::_ops::fill__Scalar>(lib);
  // Layers and reductions.
  Add<at::_ops::linear>(lib);
  Add<at::_ops::addmm>(lib);
  Add<at::_ops::mm>(lib);
  Add<at::_ops::bmm>(lib);
  Add<at::_ops::matmul>(lib);
  Add<at::_ops::conv2d>(lib);
  Add<at::_ops::batch_norm>(lib);
  Add<at::_ops::layer_norm>(lib);
  Add<at::_ops::embedding>(lib);
  Add<at::_ops::scaled_dot_product_attention>(lib);
  Add<at::_ops::softmax_int>(lib);
  Add<at::_ops::dropout>(lib);
  Add<at::_ops::mean_dim>(lib);
  Add<at::_ops::sum>(lib);
  Add<at::_ops::sum_dim_IntList>(lib);
  Add<at::_ops::max_pool2d>(lib);
  Add<at::_ops::avg_pool2d>(lib);
  Add<at::_ops::adaptive_avg_pool2d>(lib);
  Add<at::_ops::index_select>(lib);
  Add<at::_ops::embedding_bag>(lib);
  Add<at::_ops::embedding_bag_padding_idx>(lib);
  Add<at::_ops::_embedding_bag_forward_only>(lib);
  Add<at::_ops::_embedding_bag>(lib);
  // Views and layout.
  Add<at::_ops::view>(lib);
  Add<at::_ops::reshape>(lib);
  Add<at::_ops::t>(lib);
  Add<at::_ops::transpose_int>(lib);
  Add<at::_ops::permute>(lib);
  Add<at::_ops::unsqueeze>(lib);
  Add<at::_ops::expand>(lib);
  Add<at::_ops::slice_Tensor>(lib);
  Add<at::_ops::select_int>(lib);
  Add<at::_ops::flatten_using_ints>(lib);
  Add<at::_ops::contiguous>(lib);
  Add<at::_ops::narrow>(lib);
  Add<at::_ops::detach>(lib);
  Add<at::_ops::to_dtype>(lib);
  Add<at::_ops::to_dtype_layout>(lib);
  Add<at::_ops::to_device>(lib);
}

bool TypedKernelsWanted() {
  const char* v = std::getenv("TORCHSCAN_TYPED_KERNELS");
  return v == nullptr || std::string_view(v) != "0";
}

}  // namespace

void PauseThreadRecording() { ++tls_paused; }

bool ThreadRecordingPaused() { return tls_paused > 0; }

void ResumeThreadRecording() {
  if (tls_paused > 0) --tls_paused;
}

namespace {
// Every recorder that sees this thread's calls: its scans and its log in an
// all-threads scan.
void EachThreadRecorder(absl::FunctionRef<void(Recorder&)> f) {
  for (Recorder* r = ThreadTopRecorder(); r != nullptr; r = r->outer) f(*r);
  if (std::shared_ptr<ThreadLog> log = AllThreadsLog()) {
    log->Lock();
    if (!log->sealed) f(log->recorder);
    log->Unlock();
  }
}
}  // namespace

void NoteAnsweredFromCache(std::string_view name) {
  EachThreadRecorder([&](Recorder& r) { r.AnsweredFromCache(name); });
}

void NoteControlFlowStop(const at::Tensor* saved) {
  EachThreadRecorder([&](Recorder& r) { r.ControlFlowStop(saved); });
}

absl::Status EnsureFallbackInstalled() {
  static std::mutex mu;
  static std::unique_ptr<torch::Library> library;
  static std::unique_ptr<torch::Library> typed_library;
  static absl::Status failure = absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu);
  if (library || !failure.ok()) return failure;
  auto& dispatcher = c10::Dispatcher::singleton();
  if (dispatcher.hasBackendFallbackForDispatchKey(kModeKey)) {
    failure = absl::FailedPreconditionError(absl::StrCat(
        "torchscan: another library already registered a fallback kernel on dispatch key ", c10::toString(kModeKey),
        "; TorchScan needs that key for itself and cannot load next to it. "
        "Remove the other library (or load TorchScan in a process without it)."));
    return failure;
  }
  try {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", kModeKey, __FILE__, __LINE__);
    lib->fallback(torch::CppFunction::makeFromBoxedFunction<&ScanFallback>());
    if (TypedKernelsWanted()) {
      auto typed = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kModeKey, __FILE__, __LINE__);
      RegisterTypedKernels(*typed);
      typed_library = std::move(typed);
    }
    library = std::move(lib);
  } catch (const c10::Error& e) {
    failure = absl::FailedPreconditionError(absl::StrCat("torchscan: cannot register the fallback on ",
                                                         c10::toString(kModeKey), ": ", e.what_without_backtrace()));
  }
  return failure;
}

}  // namespace torchscan
