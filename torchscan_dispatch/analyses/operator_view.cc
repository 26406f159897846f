#include "torchscan_dispatch/analyses/operator_view.h"

#include <map>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "formulas/registry.h"

namespace torchscan {
namespace {

constexpr char kSumOverflow[] =
    "adding its FLOPs took a sum past 2^128 - 1, the largest count TorchScan holds exactly; that sum keeps "
    "its value before this call (a lower bound)";

// Exact name first, then the functional name of an in-place variant.
template <class Map>
auto FindInPlaceAware(const Map& m, const std::string& op) -> decltype(m.find(op)) {
  auto it = m.find(op);
  if (it != m.end()) return it;
  return m.find(std::string(FunctionalName(op)));
}

// FlopCounterMode's attribution: a call counts for every module label active
// when it ran (so parents include their children). Calls are summed per label
// set first (`per_set`, by LabelTree node); a label's total is then the sum
// over the subtrees of the nodes that add it, since a label occurs once per
// path. Children have larger indices than parents, so one reverse pass folds
// every subtree: linear in the sets, however deep the modules nest.
using PacketFlops = absl::flat_hash_map<std::string, Count>;  // an inexact sum stays inexact up the tree

void AddToModules(reports::FlopTally& t, const LabelTree& sets, std::vector<PacketFlops>& per_set) {
  for (int32_t n = static_cast<int32_t>(per_set.size()) - 1; n > LabelTree::kEmpty; --n) {
    if (per_set[n].empty()) continue;
    auto& label_total = t.by_module[sets.name(sets.label(n))];
    for (const auto& [packet, flops] : per_set[n]) label_total[packet] += flops;
    if (sets.parent(n) != LabelTree::kEmpty) {
      auto& parent = per_set[sets.parent(n)];
      for (const auto& [packet, flops] : per_set[n]) parent[packet] += flops;
    }
    PacketFlops().swap(per_set[n]);  // folded: free it
  }
}

OpCall CallOf(const Event& e, const OpInfo& info) { return FormulaCall(info, e.args(), e.outputs()); }

// What a pass over the calls works out once per distinct call (CallSig): a
// built-in formula's value depends on the signature alone. Caller formulas
// run per call (they are the caller's code).
struct SigFacts {
  const OpInfo* info = nullptr;
  const CallerFormula* caller = nullptr;
  std::optional<FormulaResult> builtin;  // evaluated on first use
  Count* by_operator = nullptr;          // its packet's sum (created on first use)
  reports::IgnoredOperator* ignored = nullptr;
};

// The run of built-in formula call `i` (Note [Runs of one call]) added at
// once when that gives what adding it call by call gives: `i` is then its
// last event. False, with nothing added, otherwise.
bool AddRun(const BlockLog<Event>& events, const OperatorPlan& plan, size_t& i, size_t& by_call_until,
            const FormulaResult& r, SigFacts& f, std::vector<PacketFlops>& per_set, const TallyRows& rows,
            reports::FlopTally& t) {
  if (r.status != MetricStatus::kComplete || !r.value.exact()) return false;
  if (i < by_call_until) return false;
  const CallRun run = RunAt(events, plan, i);
  if (run.calls < 2) return false;
  by_call_until = run.last + 1;  // refused below: its calls go one by one, not scanned again
  const Event& e = events[i];
  const Count total = r.value * Count(run.calls);
  if (!total.exact()) return false;
  if (!f.by_operator) f.by_operator = &t.by_operator[f.info->packet];
  Count* by_set = r.value != 0 && e.labels != LabelTree::kEmpty ? &per_set[e.labels][f.info->packet] : nullptr;
  reports::LayerTally* const layers[2] = {rows.Scope(e), rows.Request(e)};
  if (!AddsWithinRange(*f.by_operator, total) || !AddsWithinRange(t.known, total) ||
      (by_set != nullptr && !AddsWithinRange(*by_set, total))) {
    return false;
  }
  for (const reports::LayerTally* layer : layers) {
    if (layer != nullptr && !AddsWithinRange(layer->known[0], total)) return false;
  }
  *f.by_operator += total;
  t.known += total;
  t.complete = t.complete && t.known.exact();
  if (by_set != nullptr) *by_set += total;
  for (reports::LayerTally* layer : layers) {
    if (layer != nullptr) layer->known[0] += total;
  }
  i = run.last;
  return true;
}

}  // namespace

std::string IssueKey(const std::string& code, const std::string& message) {
  return code == "compiled_region" ? absl::StrCat(code, "\x1f", message) : code;
}

std::string IssueCode(const std::string& key) { return key.substr(0, key.find('\x1f')); }

std::string InexactCountMessage(const Count& value, bool caller) {
  if (caller) {
    return value.state() == Count::State::kNegative
               ? "the caller formula returned a negative count; FLOP counts are non-negative integers: fix "
                 "the formula. The call is not counted"
               : "the caller formula's count passed 2^128 - 1, the largest count TorchScan holds exactly; "
                 "the call is not counted";
  }
  return value.state() == Count::State::kNegative
             ? "its formula gave a negative count (a TorchScan defect: please report it); the call is not counted"
             : "its count passes 2^128 - 1, the largest count TorchScan holds exactly; the call is not counted";
}

bool Overrides::Has(const std::string& op) const { return Find(op) != nullptr || IsDeferred(op); }

const CallerFormula* Overrides::Find(const std::string& op) const {
  auto it = FindInPlaceAware(formulas, op);
  return it == formulas.end() ? nullptr : &it->second;
}

bool Overrides::IsDeferred(const std::string& op) const { return FindInPlaceAware(deferred, op) != deferred.end(); }

void Gaps::AddOpaque(const OpInfo& info, bool inside_opaque) {
  // The outermost uncounted call names the missing work; calls inside it are
  // part of that work (their formulas still count as known).
  if (!inside_opaque) ++(StatedExclusion(info.name) ? excluded : uncounted)[info.packet];
}

void Gaps::AppendDiagnostics(std::vector<reports::Diagnostic>& out, const std::vector<std::string>& metrics,
                             const std::string& what) const {
  for (const std::string& metric : metrics) {
    for (const auto& [op, calls] : uncounted) {
      out.push_back({"uncounted_operator", "warning", metric,
                     absl::StrCat(op, " ran ", calls, " time(s) with no ", what, "; ", metric, " is a lower bound"), op,
                     std::nullopt, calls});
    }
    for (const auto& [op, calls] : excluded) {
      const std::string name = absl::StrReplaceAll(op, {{".", "::"}});
      out.push_back({"excluded_operator", "warning", metric,
                     absl::StrCat(op, " ran ", calls, " time(s) and is not counted: ", StatedExclusion(name)), op,
                     std::nullopt, calls});
    }
    for (const auto& [op, calls] : raised) {
      out.push_back({"operator_raised", "warning", metric,
                     absl::StrCat(op, " raised ", calls,
                                  " time(s) inside the workload (the error was caught); its work is not counted"),
                     op, std::nullopt, calls});
    }
  }
}

// Work an autograd kernel adds around the kernel it wraps (forward-mode
// tangents, as under torch.func.jvp or forward_ad) is not the operator's own
// work, so no formula owns it. A registered autograd kernel reaches the
// kernel below it with a changed thread state: the autograd keys excluded or,
// under a torch.func transform, its layer popped (no DynamicLayerBackMode key).
// A call that still carries the parent's state came from the autograd kernel.
static bool MadeByAutogradKernel(const BlockLog<Event>& events, const Event& e, OpCatalog& catalog) {
  const Event& parent = events[e.parent];
  return KeptParentState(parent, e) && catalog.RanAutogradKernel(parent.op(), parent.keys());
}

OperatorPlan PlanView(const BlockLog<Event>& events, OpCatalog& catalog,
                      absl::FunctionRef<CallKind(const Event&)> classify) {
  OperatorPlan plan;
  plan.kind.resize(events.size());
  plan.covered.resize(events.size());
  plan.in_opaque.resize(events.size());
  absl::flat_hash_map<const CallSig*, CallKind> kinds;  // classify's answer per signature
  const CallSig* last = nullptr;  // a loop repeats its calls: most events repeat the last one's signature
  CallKind last_kind = CallKind::kOpaque;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    if (e.sig != last) {
      auto [kind, fresh] = kinds.try_emplace(e.sig, CallKind::kOpaque);
      // Unwound before its own work was done (Note [Calls a control-flow stop
      // unwinds] in core/recorder.cc): the calls it made are what ran.
      if (fresh) kind->second = e.unfinished() ? CallKind::kDecomposition : classify(e);
      last = e.sig;
      last_kind = kind->second;
    }
    plan.kind[i] = last_kind;
    if (C10_UNLIKELY(e.keys().has(c10::DispatchKey::FuncTorchBatched) ||
                     e.keys().has(c10::DispatchKey::FuncTorchGradWrapper))) {
      // Under torch.func transforms this call sees wrapped tensors (vmap's
      // logical per-sample shapes, grad/jvp's wrappers); the transform makes
      // the physical calls (batched kernels, tangent products), its children.
      const bool has_children = i + 1 < events.size() && events[i + 1].parent == static_cast<int32_t>(i);
      if (has_children) {
        plan.kind[i] = CallKind::kDecomposition;
      } else if (plan.kind[i] != CallKind::kZeroCost) {
        plan.kind[i] = CallKind::kOpaque;  // physical work we did not see
      }
    }
    if (e.parent >= 0) {
      const CallKind pk = plan.kind[e.parent];
      plan.covered[i] =
          !MadeByAutogradKernel(events, e, catalog) && (plan.covered[e.parent] || pk == CallKind::kFormula ||
                                                        pk == CallKind::kDeferred || pk == CallKind::kZeroCost);
      plan.in_opaque[i] = plan.in_opaque[e.parent] || pk == CallKind::kOpaque;
    }
  }
  return plan;
}

OperatorPlan PlanOperatorView(const BlockLog<Event>& events, OpCatalog& catalog, const Overrides& overrides) {
  return PlanView(events, catalog, [&](const Event& e) {
    const OpInfo& info = catalog.Get(e.op());
    if (overrides.Find(info.name)) return CallKind::kFormula;
    if (overrides.IsDeferred(info.name)) return CallKind::kDeferred;
    if (info.builtin) return CallKind::kFormula;
    if (info.zero_cost != ZeroCostReason::kNone) return CallKind::kZeroCost;
    if (catalog.RanDecomposition(e.op(), e.keys())) return CallKind::kDecomposition;
    return CallKind::kOpaque;
  });
}

void Gaps::Add(const Gaps& other) {
  for (const auto& [op, n] : other.uncounted) uncounted[op] += n;
  for (const auto& [op, n] : other.excluded) excluded[op] += n;
  for (const auto& [op, n] : other.raised) raised[op] += n;
}

void OperatorSums::Add(const OperatorSums& o) {
  auto overflow = [&](const std::string& packet) { issues.try_emplace({"count_overflow", packet}, 1, kSumOverflow); };
  if (!AddCount(t.known, o.t.known)) overflow("");
  t.complete = t.complete && o.t.complete && t.known.exact();
  for (const auto& [packet, v] : o.t.by_operator) {
    if (!AddCount(t.by_operator[packet], v)) overflow(packet);
  }
  for (const auto& [label, ops] : o.t.by_module) {
    for (const auto& [packet, v] : ops) t.by_module[label][packet] += v;
  }
  for (const auto& [packet, ig] : o.t.ignored) {
    auto& mine = t.ignored[packet];
    mine.calls += ig.calls;
    mine.reason = ig.reason;
  }
  gaps.Add(o.gaps);
  for (const auto& [key, issue] : o.issues) {
    auto [it, inserted] = issues.try_emplace(key, issue);
    if (!inserted) it->second.first += issue.first;  // the earlier calls' message stays first
  }
}

void AccumulateOperatorView(const BlockLog<Event>& events, const LabelTree& label_sets, const OperatorPlan& plan,
                            OpCatalog& catalog, const Overrides& overrides, OperatorSums& sums, const TallyRows& rows) {
  reports::FlopTally& t = sums.t;
  Gaps& gaps = sums.gaps;
  auto& formula_issues = sums.issues;
  std::vector<PacketFlops> per_set(label_sets.size());  // by_module, per label set
  // Node storage: a signature's facts stay where they are while others are added.
  absl::node_hash_map<const CallSig*, SigFacts> facts;
  const CallSig* last = nullptr;  // a loop repeats its calls: most events repeat the last one's signature
  SigFacts* last_facts = nullptr;
  size_t by_call_until = 0;  // a refused run's end (Note [Runs of one call])

  for (size_t i = 0; i < events.size(); ++i) {
    if (plan.covered[i]) continue;
    const Event& e = events[i];
    if (e.sig != last) {
      auto [known, fresh] = facts.try_emplace(e.sig);
      if (fresh) {
        known->second.info = &catalog.Get(e.op());
        known->second.caller = overrides.Find(known->second.info->name);
      }
      last = e.sig;
      last_facts = &known->second;
    }
    SigFacts& f = *last_facts;
    const OpInfo& info = *f.info;
    auto packet_sum = [&]() -> Count& {
      if (!f.by_operator) f.by_operator = &t.by_operator[info.packet];
      return *f.by_operator;
    };
    Count value = 0;          // what this call adds to the known total
    bool incomplete = false;  // whether it leaves work uncounted
    bool sums_exact = true;   // no sum passed 2^128 - 1 with this call
    auto issue = [&](const std::string& code, const std::string& message) {
      auto& entry = formula_issues[{IssueKey(code, message), info.packet}];
      if (entry.first++ == 0) entry.second = message;
    };
    if (e.raised()) {
      // Its kernel threw and the model caught it: its work is unknown.
      ++gaps.raised[info.packet];
      incomplete = true;
    } else {
      switch (plan.kind[i]) {
        case CallKind::kFormula: {
          const CallerFormula* caller = f.caller;
          if (!caller && !f.builtin) f.builtin = EvaluateOperatorFormula(*info.builtin, CallOf(e, info));
          if (!caller && AddRun(events, plan, i, by_call_until, *f.builtin, f, per_set, rows, t))
            continue;  // i: the run's last
          // The built-in result is read in place: no copy of its texts per call.
          std::optional<FormulaResult> from_caller;
          if (caller) from_caller = (*caller)(CallOf(e, info));
          const FormulaResult& r = caller ? *from_caller : *f.builtin;
          if (r.status != MetricStatus::kUnavailable && !r.value.exact()) {
            // Refused, never wrapped: a negative caller value, or past 2^128 - 1.
            incomplete = true;
            issue(caller ? "invalid_caller_formula" : "count_overflow",
                  InexactCountMessage(r.value, caller != nullptr));
            break;
          }
          if (r.status != MetricStatus::kUnavailable) value = r.value;
          if (r.status != MetricStatus::kComplete) {
            incomplete = true;
            issue(r.code.empty() ? "incomplete_operator_formula" : r.code, r.message);
          }
          if (r.status != MetricStatus::kUnavailable) sums_exact = AddCount(packet_sum(), value);
          break;
        }
        case CallKind::kDeferred: {
          auto it = overrides.deferred_values.find(static_cast<int32_t>(i));
          if (it == overrides.deferred_values.end()) {
            incomplete = true;
            issue("unsupported_operator_formula", "the caller formula was not evaluated");
          } else {
            value = it->second;
            sums_exact = AddCount(packet_sum(), value);
          }
          break;
        }
        case CallKind::kZeroCost: {
          if (!f.ignored) {
            f.ignored = &t.ignored[info.packet];
            f.ignored->reason = ZeroCostReasonName(info.zero_cost);
          }
          ++f.ignored->calls;
          break;
        }
        case CallKind::kDecomposition:
          break;  // its children are visited on their own
        case CallKind::kOpaque:
          gaps.AddOpaque(info, plan.in_opaque[i]);
          incomplete = true;
          break;
      }
    }
    sums_exact = AddCount(t.known, value) && sums_exact;
    t.complete = t.complete && !incomplete && t.known.exact();
    if (value != 0 && e.labels != LabelTree::kEmpty) per_set[e.labels][info.packet] += value;
    for (reports::LayerTally* layer : {rows.Scope(e), rows.Request(e)}) {
      if (layer == nullptr) continue;
      sums_exact = AddCount(layer->known[0], value) && sums_exact;
      layer->complete[0] = layer->complete[0] && !incomplete;
    }
    if (!sums_exact) issue("count_overflow", kSumOverflow);
  }

  AddToModules(t, label_sets, per_set);
}

reports::FlopTally FinishOperatorView(OperatorSums sums, const TallyContext& context) {
  reports::FlopTally t = std::move(sums.t);
  t.torch_version = context.torch_version;
  t.native_convention = NativeConvention();
  t.scope = context.scope;
  auto& formula_issues = sums.issues;
  const Gaps& gaps = sums.gaps;
  for (const auto& [label, ops] : t.by_module) {
    for (const auto& [packet, flops] : ops) {
      if (!flops.exact()) formula_issues.try_emplace({"count_overflow", packet}, 1, kSumOverflow);
    }
  }
  gaps.AppendDiagnostics(t.diagnostics, {"operator_flops"}, "FLOP formula");
  for (const auto& [key, issue] : formula_issues) {
    t.diagnostics.push_back({IssueCode(key.first), "warning", "operator_flops",
                             absl::StrCat(key.second, ": ", issue.second), key.second, std::nullopt, issue.first});
  }
  if (context.unattributed_calls > 0 && context.unattributed_calls == context.unattributed_zero_cost_calls) {
    t.diagnostics.push_back(
        {"unattributed_zero_cost_work", "warning", "operator_flops",
         absl::StrCat(context.unattributed_calls,
                      " operator call(s) ran in other threads that inherited the scan's dispatch state (e.g. a "
                      "gloo worker copying a collective's buffers); each was a zero-cost operator (copy, view, "
                      "allocation, fill) or a decomposition into such calls, so they add no FLOPs"),
         std::nullopt, std::nullopt, context.unattributed_calls});
  } else if (context.unattributed_calls > 0) {
    t.complete = false;
    t.diagnostics.push_back({"unattributed_thread_work", "warning", "operator_flops",
                             absl::StrCat(context.unattributed_calls,
                                          " operator call(s) ran in other threads that inherited the scan's dispatch "
                                          "state (e.g. torch.jit.fork); they are not counted"),
                             std::nullopt, std::nullopt, context.unattributed_calls});
  }
  return t;
}

reports::FlopTally TallyOperatorView(const BlockLog<Event>& events, const LabelTree& label_sets,
                                     const OperatorPlan& plan, OpCatalog& catalog, const Overrides& overrides,
                                     const TallyContext& context, std::vector<reports::LayerTally>* layers,
                                     const OperatorSums* before) {
  OperatorSums sums = before ? *before : OperatorSums();
  AccumulateOperatorView(events, label_sets, plan, catalog, overrides, sums, TallyRows{layers});
  return FinishOperatorView(std::move(sums), context);
}

}  // namespace torchscan
