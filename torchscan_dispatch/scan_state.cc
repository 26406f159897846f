#include "torchscan_dispatch/scan_state.h"

#include "torchscan_dispatch/recorder.h"

namespace torchscan {

// initial-exec: one pointer read per intercepted call, no __tls_get_addr.
static thread_local Recorder* tls_top __attribute__((tls_model("initial-exec"))) = nullptr;

Recorder*& ThreadTopRecorder() { return tls_top; }

std::atomic<int64_t>& UnattributedCalls() {
  static std::atomic<int64_t> calls{0};
  return calls;
}

int32_t Recorder::Begin(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        absl::Span<const c10::IValue> args) {
  if (C10_UNLIKELY(torchscript_scopes) && open_ < 0) SyncTorchScriptScopes();
  const int32_t index = static_cast<int32_t>(events_.size());
  Event& e = events_.Emplace(op, keys, open_);
  e.request = request_;
  e.labels = labels_;
  e.scope = scope_;
  e.args = RecordValues(arena_, args);
  open_ = index;
  return index;
}

void Recorder::SetLabels(std::vector<std::string> sorted_labels) {
  auto [it, inserted] = label_index_.emplace(sorted_labels, static_cast<int32_t>(label_sets_.size()));
  if (inserted) label_sets_.push_back(std::move(sorted_labels));
  labels_ = it->second;
}

int32_t Recorder::PushScope(std::string path) {
  const int32_t id = static_cast<int32_t>(scopes_.size());
  const int32_t call_index = calls_per_path_[path]++;
  scopes_.push_back({std::move(path), call_index, scope_, false, request_, static_cast<int64_t>(events_.size())});
  scope_ = id;
  return id;
}

bool Recorder::PopScope(int32_t id, bool failed, std::vector<uintptr_t> outputs) {
  int32_t open = scope_;
  while (open >= 0 && open != id) open = scopes_[open].parent;
  if (open < 0) return false;
  // Scopes opened inside `id` and never closed belong to a forward that raised.
  for (int32_t s = scope_; s != id; s = scopes_[s].parent) {
    scopes_[s].failed = true;
    scopes_[s].end_event = static_cast<int64_t>(events_.size());
  }
  scopes_[id].end_event = static_cast<int64_t>(events_.size());
  scopes_[id].outputs = std::move(outputs);
  scopes_[id].failed = scopes_[id].failed || failed;
  scope_ = scopes_[id].parent;
  return true;
}

bool Recorder::BeginRequest(std::string id) {
  if (request_ >= 0) return false;
  request_ = static_cast<int32_t>(requests_.size());
  requests_.push_back({std::move(id), static_cast<int64_t>(events_.size()), true});
  return true;
}

bool Recorder::EndRequest() {
  if (request_ < 0) return false;
  requests_[request_].open = false;
  request_ = -1;
  return true;
}

size_t Recorder::SettledPrefix() const {
  // The outermost running call, module call and request each start a tree
  // that is not finished yet.
  int64_t cut = static_cast<int64_t>(events_.size());
  for (int32_t i = open_; i >= 0; i = events_[i].parent) cut = std::min<int64_t>(cut, i);
  for (int32_t s = scope_; s >= 0; s = scopes_[s].parent) cut = std::min(cut, scopes_[s].begin_event);
  if (request_ >= 0) cut = std::min(cut, requests_[request_].begin_event);
  return static_cast<size_t>(cut);
}

void Recorder::End(int32_t index, absl::Span<const c10::IValue> outputs) {
  Event& e = events_[index];
  e.outputs = RecordValues(arena_, outputs);
  e.finished = true;
  open_ = e.parent;
}

void Recorder::Abort(int32_t index) {
  Event& e = events_[index];
  e.raised = true;
  e.finished = true;
  open_ = e.parent;
}

}  // namespace torchscan
