// A stand-in for a third-party library that claims the mode key; loaded by
// the Python test before torchscan to check the import error.
#include <torch/library.h>

namespace {
void PassThrough(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  op.redispatchBoxed(
      ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::TESTING_ONLY_GenericMode), stack);
}
}  // namespace

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&PassThrough>());
}
