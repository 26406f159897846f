// The boxed fallback: every ATen call made while a scan is active in this
// thread passes through here once, is recorded, and continues below the mode
// key. No strings, no locks, no formula work on this path.
#include "torchscan_dispatch/fallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "torchscan_dispatch/scan_state.h"

namespace torchscan {
namespace {

const c10::DispatchKeySet kAfterMode(c10::DispatchKeySet::FULL_AFTER, kModeKey);

void ScanFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const c10::DispatchKeySet after = ks & kAfterMode;
  Recorder* top = ThreadTopRecorder();
  if (C10_UNLIKELY(top == nullptr)) {
    UnattributedCalls().fetch_add(1, std::memory_order_relaxed);
    op.redispatchBoxed(after, stack);
    return;
  }
  const auto& schema = op.schema();
  // Vararg schemas do not say how many values are theirs: record none.
  const bool fixed = !schema.is_vararg() && !schema.is_varret();
  const size_t num_args = fixed ? std::min(schema.arguments().size(), stack->size()) : 0;
  absl::Span<const c10::IValue> args(stack->data() + stack->size() - num_args, num_args);

  if (C10_LIKELY(top->outer == nullptr)) {
    const int32_t index = top->Begin(op, after, args);
    try {
      op.redispatchBoxed(after, stack);
    } catch (...) {
      top->Abort(index);
      throw;
    }
    const size_t num_out = fixed ? std::min(schema.returns().size(), stack->size()) : 0;
    top->End(index, absl::Span<const c10::IValue>(stack->data() + stack->size() - num_out, num_out));
    return;
  }

  // Nested scans: every active scan of this thread sees the call.
  std::vector<std::pair<Recorder*, int32_t>> open;
  for (Recorder* r = top; r != nullptr; r = r->outer) open.emplace_back(r, r->Begin(op, after, args));
  try {
    op.redispatchBoxed(after, stack);
  } catch (...) {
    for (auto& [r, i] : open) r->Abort(i);
    throw;
  }
  const size_t num_out = fixed ? std::min(schema.returns().size(), stack->size()) : 0;
  absl::Span<const c10::IValue> outs(stack->data() + stack->size() - num_out, num_out);
  for (auto& [r, i] : open) r->End(i, outs);
}

}  // namespace

absl::Status EnsureFallbackInstalled() {
  static std::mutex mu;
  static std::unique_ptr<torch::Library> library;
  static absl::Status failure = absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu);
  if (library || !failure.ok()) return failure;
  auto& dispatcher = c10::Dispatcher::singleton();
  if (dispatcher.hasBackendFallbackForDispatchKey(kModeKey)) {
    failure = absl::FailedPreconditionError(absl::StrCat(
        "torchscan: another library already registered a fallback kernel on dispatch key ",
        c10::toString(kModeKey),
        "; TorchScan needs that key for itself and cannot load next to it. "
        "Remove the other library (or load TorchScan in a process without it)."));
    return failure;
  }
  try {
    auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "_", kModeKey, __FILE__,
                                                __LINE__);
    lib->fallback(torch::CppFunction::makeFromBoxedFunction<&ScanFallback>());
    library = std::move(lib);
  } catch (const c10::Error& e) {
    failure = absl::FailedPreconditionError(
        absl::StrCat("torchscan: cannot register the fallback on ", c10::toString(kModeKey), ": ",
                     e.what_without_backtrace()));
  }
  return failure;
}

}  // namespace torchscan
