// The boxed fallback: every ATen call made while a scan is active in this
// thread passes through here once, is recorded, and continues below the mode
// key. No strings, no locks, no formula work on this path.
#include "torchscan_dispatch/core/fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
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

// Runs the call below the mode key; when no recorder wants them, the calls
// its kernel makes skip the fallback (they would add nothing to a report).
// `op_owner`: the operator's cached part of OwnsSubtreeInBothViews (CallSig::owner), if known.
void Redispatch(const c10::OperatorHandle& op, c10::DispatchKeySet after, torch::jit::Stack* stack,
                absl::Span<const c10::IValue> args, bool skip_children, int8_t* op_owner = nullptr) {
  // A torch.func call's physical work is in its children (see PlanView).
  if (skip_children && !after.has(c10::DispatchKey::FuncTorchBatched) &&
      !after.has(c10::DispatchKey::FuncTorchGradWrapper) && OwnsSubtreeInBothViews(op, after, args, op_owner)) {
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

void ScanFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const c10::DispatchKeySet after = ks & kAfterMode;
  const auto& schema = op.schema();
  const size_t num_args = std::min(RecordedArguments(schema), stack->size());
  const size_t num_returns = RecordedReturns(schema);
  absl::Span<const c10::IValue> args(stack->data() + stack->size() - num_args, num_args);

  Recorder* top = ThreadTopRecorder();
  // The common case: one scan of this thread and no all-threads scan.
  if (C10_UNLIKELY(top == nullptr || top->outer != nullptr || tls_paused > 0 ||
                   AllThreadsGeneration().load(std::memory_order_relaxed) != 0)) {
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

}  // namespace

void PauseThreadRecording() { ++tls_paused; }

bool ThreadRecordingPaused() { return tls_paused > 0; }

void ResumeThreadRecording() {
  if (tls_paused > 0) --tls_paused;
}

void NoteControlFlowStop() {
  for (Recorder* r = ThreadTopRecorder(); r != nullptr; r = r->outer) r->ControlFlowStop();
  if (std::shared_ptr<ThreadLog> log = AllThreadsLog()) {
    log->Lock();
    if (!log->sealed) log->recorder.ControlFlowStop();
    log->Unlock();
  }
}

absl::Status EnsureFallbackInstalled() {
  static std::mutex mu;
  static std::unique_ptr<torch::Library> library;
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
    library = std::move(lib);
  } catch (const c10::Error& e) {
    failure = absl::FailedPreconditionError(absl::StrCat("torchscan: cannot register the fallback on ",
                                                         c10::toString(kModeKey), ": ", e.what_without_backtrace()));
  }
  return failure;
}

}  // namespace torchscan
