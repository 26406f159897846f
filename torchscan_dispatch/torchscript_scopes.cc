// TorchScript module scopes: a TorchScript model inlines its submodules'
// forwards, so there are no module hooks to push scopes. The interpreter
// still knows, for the instruction it is running, the chain of module
// instances the inlined code came from (torch::jit::currentModuleHierarchy:
// entries "<instance>(<Type>)::<function>", "TOP" for the root module,
// "SELF" for a method of the previous entry's module). Every top-level call
// the interpreter makes realigns the recorder's open scopes with that chain,
// and a TorchScript function returning closes what it opened, so two
// forwards of the same model are two calls of the root scope.
#include <torch/csrc/jit/runtime/interpreter.h>

#include <exception>

#include "torchscan_dispatch/scan_state.h"

namespace torchscan {
namespace {

// Module paths, outermost first ("" is the root module), of a hierarchy.
std::vector<std::string> ModulePaths(const std::vector<std::string>& frames) {
  std::vector<std::string> paths;
  for (const std::string& entry : frames) {
    const std::string name = entry.substr(0, std::min(entry.find('('), entry.find("::")));
    if (name == "TOP") {
      paths.assign(1, "");
      continue;
    }
    if (paths.empty() || name.empty() || name == "SELF" || name.rfind("CALL_FUNCTION", 0) == 0) continue;
    paths.push_back(paths.back().empty() ? name : paths.back() + "." + name);
  }
  return paths;
}

}  // namespace

// Output identities of the last finished top-level call: the value a module
// whose inlined code ends here returned (for receptive fields).
std::vector<uintptr_t> Recorder::LastTopLevelOutputs() const {
  std::vector<uintptr_t> out;
  if (events_.size() == 0) return out;
  int32_t i = static_cast<int32_t>(events_.size()) - 1;
  while (events_[i].parent >= 0) i = events_[i].parent;
  if (!events_[i].finished || events_[i].raised) return out;
  for (const ArgMeta& a : events_[i].outputs) {
    if (a.kind == ArgKind::kTensor) out.push_back(a.tensor().identity);
  }
  return out;
}

void Recorder::CloseTorchScriptScopes(size_t keep, bool failed) {
  if (keep >= jit_open_.size()) return;
  const std::vector<uintptr_t> outputs = LastTopLevelOutputs();
  // Every closing scope returned the same value: its innermost call's output.
  for (size_t i = jit_open_.size(); i-- > keep;) {
    PopScope(jit_open_[i].second, failed, outputs);
  }
  jit_open_.resize(keep);
}

void Recorder::SyncTorchScriptScopes() {
  if (jit_frames_.empty()) return;  // not inside a TorchScript function call
  const std::vector<std::string> paths = ModulePaths(torch::jit::currentModuleHierarchy());
  // Keep the common prefix that this function call opened; close the rest.
  const size_t floor = jit_frames_.back();
  size_t keep = 0;
  while (keep < jit_open_.size() && keep < paths.size() && jit_open_[keep].first == paths[keep]) ++keep;
  keep = std::max(keep, floor);
  CloseTorchScriptScopes(keep, /*failed=*/false);
  for (size_t i = keep; i < paths.size(); ++i) jit_open_.emplace_back(paths[i], PushScope(paths[i]));
}

void Recorder::EnterTorchScriptFunction() { jit_frames_.push_back(jit_open_.size()); }

void Recorder::LeaveTorchScriptFunction() {
  if (jit_frames_.empty()) return;
  const size_t floor = jit_frames_.back();
  jit_frames_.pop_back();
  // The function's frame ends while an exception unwinds it: its module
  // calls raised.
  CloseTorchScriptScopes(floor, std::uncaught_exceptions() > 0);
}

}  // namespace torchscan
