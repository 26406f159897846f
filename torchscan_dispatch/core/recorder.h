// The per-scan event tree and the thread-local link the fallback follows.
// Internal to the engine: the public API is torchscan_dispatch/torchscan.h.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/DispatchKeySet.h>

#include <atomic>
#include <map>
#include <string>
#include <string_view>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "torchscan_dispatch/core/arena.h"
#include "torchscan_dispatch/core/memory.h"
#include "torchscan_dispatch/core/call_table.h"
#include "torchscan_dispatch/core/folder.h"

namespace torchscan {

// The one mode-style key the plugin uses (see DESIGN.md for why this one).
inline constexpr c10::DispatchKey kModeKey = c10::DispatchKey::TESTING_ONLY_GenericMode;
// The keys a call continues with below the mode key.
inline const c10::DispatchKeySet kAfterMode(c10::DispatchKeySet::FULL_AFTER, kModeKey);

// How many argument / return values of a call are recorded: vararg schemas
// do not say how many values on the stack are theirs, so none.
inline bool FixedArity(const c10::FunctionSchema& s) { return !s.is_vararg() && !s.is_varret(); }
inline size_t RecordedArguments(const c10::FunctionSchema& s) { return FixedArity(s) ? s.arguments().size() : 0; }
inline size_t RecordedReturns(const c10::FunctionSchema& s) { return FixedArity(s) ? s.returns().size() : 0; }

// Module label sets (FlopCounterMode's by_module attribution) as a tree: a
// set is a node, holding the labels on its path to the root (node 0, the
// empty set), each label at most once per path. A label string is stored
// once and a node is (parent, label), so a scan through d nested modules
// keeps O(d) entries instead of d sets of up to d strings each. Parents
// have smaller indices than their children.
class LabelTree {
 public:
  static constexpr int32_t kEmpty = 0;
  // The id of `label` (added if new) / -1 when it was never added.
  int32_t Intern(std::string_view label);
  int32_t Find(std::string_view label) const;
  // The set `set` plus label id `label`, which must not be in it.
  int32_t With(int32_t set, int32_t label);
  // The set `set` without label id `label` (unchanged when it is not in it).
  int32_t Without(int32_t set, int32_t label);
  // The set `set` of `from`, in this tree. `memo` (one entry per node of
  // `from`, -1 when unknown) makes copying many sets linear.
  int32_t Import(const LabelTree& from, int32_t set, std::vector<int32_t>& memo);

  size_t size() const { return nodes_.size(); }  // sets, the empty one included
  size_t labels() const { return names_.size(); }
  int32_t parent(int32_t set) const { return nodes_[set].parent; }
  int32_t label(int32_t set) const { return nodes_[set].label; }
  const std::string& name(int32_t label) const { return names_[label]; }
  std::vector<std::string> Names(int32_t set) const;  // sorted (tests, debugging)

 private:
  struct Node {
    int32_t parent;
    int32_t label;
  };
  std::vector<Node> nodes_{{-1, -1}};
  std::vector<std::string> names_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> children_;  // (parent, label) -> node
};

// One intercepted operator call: its shared signature (what it was) and the
// addresses of its tensors. Children follow their parent in `events`
// (pre-order), so a reverse walk visits children before parents.
struct Event {
  explicit Event(int32_t p) : parent(p) {}
  const CallSig* sig = nullptr;
  const uintptr_t* ids = nullptr;  // the call's tensors: ids[n - 1] is the one numbered n (CallSig)
  int32_t parent;                  // -1: called from outside any operator
  int32_t labels = 0;              // module label set active at the call (Recorder::labels)
  int32_t scope = -1;              // innermost module scope active at the call (Recorder::scopes)
  int32_t request = -1;            // request active at the call (Recorder::requests)

  const c10::OperatorHandle& op() const { return sig->op; }
  c10::DispatchKeySet keys() const { return sig->keys; }  // the set the call was redispatched with
  // Metadata with call-local tensor numbers; a view that follows tensors
  // from call to call reads them through ResolvedCall.
  absl::Span<const ArgMeta> args() const { return sig->args; }
  absl::Span<const ArgMeta> outputs() const { return sig->outputs; }
  bool finished() const { return sig->finished; }
  bool raised() const { return sig->raised; }          // the kernel threw (the exception propagated)
  bool unfinished() const { return sig->unfinished; }  // unwound before its own work (CallSig::unfinished)
  // The address of the tensor `t` of this call's metadata (0: undefined).
  uintptr_t identity(const TensorMeta& t) const { return t.identity ? ids[t.identity - 1] : 0; }
};

// Whether `child`, a call made inside `parent`, kept the thread state its
// parent ran with, as the calls a registered autograd kernel makes itself do
// (the kernel below it runs with the autograd keys excluded or, under a
// torch.func transform, its layer popped).
inline bool KeptParentState(const Event& parent, const Event& child) {
  constexpr auto kLayer = c10::DispatchKey::FuncTorchDynamicLayerBackMode;
  return parent.keys().has(kLayer) ? child.keys().has(kLayer) : child.keys().has_any(c10::autograd_dispatch_keyset);
}
// What a full scan keeps per call, with 8 bytes per distinct tensor of the call.
static_assert(sizeof(Event) == 32);

// Note [Reused identities]
// A tensor's identity is its TensorImpl's address, and a forward frees
// tensors and makes new ones at the same addresses, so a data-flow view
// must not let what it knew of a freed tensor reach the next one there:
// - A tensor made by a recorded call appears as that call's output, where
//   the view redefines what it knows under the identity (the token flow:
//   its flow and its view group; otherwise an in-place write into a freed
//   view's old siblings would mark the tensor now at its address).
// - A Python number wrapped as a 0-d tensor for a call (`0.5 * x`) is made
//   without a recorded call; TensorMeta::wrapped says so, and the views
//   treat it as the constant it is, never by identity.
// Otherwise an answer would depend on where the allocator happened to put
// a tensor.

// A call's operands and returns as before sharing: each tensor's identity is
// its address, comparable from one call to the next. Shares the signature's
// sizes and strides; a view builds one on the stack for the call it reads.
class ResolvedCall {
 public:
  explicit ResolvedCall(const Event& e);
  ResolvedCall(const ResolvedCall&) = delete;
  ResolvedCall& operator=(const ResolvedCall&) = delete;
  absl::Span<const ArgMeta> args() const { return {values_.data(), nargs_}; }
  absl::Span<const ArgMeta> outputs() const { return {values_.data() + nargs_, values_.size() - nargs_}; }

 private:
  absl::InlinedVector<ArgMeta, 8> values_;  // the args, then the outputs
  absl::InlinedVector<TensorMeta, 6> tensors_;
  size_t nargs_;
};

// Records the calls of one scan on one thread. Nested scans chain through
// `outer`; every recorder in the chain sees each call.
class Recorder {
 public:
  int32_t Begin(const c10::OperatorHandle& op, c10::DispatchKeySet keys, absl::Span<const c10::IValue> args);
  void End(int32_t index, absl::Span<const c10::IValue> outputs);
  void Abort(int32_t index);
  // PyTorch is about to unwind the open calls with its own control-flow
  // exception: torch.utils.checkpoint stops recomputation from the hook that
  // saves the last tensor backward needs (Note [Calls a control-flow stop
  // unwinds]). `saved`: that tensor, or nullptr where it is not known.
  void ControlFlowStop(const at::Tensor* saved);
  // A Python dispatch mode answered the innermost open call from a cache,
  // without its kernel (selective activation checkpointing's recomputation);
  // `name`: the operator it answered, as "aten::add.Tensor" ("aten::mm" for
  // an overload without a name).
  void AnsweredFromCache(std::string_view name);

  // The calls held: events()[i] is the scan's call folded() + i (a streaming
  // scan drops the calls it has folded). Module scopes' and requests'
  // begin_event / end_event count all the scan's calls, folded ones included.
  const BlockLog<Event>& events() const { return events_; }
  int64_t folded() const { return folded_; }
  int64_t recorded() const { return folded_ + static_cast<int64_t>(events_.size()); }
  // Streaming scans (ScanOptions::streaming): when no call, module call or
  // request is open and at least `fold_every` calls are held (checked when
  // a call starts and when a module call or request ends), `folder` folds
  // them into its sums, and they are dropped.
  std::shared_ptr<Folder> folder;
  size_t fold_every = 0;

  Recorder* outer = nullptr;
  // Stops the scan that owns this recorder when an enclosing scan of the same
  // thread stops first (a workload that opened a scan and never closed it).
  std::function<void()> stop_orphaned;

  // Module attribution: calls are tagged with the label set active when they
  // start (a node of label_sets(); 0 is the empty set). SetLabels replaces
  // the set; EnterLabel / ExitLabel add or remove one label (no-ops when it
  // is already in / not in the set) at a cost that does not grow with the
  // number of labels active.
  void SetLabels(const std::vector<std::string>& labels);
  void EnterLabel(std::string_view label);
  void ExitLabel(std::string_view label);

  // Module scopes: one per module call, identified by (path, call_index);
  // calls are tagged with the innermost open scope.
  struct Scope {
    std::string path;
    int32_t call_index = 0;
    int32_t parent = -1;
    bool failed = false;       // the module's forward raised
    int32_t request = -1;      // request open when it opened
    int64_t begin_event = 0;   // calls recorded when it opened
    int64_t end_event = -1;    // calls recorded when it closed (-1: open)
    int64_t begin_memory = 0;  // allocator reports logged when it opened
    int64_t end_memory = -1;   // ... when it closed (-1: open)
    int64_t begin_ns = 0;      // Recorder::timestamps: when it opened / closed (-1: open)
    int64_t end_ns = -1;
    std::vector<uintptr_t> outputs;  // identities of its output tensors
    // Recorder::attention_calls() when it opened, and whether it recorded
    // such a call by when it closed: a module's token analysis runs only
    // after a call that did (or that enclosed one it analysed).
    int64_t begin_attention_calls = 0;
    bool ran_attention = false;
    // Last: PushScope initialises the fields above in order.
    int64_t thread = 0;      // thread number (EventSet::Add; 0: not an all-threads set)
    bool unsettled = false;  // EventSet::Add: its request was still running at the cut
  };
  int32_t PushScope(std::string path);
  // Closes `id` (and any scope opened inside it that was left open);
  // false when `id` is not open.
  bool PopScope(int32_t id, bool failed, std::vector<uintptr_t> outputs = {});
  const std::vector<Scope>& scopes() const { return scopes_; }
  // Calls recorded so far that run attention or a softmax.
  int64_t attention_calls() const { return attention_calls_; }
  const LabelTree& label_sets() const { return label_sets_; }

  // Requests: calls made between BeginRequest and EndRequest carry the
  // request's index (requests do not nest).
  struct Request {
    std::string id;
    int64_t begin_event = 0;
    bool open = true;
    int64_t end_event = -1;  // calls recorded when it ended (-1: open)
    int64_t seq = 0;         // aggregate_layers: its place among all threads' requests (NextRequestSeq)
  };
  bool BeginRequest(std::string id);  // false when a request is already open
  bool EndRequest();                  // false when none is open
  const std::vector<Request>& requests() const { return requests_; }

  // Allocator reports of this scan (ScanOptions::memory; memory.h).
  MemoryLog& memory() { return memory_; }
  const MemoryLog& memory() const { return memory_; }
  int32_t open_call() const { return open_; }  // innermost call running (-1: none)

  // Per-call start and end times (ScanOptions::timestamps, for traces):
  // call i started at call_times()[2i] and ended at [2i + 1] (-1: never
  // finished), steady-clock nanoseconds. Off: no clock is read.
  bool timestamps = false;
  const std::vector<int64_t>& call_times() const { return times_; }
  int64_t stopped_ns = 0;  // when the scan stopped (timestamps): calls and scopes still open end there

  // Calls [0, SettledPrefix()) are finished trees outside any module call or
  // request still running: what a snapshot taken now may report.
  size_t SettledPrefix() const;

  // TorchScript: top-level calls made by the TorchScript interpreter open and
  // close scopes that follow the interpreter's module hierarchy
  // (torchscan_dispatch/core/torchscript_scopes.cc).
  bool torchscript_scopes = false;
  // false: calls that own their subtree in both views run their children
  // without the mode key (ScanOptions::record_owned_children).
  bool record_owned_children = true;
  // Each top-level TorchScript function call made outside a request is a
  // request of its own, "forward-<n>" (n counts them process-wide from 1):
  // an attached server's requests without a code change.
  bool torchscript_requests = false;
  // Layer rows aggregated across requests (aggregate.h): call indices count
  // from each request's start (outside requests, from each top-level module
  // call's), and a fold drops the module calls and requests it aggregated.
  bool aggregate_layers = false;
  void EnterTorchScriptFunction();  // a TorchScript function call started
  void LeaveTorchScriptFunction();  // ... and returned (or raised)

 private:
  // Streaming: folds the calls held when nothing is open and fold_every are held.
  void MaybeFold() {
    if (C10_UNLIKELY(folder != nullptr) && open_ < 0 && events_.size() >= fold_every) FoldSettled();
  }
  void FoldSettled();
  // `kept` (`had` addresses, the last ids kept or nullptr) extended to `ids`.
  const uintptr_t* KeepIds(const uintptr_t* kept, size_t had, const std::vector<uintptr_t>& ids);
  void SyncTorchScriptScopes();
  void CloseTorchScriptScopes(size_t keep, bool failed);
  std::vector<uintptr_t> LastTopLevelOutputs() const;
  BlockLog<Event> events_;
  CallTable calls_;      // the calls' signatures
  CallTensors tensors_;  // the call being recorded's tensors
  Arena arena_;          // the calls' Event::ids
  int64_t folded_ = 0;
  int64_t attention_calls_ = 0;
  int32_t open_ = -1;  // innermost call still running
  std::vector<int64_t> times_;
  MemoryLog memory_;
  bool control_flow_stop_ = false;  // unwinding after ControlFlowStop()
  // The innermost call when the stop was noted, and what became of it.
  int32_t stop_call_ = -1;
  enum class StopFound : uint8_t { kUnknown, kBeforeKernel, kAfterKernel };
  StopFound FindStop(int32_t index, const at::Tensor& saved);
  StopFound stop_found_ = StopFound::kUnknown;
  c10::IValue stop_output_;    // its one return, when the saved tensor is it
  int32_t cached_call_ = -1;   // AnsweredFromCache's call, until it ends
  bool cached_known_ = false;  // whether that call is the operator the cache answered
  int32_t labels_ = 0;
  int32_t scope_ = -1;
  std::vector<Scope> scopes_;
  std::map<std::string, int32_t> calls_per_path_;
  LabelTree label_sets_;
  std::vector<bool> label_active_;  // by label id: in the set labels_
  std::vector<Request> requests_;
  int32_t request_ = -1;
  // TorchScript scopes opened by SyncTorchScriptScopes (innermost last) and,
  // per running TorchScript function, how many of them it found open. A
  // scope is a module path and the call sites that reached it (inlined code
  // of two calls of one submodule differs only there).
  struct JitScope {
    std::string path;
    uint64_t call_site;
    int32_t scope;
  };
  std::vector<JitScope> jit_open_;
  std::vector<size_t> jit_frames_;
  bool jit_request_ = false;          // the outermost TorchScript call opened the request
  bool jit_request_pending_ = false;  // ... and will at its first operator call
};

// The global order of requests: each request takes the next number when it
// begins (Request::seq), so "the last N" spans threads.
int64_t NextRequestSeq();

// The clock call times are read from (steady clock, nanoseconds).
int64_t SteadyNowNs();

// Innermost active recorder of this thread (nullptr outside scans).
Recorder*& ThreadTopRecorder();

// Pauses of this thread's recording (fallback.h), each owned by the scan
// that was the thread's innermost one when it began: TorchScan's own
// analysis inside a crawl, a torch.compile compile. Each is one call, so an
// interrupt (Ctrl-C) cannot split the pause from its bookkeeping, and a
// pause its owner never resumed (the interrupt landed before the resume)
// ends when that scan stops (ReleasePausesOf): it never outlives the scan.
// With no scan that could record the thread, nothing is paused.
void PauseThreadRecordingForScan();
void ResumeThreadRecordingForScan();  // the latest pause; no-op when none
void ReleasePausesOf(const Recorder* owner);

// Calls that reached the fallback in a thread with no scan: threads that
// inherited the mode key through PyTorch's thread-local-state propagation.
std::atomic<int64_t>& UnattributedCalls();
// Of those, calls that add no FLOPs of their own (op_catalog.h, AddsNoFlopsOfItsOwn).
std::atomic<int64_t>& UnattributedZeroCostCalls();

}  // namespace torchscan
