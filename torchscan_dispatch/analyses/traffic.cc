#include "torchscan_dispatch/analyses/traffic.h"

#include <algorithm>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "formulas/op_traits.h"
#include "formulas/result.h"

namespace torchscan {
namespace {

bool InPlace(std::string_view name) { return FunctionalName(name) != name; }

// Every tensor among a call's operands (lists flattened).
template <class F>
void ForEachTensor(absl::Span<const ArgMeta> values, F&& f) {
  for (size_t i = 0; i < values.size(); ++i) {
    const ArgMeta& a = values[i];
    if (a.is_tensor() && a.tensor().defined) f(i, a.tensor());
    if (a.kind == ArgKind::kTensorList) {
      for (const TensorMeta& t : a.tensors()) {
        if (t.defined) f(i, t);
      }
    }
  }
}

int64_t MaxElements(const OpCall& call) {
  int64_t n = 0;
  ForEachTensor(call.args, [&](size_t, const TensorMeta& t) { n = std::max(n, t.numel()); });
  return n;
}

// Batch norm in inference is a per-channel scale and shift: pointwise.
bool BatchNormInference(const OpCall& call, TrafficClass c) {
  if (c == TrafficClass::kBatchNormInference) return true;
  if (c == TrafficClass::kBatchNorm) {
    const ArgMeta& training = call.arg(5);
    return training.kind == ArgKind::kBool && !training.to_bool();
  }
  return false;
}

KernelClass Classify(const OpInfo& info, const OpCall& call, CallKind kind, bool caller_formula) {
  const TrafficClass traits = TraitsOf(FunctionalName(info.name)).traffic;
  const bool matmul = traits == TrafficClass::kMatmul;
  if (kind == CallKind::kZeroCost) return KernelClass::kMove;
  if (kind == CallKind::kOpaque) return KernelClass::kUnknown;
  if (info.builtin == nullptr || caller_formula) return matmul ? KernelClass::kMatmul : KernelClass::kOther;
  if (info.builtin->source == FormulaSource::kNative || matmul) return KernelClass::kMatmul;
  if (BatchNormInference(call, traits)) return KernelClass::kPointwise;
  if (traits == TrafficClass::kReduction || traits == TrafficClass::kBatchNorm) return KernelClass::kReduction;
  if (info.builtin->pointwise && traits != TrafficClass::kIndex) {
    int64_t out = 0;
    ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) { out = std::max(out, t.numel()); });
    return out < MaxElements(call) ? KernelClass::kReduction : KernelClass::kPointwise;
  }
  return KernelClass::kOther;
}

// A copy whose one operand has as many elements as its result (a cast, a
// contiguous copy): Inductor fuses it like a pointwise call.
bool PointwiseCopy(const OpCall& call) {
  int tensors = 0;
  int64_t in = 0, out = 0;
  ForEachTensor(call.args, [&](size_t, const TensorMeta& t) {
    ++tensors;
    in = t.numel();
  });
  ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) { out = std::max(out, t.numel()); });
  return tensors == 1 && in == out;
}

bool Fusible(KernelClass c, bool pointwise_copy, bool with_reductions) {
  return c == KernelClass::kPointwise || (c == KernelClass::kMove && pointwise_copy) ||
         (with_reductions && c == KernelClass::kReduction);
}

struct Use {
  uintptr_t identity;  // the operand's own identity (a view's, not its base's)
  int32_t version;     // the tensor version it read, -1: made outside the scan (inputs, parameters)
  Bytes bytes;
};

struct Version {
  int32_t kernel;                  // its producer
  std::vector<int32_t> consumers;  // kernels that read it, in order
};

struct Flow {
  std::vector<std::vector<Use>> inputs;                         // per kernel
  std::vector<std::vector<std::pair<int32_t, Bytes>>> outputs;  // per kernel: (version, bytes)
  std::vector<Version> versions;
  std::vector<bool> fusible_copy;
};

// Groups fusible kernels. A kernel joins the group of a fusible producer of
// one of its operands when every other operand comes from that group or from
// a kernel that ran before the group's first kernel (which cannot depend on
// the group): the group stays one kernel with no cycle through the rest.
std::vector<int32_t> Group(const std::vector<KernelTraffic>& ks, const Flow& flow, bool with_reductions,
                           int64_t* count) {
  std::vector<int32_t> group(ks.size(), -1);
  std::vector<int32_t> first;  // per group: its first kernel
  for (size_t k = 0; k < ks.size(); ++k) {
    if (!Fusible(ks[k].kind, flow.fusible_copy[k], with_reductions)) continue;
    int32_t chosen = -1;
    for (const Use& u : flow.inputs[k]) {
      if (u.version < 0) continue;
      const int32_t g = group[flow.versions[u.version].kernel];
      if (g < 0) continue;
      bool ok = true;
      for (const Use& v : flow.inputs[k]) {
        if (v.version < 0) continue;
        const int32_t p = flow.versions[v.version].kernel;
        ok = ok && (group[p] == g || p < first[g]);
      }
      if (ok) {
        chosen = g;
        break;
      }
    }
    if (chosen < 0) {
      chosen = static_cast<int32_t>(first.size());
      first.push_back(static_cast<int32_t>(k));
    }
    group[k] = chosen;
  }
  // Kernels that are not fusible are groups of one.
  for (size_t k = 0; k < ks.size(); ++k) {
    if (group[k] < 0) {
      group[k] = static_cast<int32_t>(first.size());
      first.push_back(static_cast<int32_t>(k));
    }
  }
  *count = static_cast<int64_t>(first.size());
  return group;
}

// Each kernel's share of its group's traffic: operands from outside the
// group (each distinct operand once per group, charged to its first reader)
// and results some kernel outside the group reads, or nobody reads (the
// workload's outputs; ChargeProgramOutputs adds the outputs a kernel of their
// own group also reads).
void FusedShares(std::vector<KernelTraffic>& ks, const Flow& flow, const std::vector<int32_t>& group,
                 Bytes KernelTraffic::* read, Bytes KernelTraffic::* written) {
  absl::flat_hash_set<std::pair<int32_t, uintptr_t>> seen;  // (group, operand identity)
  for (size_t k = 0; k < ks.size(); ++k) {
    const int32_t g = group[k];
    for (const Use& u : flow.inputs[k]) {
      const bool inside = u.version >= 0 && group[flow.versions[u.version].kernel] == g;
      if (inside) continue;
      if (seen.insert({g, u.identity}).second) (ks[k].*read).Add(u.bytes);
    }
    for (const auto& [version, bytes] : flow.outputs[k]) {
      const auto& consumers = flow.versions[version].consumers;
      const bool leaves = consumers.empty() ||
                          std::any_of(consumers.begin(), consumers.end(), [&](int32_t c) { return group[c] != g; });
      if (leaves) (ks[k].*written).Add(bytes);
    }
  }
}

// A result no kernel outside its group reads: the fused estimate keeps it
// on chip unless it leaves the program.
bool ReadOnlyInside(const Version& v, const std::vector<KernelTraffic>& ks, int32_t KernelTraffic::* group) {
  const int32_t g = ks[v.kernel].*group;
  return !v.consumers.empty() &&
         std::all_of(v.consumers.begin(), v.consumers.end(), [&](int32_t c) { return ks[c].*group == g; });
}

}  // namespace

// What ChargeProgramOutputs needs of the pass: the data flow and where each
// tensor identity stood when the last call was recorded.
struct TrafficFlow {
  Flow flow;
  absl::flat_hash_map<uintptr_t, uintptr_t> base;    // a view -> the tensor whose memory it shows
  absl::flat_hash_map<uintptr_t, int32_t> latest;    // a tensor (base) -> its latest version
  absl::flat_hash_map<uintptr_t, int64_t> bound_at;  // an identity -> the call that last made it a new tensor
  int64_t events = 0;
};

const char* KernelClassName(KernelClass c) {
  switch (c) {
    case KernelClass::kMatmul:
      return "matmul";
    case KernelClass::kPointwise:
      return "pointwise";
    case KernelClass::kReduction:
      return "reduction";
    case KernelClass::kMove:
      return "move";
    case KernelClass::kOther:
      return "other";
    case KernelClass::kUnknown:
      return "unknown";
  }
  return "other";
}

Bytes TensorBytes(const TensorMeta& t) {
  Bytes b;
  if (!t.defined || t.nested || t.dtype == c10::ScalarType::Undefined) return b;
  int64_t n = 1;
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return b;
    if (strides.empty() || strides[d] != 0) n *= sizes[d];
  }
  const int64_t bytes = n * static_cast<int64_t>(c10::elementSize(t.dtype));
  b.recorded_bytes = bytes;
  if (c10::isFloatingType(t.dtype)) {
    b.float_elements = n;
  } else {
    b.other_bytes = bytes;
  }
  return b;
}

TrafficResult ComputeTraffic(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog,
                             const Overrides& overrides) {
  TrafficResult result;
  auto& ks = result.kernels;
  auto state = std::make_shared<TrafficFlow>();
  state->events = static_cast<int64_t>(events.size());
  Flow& flow = state->flow;
  auto& base = state->base;
  auto& latest = state->latest;
  auto& bound_at = state->bound_at;
  auto root = [&](uintptr_t id) {
    auto it = base.find(id);
    return it == base.end() ? id : it->second;
  };

  for (size_t i = 0; i < events.size(); ++i) {
    if (plan.covered[i]) continue;
    const Event& e = events[i];
    const OpInfo& info = catalog.Get(e.op());
    const CallKind kind = plan.kind[i];
    if (kind == CallKind::kDecomposition) continue;  // its children are the kernels
    const bool has_children = i + 1 < events.size() && events[i + 1].parent == static_cast<int32_t>(i);
    if (kind == CallKind::kOpaque && has_children) continue;  // its children are visited (and counted)
    const ResolvedCall rc(e);                                 // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    if (kind == CallKind::kZeroCost &&
        (info.zero_cost == ZeroCostReason::kView || info.zero_cost == ZeroCostReason::kMetadata ||
         info.zero_cost == ZeroCostReason::kAllocation)) {
      // Moves nothing. A view's results show its first operand's memory.
      if (info.zero_cost != ZeroCostReason::kAllocation) {
        uintptr_t source = 0;
        ForEachTensor(call.args, [&](size_t, const TensorMeta& t) {
          if (source == 0) source = root(t.identity);
        });
        if (source != 0) {
          ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) {
            if (t.identity != source) {
              base[t.identity] = source;
              bound_at[t.identity] = static_cast<int64_t>(i);
            }
          });
        }
      } else {
        ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) {
          base.erase(t.identity);
          latest.erase(t.identity);
          bound_at[t.identity] = static_cast<int64_t>(i);
        });
      }
      continue;
    }
    const bool in_place = InPlace(info.name);
    // A call that handed back its own operand (dropout in eval, x.to(x.dtype)) moved nothing.
    if (!in_place && !e.outputs().empty()) {
      absl::flat_hash_set<uintptr_t> ins;
      ForEachTensor(call.args, [&](size_t, const TensorMeta& t) { ins.insert(t.identity); });
      bool all_same = true, any = false;
      ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) {
        any = true;
        all_same = all_same && ins.contains(t.identity);
      });
      if (any && all_same) continue;
    }

    KernelTraffic k;
    k.event = static_cast<int32_t>(i);
    const bool caller = overrides.Find(info.name) != nullptr;
    k.kind = e.raised() ? KernelClass::kUnknown : Classify(info, call, kind, caller);
    if (e.raised() || kind == CallKind::kOpaque) {
      k.flops_status = MetricStatus::kUnavailable;
    } else if (kind == CallKind::kFormula) {
      const CallerFormula* f = overrides.Find(info.name);
      const FormulaResult r = f ? (*f)(call) : EvaluateOperatorFormula(*info.builtin, call);
      k.flops_status = r.status;
      if (r.status != MetricStatus::kUnavailable && r.value.exact()) {
        k.flops = r.value;
      } else if (r.status != MetricStatus::kUnavailable) {
        k.flops_status = MetricStatus::kPartial;
      }
    } else if (kind == CallKind::kDeferred) {
      auto it = overrides.deferred_values.find(static_cast<int32_t>(i));
      if (it == overrides.deferred_values.end()) {
        k.flops_status = MetricStatus::kUnavailable;
      } else {
        k.flops = it->second;
      }
    }  // zero-cost copies and fills: 0, complete

    const int32_t kid = static_cast<int32_t>(ks.size());
    std::vector<Use> uses;
    absl::flat_hash_set<uintptr_t> read_ids;
    // Operands read. An in-place fill or copy writes self without reading it.
    const bool writes_self_only =
        in_place && (info.zero_cost == ZeroCostReason::kFill || info.zero_cost == ZeroCostReason::kCopy);
    // A lookup reads the rows it gathers, not its whole table: as many
    // elements of the table as it writes.
    const bool lookup = TraitsOf(FunctionalName(info.name)).traffic == TrafficClass::kLookup &&
                        call.output(0).is_tensor() && call.arg(0).is_tensor();
    ForEachTensor(call.args, [&](size_t index, const TensorMeta& t) {
      if (writes_self_only && index == 0) return;
      if (!read_ids.insert(t.identity).second) return;  // the same tensor twice: read once
      const Bytes b = lookup && index == 0 ? TensorBytes(call.output(0).tensor()) : TensorBytes(t);
      k.read.Add(b);
      auto it = latest.find(root(t.identity));
      const int32_t version = it == latest.end() ? -1 : it->second;
      if (version >= 0) flow.versions[version].consumers.push_back(kid);
      uses.push_back({t.identity, version, b});
    });
    // Results written, each distinct tensor once (in place: self, once).
    std::vector<std::pair<int32_t, Bytes>> outs;
    absl::flat_hash_set<uintptr_t> written_ids;
    ForEachTensor(call.outputs, [&](size_t, const TensorMeta& t) {
      if (!written_ids.insert(t.identity).second) return;
      const Bytes b = TensorBytes(t);
      k.written.Add(b);
      const uintptr_t r = in_place ? root(t.identity) : t.identity;
      if (!in_place) {  // a new tensor (its address may be reused)
        base.erase(t.identity);
        bound_at[t.identity] = static_cast<int64_t>(i);
      }
      const int32_t version = static_cast<int32_t>(flow.versions.size());
      flow.versions.push_back({kid, {}});
      latest[r] = version;
      outs.emplace_back(version, b);
    });
    flow.inputs.push_back(std::move(uses));
    flow.outputs.push_back(std::move(outs));
    flow.fusible_copy.push_back(k.kind == KernelClass::kMove && PointwiseCopy(call));
    ks.push_back(std::move(k));
  }

  const auto groups = Group(ks, flow, false, &result.groups);
  const auto groups_r = Group(ks, flow, true, &result.groups_reductions);
  for (size_t k = 0; k < ks.size(); ++k) {
    ks[k].group = groups[k];
    ks[k].group_reductions = groups_r[k];
  }
  FusedShares(ks, flow, groups, &KernelTraffic::fused_read, &KernelTraffic::fused_written);
  FusedShares(ks, flow, groups_r, &KernelTraffic::fused_r_read, &KernelTraffic::fused_r_written);
  result.flow = std::move(state);
  return result;
}

void ChargeProgramOutputs(TrafficResult& traffic, const std::vector<Recorder::Scope>& scopes) {
  if (traffic.outputs_charged || traffic.flow == nullptr) return;
  traffic.outputs_charged = true;
  const TrafficFlow& f = *traffic.flow;
  auto& ks = traffic.kernels;
  std::vector<int32_t> leaving;  // versions, in the order found
  absl::flat_hash_set<int32_t> found;
  for (const Recorder::Scope& s : scopes) {
    if (s.parent != -1) continue;
    traffic.outputs_known = true;
    const int64_t end = s.end_event < 0 ? f.events : s.end_event;
    for (const uintptr_t id : s.outputs) {
      // The identity was made a new tensor after the scope closed: it no
      // longer names the output.
      auto bound = f.bound_at.find(id);
      if (bound != f.bound_at.end() && bound->second >= end) continue;
      auto b = f.base.find(id);
      auto l = f.latest.find(b == f.base.end() ? id : b->second);
      if (l == f.latest.end()) continue;  // made outside the scan (an input, a parameter)
      const Version& v = f.flow.versions[l->second];
      if (ks[v.kernel].event >= end) continue;  // written again after the scope
      if (std::any_of(v.consumers.begin(), v.consumers.end(), [&](int32_t c) { return ks[c].event >= end; })) {
        continue;  // read after the scope: an intermediate of the surrounding workload
      }
      if (found.insert(l->second).second) leaving.push_back(l->second);
    }
  }
  traffic.output_tensors = static_cast<int64_t>(leaving.size());
  for (const int32_t version : leaving) {
    const Version& v = f.flow.versions[version];
    Bytes bytes;
    for (const auto& [out, b] : f.flow.outputs[v.kernel]) {
      if (out == version) bytes = b;
    }
    // Written already when nobody or a kernel outside the group reads it.
    if (ReadOnlyInside(v, ks, &KernelTraffic::group)) ks[v.kernel].fused_written.Add(bytes);
    if (ReadOnlyInside(v, ks, &KernelTraffic::group_reductions)) ks[v.kernel].fused_r_written.Add(bytes);
  }
}

namespace {

nlohmann::json BytesJson(const Bytes& b) { return {b.float_elements, b.other_bytes, b.recorded_bytes}; }

nlohmann::json CountJson(const Count& c) {
  if (auto v = c.ToUint64()) return *v;
  return c.Digits();
}

}  // namespace

nlohmann::json TrafficJson(const BlockLog<Event>& events, const std::vector<Recorder::Scope>& scopes,
                           const TrafficResult& given, OpCatalog& catalog) {
  TrafficResult charged;
  if (!given.outputs_charged) {
    charged = given;
    ChargeProgramOutputs(charged, scopes);
  }
  const TrafficResult& traffic = given.outputs_charged ? given : charged;
  nlohmann::json j;
  j["bytes_fields"] = {"float_elements", "other_bytes", "recorded_bytes"};
  nlohmann::json ks = nlohmann::json::array();
  for (const KernelTraffic& k : traffic.kernels) {
    const Event& e = events[k.event];
    ks.push_back({{"event", k.event},
                  {"op", catalog.Get(e.op()).packet},
                  {"class", KernelClassName(k.kind)},
                  {"scope", e.scope},
                  {"flops", CountJson(k.flops)},
                  {"flops_status", MetricStatusName(k.flops_status)},
                  {"read", BytesJson(k.read)},
                  {"written", BytesJson(k.written)},
                  {"group", k.group},
                  {"fused_read", BytesJson(k.fused_read)},
                  {"fused_written", BytesJson(k.fused_written)},
                  {"group_reductions", k.group_reductions},
                  {"fused_reductions_read", BytesJson(k.fused_r_read)},
                  {"fused_reductions_written", BytesJson(k.fused_r_written)}});
  }
  j["kernels"] = std::move(ks);
  j["groups"] = traffic.groups;
  j["groups_reductions"] = traffic.groups_reductions;
  // Whether the program's outputs were known (a top-level module scope) and
  // how many tensor versions leave it: written by the fused estimates.
  j["outputs_known"] = traffic.outputs_known;
  j["output_tensors"] = traffic.output_tensors;
  nlohmann::json sc = nlohmann::json::array();
  for (const auto& s : scopes) sc.push_back({{"path", s.path}, {"call_index", s.call_index}, {"parent", s.parent}});
  j["scopes"] = std::move(sc);
  return j;
}

}  // namespace torchscan
