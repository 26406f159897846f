#include "torchscan_dispatch/core/recorder.h"

#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "torchscan_dispatch/core/all_threads.h"
#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/call_table.h"
#include "torchscan_dispatch/core/op_catalog.h"

namespace torchscan {

// initial-exec: one pointer read per intercepted call, no __tls_get_addr.
static thread_local Recorder* tls_top __attribute__((tls_model("initial-exec"))) = nullptr;

Recorder*& ThreadTopRecorder() { return tls_top; }

namespace {
// This thread's pauses, oldest first: the scan innermost when each began
// (nullptr: none), and whether it paused. With no scan that could record
// this thread (none of its own, no all-threads scan), nothing is paused: a
// pause that is never resumed then cannot outlive the work it covered
// (torch.compile's callbacks are process-wide, so a compile in another
// thread can end it).
struct PauseEntry {
  const Recorder* owner;
  bool paused;
};
// Plain data, initial-exec like the engine's other TLS variables. Pauses
// nest a few deep; past kMaxPauses they pause and resume untracked (their
// owner's stop cannot end them).
constexpr int kMaxPauses = 64;
thread_local PauseEntry tls_pauses[kMaxPauses] __attribute__((tls_model("initial-exec")));
thread_local int tls_pause_count __attribute__((tls_model("initial-exec"))) = 0;
}  // namespace

void PauseThreadRecordingForScan() {
  const Recorder* owner = ThreadTopRecorder();
  const bool pause = owner != nullptr || AllThreadsGeneration().load(std::memory_order_acquire) != 0;
  if (tls_pause_count < kMaxPauses) tls_pauses[tls_pause_count] = {owner, pause};
  ++tls_pause_count;
  if (pause) PauseThreadRecording();
}

void ResumeThreadRecordingForScan() {
  if (tls_pause_count == 0) return;
  --tls_pause_count;
  // Untracked (past kMaxPauses): it paused when it began.
  const bool paused = tls_pause_count >= kMaxPauses || tls_pauses[tls_pause_count].paused;
  if (paused) ResumeThreadRecording();
}

void ReleasePausesOf(const Recorder* owner) {
  int kept = 0;
  const int tracked = std::min(tls_pause_count, kMaxPauses);
  for (int i = 0; i < tracked; ++i) {
    const PauseEntry p = tls_pauses[i];
    if (p.owner != owner) {
      tls_pauses[kept++] = p;
    } else if (p.paused) {
      ResumeThreadRecording();
    }
  }
  tls_pause_count -= tracked - kept;
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::atomic<int64_t>& UnattributedCalls() {
  static std::atomic<int64_t> calls{0};
  return calls;
}

std::atomic<int64_t>& UnattributedZeroCostCalls() {
  static std::atomic<int64_t> calls{0};
  return calls;
}

int32_t Recorder::Begin(const c10::OperatorHandle& op, c10::DispatchKeySet keys, absl::Span<const c10::IValue> args) {
  MaybeFold();
  if (C10_UNLIKELY(torchscript_scopes) && open_ < 0) SyncTorchScriptScopes();
  if (C10_UNLIKELY(control_flow_stop_)) {  // the stop was caught
    control_flow_stop_ = false;
    stop_output_ = c10::IValue();
  }
  // A profiler started inside the scan takes the allocator reports while it runs.
  if (C10_UNLIKELY(memory_.observer != nullptr) &&
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != memory_.observer) {
    memory_.shadowed = true;
  }
  const int32_t index = static_cast<int32_t>(events_.size());
  Event& e = events_.Emplace(open_);
  e.request = request_;
  e.labels = labels_;
  e.scope = scope_;
  e.sig = calls_.Start(op, keys, args, tensors_);
  // Asked once per signature: a byte's load and an add per call.
  if (C10_UNLIKELY(e.sig->attention_or_softmax < 0)) e.sig->attention_or_softmax = RunsAttentionOrSoftmax(op);
  attention_calls_ += e.sig->attention_or_softmax;
  e.ids = KeepIds(nullptr, 0, tensors_.addresses());
  if (C10_UNLIKELY(timestamps)) times_.insert(times_.end(), {SteadyNowNs(), -1});
  open_ = index;
  return index;
}

ResolvedCall::ResolvedCall(const Event& e) : nargs_(e.args().size()) {
  size_t tensors = 0;
  for (auto values : {e.args(), e.outputs()}) {
    for (const ArgMeta& a : values)
      tensors += a.kind == ArgKind::kTensor ? 1 : a.kind == ArgKind::kTensorList ? a.count : 0;
  }
  tensors_.reserve(tensors);  // no reallocation below: the values point into it
  values_.reserve(e.args().size() + e.outputs().size());
  for (auto values : {e.args(), e.outputs()}) {
    for (const ArgMeta& a : values) {
      if (a.kind == ArgKind::kTensor) {
        TensorMeta& t = tensors_.emplace_back(a.tensor());
        t.identity = e.identity(a.tensor());
        values_.push_back(ArgMeta::Tensor(&t));
      } else if (a.kind == ArgKind::kTensorList) {
        const size_t first = tensors_.size();
        for (const TensorMeta& m : a.tensors()) tensors_.emplace_back(m).identity = e.identity(m);
        values_.push_back(ArgMeta::Tensors(tensors_.data() + first, a.count));
      } else {
        values_.push_back(a);
      }
    }
  }
}

int32_t LabelTree::Intern(std::string_view label) {
  if (int32_t id = Find(label); id >= 0) return id;
  const int32_t id = static_cast<int32_t>(names_.size());
  names_.emplace_back(label);
  ids_.emplace(names_.back(), id);
  return id;
}

int32_t LabelTree::Find(std::string_view label) const {
  // No std::string built: absl's string hash takes its string_view (which is
  // not std::string_view in Debian's abseil).
  auto it = ids_.find(absl::string_view(label.data(), label.size()));
  return it == ids_.end() ? -1 : it->second;
}

int32_t LabelTree::With(int32_t set, int32_t label) {
  auto [it, inserted] = children_.emplace(std::make_pair(set, label), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({set, label});
  return it->second;
}

int32_t LabelTree::Without(int32_t set, int32_t label) {
  // The labels added after `label` are added again on top of its parent:
  // cost in proportion to how far from the top `label` sits (modules mostly
  // leave in reverse order of entry, at no cost).
  std::vector<int32_t> above;
  int32_t n = set;
  while (n != kEmpty && nodes_[n].label != label) {
    above.push_back(nodes_[n].label);
    n = nodes_[n].parent;
  }
  if (n == kEmpty) return set;  // not in the set
  n = nodes_[n].parent;
  for (auto it = above.rbegin(); it != above.rend(); ++it) n = With(n, *it);
  return n;
}

int32_t LabelTree::Import(const LabelTree& from, int32_t set, std::vector<int32_t>& memo) {
  if (memo.size() < from.size()) memo.resize(from.size(), -1);
  memo[kEmpty] = kEmpty;
  std::vector<int32_t> missing;  // nodes of `from` on the path, innermost first
  int32_t n = set;
  for (; memo[n] < 0; n = from.parent(n)) missing.push_back(n);
  int32_t to = memo[n];
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    to = With(to, Intern(from.name(from.label(*it))));
    memo[*it] = to;
  }
  return to;
}

std::vector<std::string> LabelTree::Names(int32_t set) const {
  std::vector<std::string> out;
  for (int32_t n = set; n != kEmpty; n = nodes_[n].parent) out.push_back(names_[nodes_[n].label]);
  std::sort(out.begin(), out.end());
  return out;
}

void Recorder::SetLabels(const std::vector<std::string>& labels) {
  for (int32_t n = labels_; n != LabelTree::kEmpty; n = label_sets_.parent(n)) {
    label_active_[label_sets_.label(n)] = false;
  }
  labels_ = LabelTree::kEmpty;
  for (const std::string& label : labels) EnterLabel(label);
}

void Recorder::EnterLabel(std::string_view label) {
  const int32_t id = label_sets_.Intern(label);
  if (static_cast<size_t>(id) >= label_active_.size()) label_active_.resize(id + 1, false);
  if (label_active_[id]) return;
  label_active_[id] = true;
  labels_ = label_sets_.With(labels_, id);
}

void Recorder::ExitLabel(std::string_view label) {
  const int32_t id = label_sets_.Find(label);
  if (id < 0 || !label_active_[id]) return;
  label_active_[id] = false;
  labels_ = label_sets_.Without(labels_, id);
}

int32_t Recorder::PushScope(std::string path) {
  const int32_t id = static_cast<int32_t>(scopes_.size());
  if (aggregate_layers && scope_ < 0 && request_ < 0) calls_per_path_.clear();  // a unit of its own
  const int32_t call_index = calls_per_path_[path]++;
  Scope scope;
  scope.path = std::move(path);
  scope.call_index = call_index;
  scope.parent = scope_;
  scope.request = request_;
  scope.begin_event = recorded();
  scope.begin_attention_calls = attention_calls_;
  scopes_.push_back(std::move(scope));
  scopes_.back().begin_memory = static_cast<int64_t>(memory_.size());
  if (timestamps) scopes_.back().begin_ns = SteadyNowNs();
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
    scopes_[s].end_event = recorded();
    scopes_[s].ran_attention = attention_calls_ > scopes_[s].begin_attention_calls;
    scopes_[s].end_memory = static_cast<int64_t>(memory_.size());
    if (timestamps) scopes_[s].end_ns = SteadyNowNs();
  }
  scopes_[id].end_event = recorded();
  scopes_[id].ran_attention = attention_calls_ > scopes_[id].begin_attention_calls;
  scopes_[id].end_memory = static_cast<int64_t>(memory_.size());
  if (timestamps) scopes_[id].end_ns = SteadyNowNs();
  scopes_[id].outputs = std::move(outputs);
  scopes_[id].failed = scopes_[id].failed || failed;
  scope_ = scopes_[id].parent;
  MaybeFold();
  return true;
}

int64_t NextRequestSeq() {
  static std::atomic<int64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

bool Recorder::BeginRequest(std::string id) {
  if (request_ >= 0) return false;
  request_ = static_cast<int32_t>(requests_.size());
  requests_.push_back({std::move(id), recorded(), true});
  if (aggregate_layers) {
    requests_.back().seq = NextRequestSeq();
    calls_per_path_.clear();  // call indices count within the request
  }
  return true;
}

bool Recorder::EndRequest() {
  if (request_ < 0) return false;
  requests_[request_].open = false;
  requests_[request_].end_event = recorded();
  request_ = -1;
  MaybeFold();
  return true;
}

size_t Recorder::SettledPrefix() const {
  // The outermost running call, module call and request each start a tree
  // that is not finished yet.
  int64_t cut = static_cast<int64_t>(events_.size());
  for (int32_t i = open_; i >= 0; i = events_[i].parent) cut = std::min<int64_t>(cut, i);
  for (int32_t s = scope_; s >= 0; s = scopes_[s].parent) cut = std::min(cut, scopes_[s].begin_event - folded_);
  if (request_ >= 0) cut = std::min(cut, requests_[request_].begin_event - folded_);
  return static_cast<size_t>(cut);
}

const uintptr_t* Recorder::KeepIds(const uintptr_t* kept, size_t had, const std::vector<uintptr_t>& ids) {
  if (ids.size() == had) return kept;
  uintptr_t* out = const_cast<uintptr_t*>(kept);
  // A call that made no call of its own was the last to keep any: in place.
  if (!arena_.Grow(out, had, ids.size())) out = arena_.Alloc<uintptr_t>(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out[i] = ids[i];  // a few addresses: no memcpy call
  return out;
}

void Recorder::End(int32_t index, absl::Span<const c10::IValue> outputs) {
  Event& e = events_[index];
  const uint32_t had = e.sig->tensors;
  tensors_.Reset(e.ids, had);
  e.sig = calls_.Finish(e.sig, outputs, tensors_);
  e.ids = KeepIds(e.ids, had, tensors_.addresses());
  if (C10_UNLIKELY(index == cached_call_)) {
    // Note [Calls a cache answers]
    e.sig = cached_known_ ? calls_.Unfinished(e.sig) : calls_.Stop(e.sig->started, StopHow::kRaised);
    cached_call_ = -1;
  }
  if (C10_UNLIKELY(timestamps)) times_[2 * static_cast<size_t>(index) + 1] = SteadyNowNs();
  open_ = e.parent;
}

// Note [Calls a cache answers]
// Selective activation checkpointing recomputes a forward under a Python
// dispatch mode that returns the results it saved the first time instead of
// running their operators. TorchScan's key is above that mode, so it sees
// such a call begin and return; torchscan/_checkpoint.py tells it when the
// mode answered from its cache. The call then adds nothing of its own
// (CallSig::unfinished, its returns kept for the data-flow views). Where the
// innermost open call is not the operator the cache answered (its caller
// ran it below TorchScan's key), what that call did is not known: it counts
// as raised.
void Recorder::AnsweredFromCache(std::string_view name) {
  if (open_ < 0) return;
  const c10::OperatorName& op = events_[open_].op().operator_name();
  cached_call_ = open_;
  cached_known_ = name == (op.overload_name.empty() ? op.name : op.name + "." + op.overload_name);
}

void Recorder::Abort(int32_t index) {
  Event& e = events_[index];
  // A cache's answer is no kernel run, whatever the stop found (Note [Calls a cache answers]).
  const bool cached = index == cached_call_ && cached_known_;
  if (index == cached_call_) cached_call_ = -1;
  if (C10_LIKELY(!control_flow_stop_)) {
    e.sig = calls_.Stop(e.sig, StopHow::kRaised);
  } else if (cached || index != stop_call_ || stop_found_ == StopFound::kBeforeKernel) {
    e.sig = calls_.Stop(e.sig, StopHow::kUnfinished);
  } else if (stop_found_ == StopFound::kUnknown) {
    e.sig = calls_.Stop(e.sig, StopHow::kRaised);  // whether its kernel ran is not known
  } else if (stop_output_.isTensor()) {
    const uint32_t had = e.sig->tensors;
    tensors_.Reset(e.ids, had);
    e.sig = calls_.Finish(e.sig, absl::Span<const c10::IValue>(&stop_output_, 1), tensors_);
    e.ids = KeepIds(e.ids, had, tensors_.addresses());
    stop_output_ = c10::IValue();
  } else {
    e.sig = calls_.Stop(e.sig, StopHow::kStopped);
  }
  if (C10_UNLIKELY(timestamps)) times_[2 * static_cast<size_t>(index) + 1] = SteadyNowNs();
  open_ = e.parent;
  if (open_ < 0) {
    control_flow_stop_ = false;
    stop_output_ = c10::IValue();
  }
}

// Note [Calls a control-flow stop unwinds]
// torch.utils.checkpoint stops recomputing a forward by raising its own
// exception from the hook that saves the last tensor backward needs. An
// autograd kernel saves its operands before it runs the kernel below it and
// its results after, so the innermost open call ran its kernel only when the
// tensor being saved is one of its results: an operand it writes (an
// in-place operator saves itself), or a tensor that is neither one of its
// operands nor made by its autograd kernel beforehand (the clone an in-place
// operator saves of its input is made so). A call whose kernel did not run,
// and every call around it (the exception ends them before they finish),
// adds nothing of its own: the calls each made count (CallSig::unfinished).
// A call whose kernel ran is finished, with its one return when the saved
// tensor is it. Where the saved tensor is not known, the innermost call's
// work is not known either: it counts as raised.
Recorder::StopFound Recorder::FindStop(int32_t index, const at::Tensor& saved) {
  const Event& e = events_[index];
  const uintptr_t x = reinterpret_cast<uintptr_t>(saved.unsafeGetTensorImpl());
  const c10::FunctionSchema& schema = e.op().schema();
  bool operand = false, written = false;
  for (size_t i = 0; i < e.args().size(); ++i) {
    const ArgMeta& a = e.args()[i];
    bool match = a.kind == ArgKind::kTensor && e.identity(a.tensor()) == x;
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& m : a.tensors()) match = match || e.identity(m) == x;
    }
    if (!match) continue;
    operand = true;
    const auto* alias = i < schema.arguments().size() ? schema.arguments()[i].alias_info() : nullptr;
    written = written || (alias != nullptr && alias->isWrite());
  }
  const bool one_return =
      schema.returns().size() == 1 && schema.returns()[0].type()->kind() == c10::TypeKind::TensorType;
  if (written || !operand) {
    if (!written) {
      // Made beforehand by the autograd kernel: an output of a call inside
      // this one (all of them finished) that kept its state.
      for (size_t j = static_cast<size_t>(index) + 1; j < events_.size(); ++j) {
        const Event& c = events_[j];
        if (!KeptParentState(e, c)) continue;
        for (const ArgMeta& o : c.outputs()) {
          if (o.kind == ArgKind::kTensor && c.identity(o.tensor()) == x) return StopFound::kBeforeKernel;
        }
      }
    }
    if (one_return) stop_output_ = c10::IValue(saved);
    return StopFound::kAfterKernel;
  }
  return StopFound::kBeforeKernel;
}

void Recorder::ControlFlowStop(const at::Tensor* saved) {
  if (open_ < 0) return;
  // The hook's note with the tensor refines a note without it.
  if (control_flow_stop_ && stop_call_ == open_ && saved == nullptr) return;
  control_flow_stop_ = true;
  stop_call_ = open_;
  stop_output_ = c10::IValue();
  stop_found_ = saved != nullptr && saved->defined() ? FindStop(open_, *saved) : StopFound::kUnknown;
}

void Recorder::FoldSettled() {
  if (scope_ >= 0 || request_ >= 0 || jit_request_pending_ || events_.size() == 0 || folder->paused()) return;
  const size_t first_scope = folder->folded_scopes();
  folder->Fold(*this);
  folded_ += static_cast<int64_t>(events_.size());
  events_.Clear();
  arena_.Clear();
  // Signatures outlive folds (the next calls are mostly the same ones), up
  // to a bound that keeps a scan of ever-new shapes flat.
  constexpr size_t kKeptSignatures = 1 << 14;
  if (calls_.size() > kKeptSignatures) calls_.Clear();
  if (aggregate_layers) {
    folder->ForgetFields();
    // Aggregated: nothing refers to them any more (nothing is open), so
    // memory stays bounded by the model, not by the requests served.
    scopes_.clear();
    requests_.clear();
    return;
  }
  // The folded scopes' fields are answered: their output identities are not needed again.
  for (size_t s = first_scope; s < scopes_.size(); ++s) std::vector<uintptr_t>().swap(scopes_[s].outputs);
}

}  // namespace torchscan
