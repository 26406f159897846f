// TorchScript module scopes: a TorchScript model inlines its submodules'
// forwards, so there are no module hooks to push scopes. The interpreter
// still knows, for the instruction it is running, the chain of module
// instances the inlined code came from (torch::jit::currentModuleHierarchy:
// entries "<instance>(<Type>)::<function>", "TOP" for the root module,
// "SELF" for a method of the previous entry's module) and the call sites
// that inlined it (torch::jit::currentCallstack). Every top-level call the
// interpreter makes realigns the recorder's open scopes with that chain, and
// a TorchScript function returning closes what it opened, so two forwards of
// the same model are two calls of the root scope. A scope is its module path
// and its call sites: `self.shared(self.shared(x))` runs the same inlined
// code twice under the same path, from two call sites, and is two calls.
#include <torch/csrc/jit/runtime/interpreter.h>

#include <atomic>
#include <exception>
#include <string>

#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {
namespace {

struct JitLevel {
  std::string path;    // module path ("" for the root)
  uint64_t call_site;  // the call sites that reached it from the level above
};

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL + (h >> 29); }

uint64_t CallSite(const torch::jit::StackEntry& e) {
  uint64_t h = Mix(0xcbf29ce484222325ULL, reinterpret_cast<uintptr_t>(e.range.source().get()));
  return Mix(Mix(h, e.range.start()), e.range.end());
}

// Module levels, outermost first, of the instruction the interpreter runs.
// Entry n > 0 of the hierarchy was called from entry n - 1 of the call stack
// in call order (currentCallstack lists it innermost first): each frame adds
// one hierarchy entry for itself and one per inlined call, and one stack
// entry per inlined call site plus the node it runs. When the two lists do
// not line up (another interpreter layout), call sites are left out and
// scopes follow the paths alone.
std::vector<JitLevel> ModuleLevels(const std::vector<std::string>& frames,
                                   const std::vector<torch::jit::StackEntry>& stack) {
  const bool sites = stack.size() == frames.size();
  std::vector<JitLevel> levels;
  uint64_t site = 0;  // call sites since the last level: SELF methods and functions in between count
  for (size_t n = 0; n < frames.size(); ++n) {
    const std::string& entry = frames[n];
    if (sites && n > 0) site = Mix(site, CallSite(stack[stack.size() - n]));
    const std::string name = entry.substr(0, std::min(entry.find('('), entry.find("::")));
    if (name == "TOP") {
      levels.assign(1, JitLevel{"", 0});
      site = 0;
      continue;
    }
    if (levels.empty() || name.empty() || name == "SELF" || name.rfind("CALL_FUNCTION", 0) == 0) continue;
    const std::string& parent = levels.back().path;
    levels.push_back(JitLevel{parent.empty() ? name : parent + "." + name, site});
    site = 0;
  }
  return levels;
}

}  // namespace

// Output identities of the last finished top-level call: the value a module
// whose inlined code ends here returned (for receptive fields).
std::vector<uintptr_t> Recorder::LastTopLevelOutputs() const {
  std::vector<uintptr_t> out;
  if (events_.size() == 0) return out;
  int32_t i = static_cast<int32_t>(events_.size()) - 1;
  while (events_[i].parent >= 0) i = events_[i].parent;
  if (!events_[i].finished() || events_[i].raised()) return out;
  for (const ArgMeta& a : events_[i].outputs()) {
    if (a.kind == ArgKind::kTensor) out.push_back(events_[i].identity(a.tensor()));
  }
  return out;
}

void Recorder::CloseTorchScriptScopes(size_t keep, bool failed) {
  if (keep >= jit_open_.size()) return;
  const std::vector<uintptr_t> outputs = LastTopLevelOutputs();
  // Every closing scope returned the same value: its innermost call's output.
  for (size_t i = jit_open_.size(); i-- > keep;) {
    PopScope(jit_open_[i].scope, failed, outputs);
  }
  jit_open_.resize(keep);
}

void Recorder::SyncTorchScriptScopes() {
  if (jit_frames_.empty()) return;  // not inside a TorchScript function call
  if (jit_request_pending_) {
    jit_request_pending_ = false;
    static std::atomic<int64_t> forwards{0};
    if (request_ < 0) {  // the server's own request, if one is open, stays the request
      jit_request_ = BeginRequest("forward-" + std::to_string(forwards.fetch_add(1) + 1));
    }
  }
  const std::vector<JitLevel> levels =
      ModuleLevels(torch::jit::currentModuleHierarchy(), torch::jit::currentCallstack());
  // Keep the common prefix (same paths, same call sites) that this function
  // call opened; close the rest.
  const size_t floor = jit_frames_.back();
  size_t keep = 0;
  while (keep < jit_open_.size() && keep < levels.size() && jit_open_[keep].path == levels[keep].path &&
         jit_open_[keep].call_site == levels[keep].call_site) {
    ++keep;
  }
  keep = std::max(keep, floor);
  CloseTorchScriptScopes(keep, /*failed=*/false);
  for (size_t i = keep; i < levels.size(); ++i) {
    jit_open_.push_back(JitScope{levels[i].path, levels[i].call_site, PushScope(levels[i].path)});
  }
}

void Recorder::EnterTorchScriptFunction() {
  // The request begins with the forward's first operator call
  // (SyncTorchScriptScopes): functions that make none (model loading runs
  // many) are not requests and take no number.
  if (torchscript_requests && jit_frames_.empty()) jit_request_pending_ = true;
  jit_frames_.push_back(jit_open_.size());
}

void Recorder::LeaveTorchScriptFunction() {
  if (jit_frames_.empty()) return;
  const size_t floor = jit_frames_.back();
  jit_frames_.pop_back();
  // The function's frame ends while an exception unwinds it: its module
  // calls raised.
  CloseTorchScriptScopes(floor, std::uncaught_exceptions() > 0);
  if (jit_frames_.empty()) {
    jit_request_pending_ = false;
    if (jit_request_) EndRequest();
    jit_request_ = false;
  }
}

}  // namespace torchscan
