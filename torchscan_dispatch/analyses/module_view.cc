#include "torchscan_dispatch/analyses/module_view.h"

#include <array>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"

namespace torchscan {

OperatorPlan PlanModuleView(const BlockLog<Event>& events, OpCatalog& catalog) {
  return PlanView(events, catalog, [&](const Event& e) {
    const OpInfo& info = catalog.Get(e.op());
    if (info.module) return CallKind::kFormula;
    if (info.zero_cost != ZeroCostReason::kNone) return CallKind::kZeroCost;
    if (catalog.RanDecomposition(e.op(), e.keys())) return CallKind::kDecomposition;
    return CallKind::kOpaque;
  });
}

namespace {

// What a pass works out once per distinct call (CallSig): formulas read the
// signature alone.
struct SigCosts {
  const OpInfo* info = nullptr;
  std::optional<ModuleCosts> formula, zero_cost;  // evaluated on first use
  std::array<Count, 3>* by_operator = nullptr;    // its packet's sums (created on first use)
};

constexpr char kSumOverflow[] =
    "adding its value took a sum past 2^128 - 1, the largest count TorchScan holds exactly; that sum "
    "keeps its value before this call (a lower bound)";

// The run of formula call `i` (Note [Runs of one call]) added at once when
// that gives what adding it call by call gives: `i` is then its last event.
// False, with nothing added, otherwise.
bool AddRun(const BlockLog<Event>& events, const OperatorPlan& plan, size_t& i, size_t& by_call_until,
            const ModuleCosts& costs, SigCosts& known, const OpInfo& info, const TallyRows& rows,
            reports::ModuleTally& t) {
  const FormulaResult* r[3] = {&costs.flops, &costs.macs, &costs.dmas};
  for (const FormulaResult* x : r) {
    if (x->status != MetricStatus::kComplete || !x->value.exact()) return false;
  }
  if (i < by_call_until) return false;
  const CallRun run = RunAt(events, plan, i);
  if (run.calls < 2) return false;
  by_call_until = run.last + 1;  // refused below: its calls go one by one, not scanned again
  if (known.by_operator == nullptr) known.by_operator = &t.by_operator[info.packet];
  reports::LayerTally* const layers[2] = {rows.Scope(events[i]), rows.Request(events[i])};
  std::array<Count, 3> total;
  for (int m = 0; m < 3; ++m) {
    total[m] = r[m]->value * Count(run.calls);
    if (!total[m].exact() || !AddsWithinRange((*known.by_operator)[m], total[m]) ||
        !AddsWithinRange(t.known[m], total[m])) {
      return false;
    }
    for (const reports::LayerTally* layer : layers) {
      if (layer != nullptr && !AddsWithinRange(layer->known[m + 1], total[m])) return false;
    }
  }
  for (int m = 0; m < 3; ++m) {
    (*known.by_operator)[m] += total[m];
    t.known[m] += total[m];
    t.complete[m] = t.complete[m] && t.known[m].exact();
    for (reports::LayerTally* layer : layers) {
      if (layer != nullptr) layer->known[m + 1] += total[m];
    }
  }
  i = run.last;
  return true;
}
}  // namespace

void ModuleSums::Add(const ModuleSums& o) {
  for (int m = 0; m < 3; ++m) {
    if (!AddCount(t.known[m], o.t.known[m])) issues.try_emplace({"count_overflow", "", m}, 1, kSumOverflow);
    t.complete[m] = t.complete[m] && o.t.complete[m] && t.known[m].exact();
  }
  for (const auto& [packet, v] : o.t.by_operator) {
    auto& mine = t.by_operator[packet];
    for (int m = 0; m < 3; ++m) {
      if (!AddCount(mine[m], v[m])) issues.try_emplace({"count_overflow", packet, m}, 1, kSumOverflow);
    }
  }
  gaps.Add(o.gaps);
  for (const auto& [key, issue] : o.issues) {
    auto [it, inserted] = issues.try_emplace(key, issue);
    if (!inserted) it->second.first += issue.first;  // the earlier calls' message stays first
  }
}

void AccumulateModuleView(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog, ModuleSums& sums,
                          const TallyRows& rows) {
  reports::ModuleTally& t = sums.t;
  Gaps& gaps = sums.gaps;
  auto& issues = sums.issues;
  // Node storage: a SigCosts holds evaluated results, costly to move on each rehash.
  absl::node_hash_map<const CallSig*, SigCosts> memo;
  const CallSig* last = nullptr;  // a loop repeats its calls: most events repeat the last one's signature
  SigCosts* last_costs = nullptr;
  size_t by_call_until = 0;  // a refused run's end (Note [Runs of one call])

  for (size_t i = 0; i < events.size(); ++i) {
    if (plan.covered[i]) continue;
    const Event& e = events[i];
    if (e.sig != last) {
      last = e.sig;
      last_costs = &memo[e.sig];
    }
    SigCosts& known = *last_costs;
    if (known.info == nullptr) known.info = &catalog.Get(e.op());
    const OpInfo& info = *known.info;
    auto call = [&] { return FormulaCall(info, e.args(), e.outputs()); };
    // This call's three results, read in place (no copy of their texts per
    // call); a call with no value leaves all three incomplete.
    static const ModuleCosts kMissing = ModuleCosts::Unavailable(FormulaResult::Unavailable("", ""));
    const ModuleCosts* costs = &kMissing;
    bool reported = false;  // a gap diagnostic covers it already
    if (e.raised()) {
      ++gaps.raised[info.packet];
      reported = true;
    } else {
      switch (plan.kind[i]) {
        case CallKind::kFormula:
          if (!known.formula) known.formula = info.module->Evaluate(call());
          costs = &*known.formula;
          if (AddRun(events, plan, i, by_call_until, *costs, known, info, rows, t))
            continue;  // i is the run's last event now
          break;
        case CallKind::kZeroCost:
          if (!known.zero_cost) known.zero_cost = ZeroCostCosts(call(), info.zero_cost);
          costs = &*known.zero_cost;
          break;
        case CallKind::kDecomposition:
          continue;  // its children are visited on their own
        case CallKind::kOpaque:
        case CallKind::kDeferred:
          gaps.AddOpaque(info, plan.in_opaque[i]);
          reported = true;
          break;
      }
    }
    const FormulaResult* r[3] = {&costs->flops, &costs->macs, &costs->dmas};
    reports::LayerTally* const layers[2] = {rows.Scope(e), rows.Request(e)};
    for (int m = 0; m < 3; ++m) {
      const bool valued = r[m]->status != MetricStatus::kUnavailable;
      // A count past 2^128 - 1 (or negative: a formula defect) is refused, never wrapped.
      const bool refused = valued && !r[m]->value.exact();
      const Count value = valued && !refused ? r[m]->value : Count(0);
      const bool incomplete = r[m]->status != MetricStatus::kComplete || refused;
      if (!reported && known.by_operator == nullptr) known.by_operator = &t.by_operator[info.packet];
      bool sums_exact = reported || AddCount((*known.by_operator)[m], value);
      sums_exact = AddCount(t.known[m], value) && sums_exact;
      t.complete[m] = t.complete[m] && !incomplete && t.known[m].exact();
      auto note = [&](const std::string& code, const std::string& message) {
        auto& issue = issues[{IssueKey(code, message), info.packet, m}];
        if (issue.first++ == 0) issue.second = message;
      };
      if (refused && !reported) {
        note("count_overflow", InexactCountMessage(r[m]->value, false));
      } else if (incomplete && !reported) {
        note(r[m]->code.empty() ? "incomplete_operator_formula" : r[m]->code, r[m]->message);
      }
      for (reports::LayerTally* layer : layers) {
        if (layer == nullptr) continue;
        sums_exact = AddCount(layer->known[m + 1], value) && sums_exact;
        layer->complete[m + 1] = layer->complete[m + 1] && !incomplete;
      }
      if (!sums_exact) note("count_overflow", kSumOverflow);
    }
  }
}

reports::ModuleTally FinishModuleView(ModuleSums sums, const TallyContext& context) {
  reports::ModuleTally t = std::move(sums.t);
  t.torch_version = context.torch_version;
  t.scope = context.scope;
  const Gaps& gaps = sums.gaps;
  const auto& issues = sums.issues;

  gaps.AppendDiagnostics(
      t.diagnostics, {reports::kModuleMetricNames[0], reports::kModuleMetricNames[1], reports::kModuleMetricNames[2]},
      "module-view formula");
  for (const auto& [key, issue] : issues) {
    const auto& [code, op, m] = key;
    t.diagnostics.push_back({IssueCode(code), "warning", reports::kModuleMetricNames[m],
                             absl::StrCat(op, ": ", issue.second), op, std::nullopt, issue.first});
  }
  if (context.unattributed_calls > 0 && context.unattributed_calls == context.unattributed_zero_cost_calls) {
    // Zero-cost calls: no FLOPs or MACs, but their memory accesses were not seen.
    t.complete[2] = false;
    t.diagnostics.push_back(
        {"unattributed_thread_work", "warning", reports::kModuleMetricNames[2],
         absl::StrCat(context.unattributed_calls,
                      " operator call(s) with no FLOPs of their own (copies, views, allocations, fills, "
                      "decompositions) ran in other threads; their memory accesses are not counted"),
         std::nullopt, std::nullopt, context.unattributed_calls});
  } else if (context.unattributed_calls > 0) {
    t.complete = {false, false, false};
    t.diagnostics.push_back(
        {"unattributed_thread_work", "warning", "module_view",
         absl::StrCat(context.unattributed_calls, " operator call(s) ran in other threads; they are not counted"),
         std::nullopt, std::nullopt, context.unattributed_calls});
  }
  return t;
}

reports::ModuleTally TallyModuleView(const BlockLog<Event>& events, const OperatorPlan& plan, OpCatalog& catalog,
                                     const TallyContext& context, std::vector<reports::LayerTally>* layers,
                                     const ModuleSums* before) {
  ModuleSums sums = before ? *before : ModuleSums();
  AccumulateModuleView(events, plan, catalog, sums, TallyRows{layers});
  return FinishModuleView(std::move(sums), context);
}

}  // namespace torchscan
