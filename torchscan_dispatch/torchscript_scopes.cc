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

void Recorder::SyncTorchScriptScopes() {
  if (jit_frames_.empty()) return;  // not inside a TorchScript function call
  const std::vector<std::string> paths = ModulePaths(torch::jit::currentModuleHierarchy());
  // Keep the common prefix that this function call opened; close the rest.
  const size_t floor = jit_frames_.back();
  size_t keep = 0;
  while (keep < jit_open_.size() && keep < paths.size() && jit_open_[keep].first == paths[keep]) ++keep;
  keep = std::max(keep, floor);
  if (keep < jit_open_.size()) {
    PopScope(jit_open_[keep].second, /*failed=*/false);
    jit_open_.resize(keep);
  }
  for (size_t i = keep; i < paths.size(); ++i) jit_open_.emplace_back(paths[i], PushScope(paths[i]));
}

void Recorder::EnterTorchScriptFunction() { jit_frames_.push_back(jit_open_.size()); }

void Recorder::LeaveTorchScriptFunction() {
  if (jit_frames_.empty()) return;
  const size_t floor = jit_frames_.back();
  jit_frames_.pop_back();
  if (floor < jit_open_.size()) {
    PopScope(jit_open_[floor].second, /*failed=*/false);
    jit_open_.resize(floor);
  }
}

}  // namespace torchscan
