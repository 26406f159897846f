// Turns boxed operator arguments into value-free metadata (formulas/op_call.h)
// and keeps one copy of each distinct call (CallSig). Never keeps a tensor:
// sizes, strides, dtype, device and scalars are copied into the table's arena.
//
// Why shared: a model repeats the same few hundred calls (the same operator
// on the same shapes) many times over. A recorded call is then its shared
// signature plus what differs from one call to the next, the addresses of
// its tensors (Event::ids), so full scans keep tens of bytes per call, not
// hundreds.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/DispatchKeySet.h>

#include <array>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "formulas/op_call.h"
#include "torchscan_dispatch/core/arena.h"

namespace torchscan {

// Arguments of TorchScript custom classes are recorded by the layer that
// understands them: c10d's ProcessGroup and ReduceOp become their names
// (analyses/communication.h, RecordCustomClass), installed by the session
// before it records; the recorder names no class itself. Unset: kOther.
using CustomClassRecorder = ArgMeta (*)(Arena& arena, const c10::IValue& v);
void SetCustomClassRecorder(CustomClassRecorder recorder);

// What a call was, shared by every call that was the same: its operator,
// the dispatch keys it continued with, its operands' and returns' metadata
// and how it ended. Tensor identities in it are call-local: 1, 2, ... in
// order of first appearance among the operands, then the returns (0: an
// undefined tensor), so equal numbers are the same tensor within the call.
// Event::ids holds the addresses they stand for.
struct CallSig {
  CallSig(const c10::OperatorHandle& o, c10::DispatchKeySet k) : op(o), keys(k) {}
  c10::OperatorHandle op;
  c10::DispatchKeySet keys;
  absl::Span<const ArgMeta> args;
  absl::Span<const ArgMeta> outputs;
  const CallSig* started = nullptr;  // the signature the call had while it ran (nullptr: this is it)
  // A running call's signature: the one its last call finished with (a
  // guess CallTable::Finish checks first; Note [Repeated calls]).
  mutable const CallSig* last_finished = nullptr;
  // Whether the operator owns its subtree in both views (OwnsSubtreeInBothViews'
  // answer for the operator alone, kept here so the fallback asks a map once
  // per signature rather than once per call; -1: not asked yet).
  mutable int8_t owner = -1;
  // 1 when the operator runs attention or a softmax (RunsAttentionOrSoftmax,
  // counted by Recorder::Begin), 0 when not; -1: not asked yet.
  mutable int8_t attention_or_softmax = -1;
  uint64_t hash = 0;
  uint32_t arg_tensors = 0;  // distinct tensors among the operands
  uint32_t tensors = 0;      // ... among the operands and the returns
  bool finished = false;     // it returned, raised or was stopped (not running)
  bool raised = false;       // the kernel threw (the exception propagated)
  // Unwound by PyTorch's control-flow exception before its own work was done
  // (Note [Calls a control-flow stop unwinds] in recorder.cc): it adds nothing
  // itself; the calls it made count.
  bool unfinished = false;
};

// How a running call ended without returns (CallTable::Stop).
enum class StopHow : uint8_t {
  kRaised,      // its kernel threw: its work is unknown
  kStopped,     // a control-flow stop after its kernel ran (its returns are lost)
  kUnfinished,  // a control-flow stop before its own work was done
};

// The distinct tensors of one call, numbered as CallSig says.
class CallTensors {
 public:
  void Reset(const uintptr_t* ids, size_t n);  // start from these (a running call's operands)
  uint32_t Number(uintptr_t address);          // 1-based; new addresses are appended
  const std::vector<uintptr_t>& addresses() const { return ids_; }
  void Truncate(size_t n);  // forgets the addresses after the first n

 private:
  static constexpr size_t kLinear = 16;  // beyond this many, look up by hash
  void IndexAll();
  std::vector<uintptr_t> ids_;
  absl::flat_hash_map<uintptr_t, uint32_t> index_;
};

// The content hash CallTable keys signatures by, of `values` continuing
// from `seed`: the same values give the same hash in every process.
uint64_t HashCallValues(uint64_t seed, absl::Span<const ArgMeta> values);

// The signatures of one recorder's calls.
class CallTable {
 public:
  CallTable() = default;
  CallTable(const CallTable&) = delete;
  CallTable& operator=(const CallTable&) = delete;

  // A call that starts with these operands: the shared signature of a
  // running call; `tensors` gets its distinct tensors.
  const CallSig* Start(const c10::OperatorHandle& op, c10::DispatchKeySet keys, absl::Span<const c10::IValue> args,
                       CallTensors& tensors);
  // The running call `started` returned `outputs`; `tensors` (reset to its
  // operands' addresses) gets the returns' new ones appended.
  const CallSig* Finish(const CallSig* started, absl::Span<const c10::IValue> outputs, CallTensors& tensors);
  // The running call `started` ended without returns: it raised, or it was
  // stopped by PyTorch's control-flow exception (Recorder::ControlFlowStop).
  const CallSig* Stop(const CallSig* started, StopHow how);
  // The finished call `finished`, whose returns a cache gave without its
  // kernel running (CallSig::unfinished, with the returns kept).
  const CallSig* Unfinished(const CallSig* finished);

  size_t size() const { return sigs_.size(); }
  size_t guessed() const { return guessed_; }  // Start and Finish answers of Note [Repeated calls]
  // Forgets every signature: nothing returned before stays valid (nor the
  // guesses of Note [Repeated calls]).
  void Clear();

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(const CallSig* s) const { return s->hash; }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(const CallSig* a, const CallSig* b) const;
  };
  // The kept signature equal to `probe`, whose metadata was recorded at the
  // arena's top since `mark` (dropped when an equal one is kept already).
  const CallSig* Intern(const CallSig& probe, const Arena::Mark& mark);

  // Note [Repeated calls]: the last running-call signatures seen per
  // operator and keys, by a hash of both; two ways, the latest first.
  static constexpr size_t kSlotBits = 8;
  struct Slot {
    const CallSig* way[2] = {nullptr, nullptr};
  };
  Slot& SlotFor(const c10::OperatorHandle& op, c10::DispatchKeySet keys);
  std::array<Slot, size_t{1} << kSlotBits> recent_{};
  size_t guessed_ = 0;

  Arena arena_;             // the signatures' metadata
  BlockLog<CallSig> kept_;  // the signatures (stable addresses)
  absl::flat_hash_set<const CallSig*, Hash, Eq> sigs_;
};

}  // namespace torchscan
