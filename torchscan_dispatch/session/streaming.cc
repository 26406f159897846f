#include "torchscan_dispatch/session/streaming.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "torchscan_dispatch/analyses/module_view.h"

namespace torchscan {

namespace {

void AddRow(FoldedRow& to, const FoldedRow& from) {
  for (int m = 0; m < 4; ++m) {
    AddCount(to.known[m], from.known[m]);
    to.complete[m] = to.complete[m] && from.complete[m];
  }
  to.folded = to.folded || from.folded;
  to.calls += from.calls;
  if (from.field) to.field = from.field;
}

FoldedRow RowOf(const reports::LayerTally& t) {
  FoldedRow row;
  row.folded = true;
  row.known = t.known;
  row.complete = t.complete;
  return row;
}

}  // namespace

void Folded::Add(const Folded& other, const std::vector<int32_t>& scope_at, const std::vector<int32_t>& request_at) {
  calls += other.calls;
  operators.Add(other.operators);
  modules.Add(other.modules);
  communication.Add(other.communication);
  for (size_t s = 0; s < other.scopes.size() && s < scope_at.size(); ++s) {
    if (scope_at[s] < 0) continue;
    if (scopes.size() <= static_cast<size_t>(scope_at[s])) scopes.resize(scope_at[s] + 1);
    AddRow(scopes[scope_at[s]], other.scopes[s]);
  }
  for (size_t q = 0; q < other.requests.size() && q < request_at.size(); ++q) {
    if (request_at[q] < 0) continue;
    if (requests.size() <= static_cast<size_t>(request_at[q])) requests.resize(request_at[q] + 1);
    AddRow(requests[request_at[q]], other.requests[q]);
  }
  operators_seen.insert(other.operators_seen.begin(), other.operators_seen.end());
  aggregate.Merge(other.aggregate);
}

void ViewFolder::Fold(const Recorder& r) {
  const BlockLog<Event>& events = r.events();
  const int64_t base = r.folded();
  // Nothing is open: every scope and request of these calls opened after the
  // last fold, so they are the last ones of each list.
  const auto& scopes = r.scopes();
  const int32_t first_scope = static_cast<int32_t>(folded_.scopes.size());
  const int32_t first_request = static_cast<int32_t>(folded_.requests.size());
  std::vector<reports::LayerTally> scope_rows(scopes.size() - first_scope);
  std::vector<reports::LayerTally> request_rows(r.requests().size() - first_request);
  const TallyRows rows{&scope_rows, first_scope, &request_rows, first_request};

  const OperatorPlan plan = PlanOperatorView(events, catalog_, *overrides_);
  AccumulateOperatorView(events, r.label_sets(), plan, catalog_, *overrides_, folded_.operators, rows);
  const OperatorPlan module_plan = PlanModuleView(events, catalog_);
  AccumulateModuleView(events, module_plan, catalog_, folded_.modules, rows);
  AccumulateCommunication(events, catalog_, base, folded_.communication);

  std::vector<FieldQuery> queries(scope_rows.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    const Recorder::Scope& sc = scopes[first_scope + i];
    queries[i] = {sc.end_event - base, sc.outputs};
  }
  // Without module scopes no field is ever asked for: the flow is skipped.
  std::vector<std::optional<Field>> fields = fields_wanted_
                                                 ? fields_.Run(events, 0, events.size(), module_plan, catalog_, queries)
                                                 : std::vector<std::optional<Field>>(queries.size());

  if (r.aggregate_layers) {
    // Aggregated: the rows are grouped now and the recorder drops the scopes and requests.
    AggregateBatch batch;
    batch.events = &events;
    batch.base = base;
    batch.scopes = &scopes;
    batch.first_scope = first_scope;
    for (size_t i = 0; i < scope_rows.size(); ++i) {
      const Recorder::Scope& sc = scopes[first_scope + i];
      reports::LayerTally& row = scope_rows[i];
      row.path = sc.path;
      row.call_index = sc.call_index;
      row.failed = sc.failed;
      row.depth = sc.parent >= first_scope ? scope_rows[sc.parent - first_scope].depth + 1 : 0;
      SetLayerField(row, fields[i]);
    }
    batch.scope_rows = &scope_rows;
    batch.first_request = first_request;
    for (size_t q = first_request; q < r.requests().size(); ++q) {
      batch.request_ids.push_back(r.requests()[q].id);
      batch.request_seqs.push_back(r.requests()[q].seq);
    }
    batch.request_rows = &request_rows;
    batch.request_calls.assign(request_rows.size(), 0);
    for (size_t i = 0; i < events.size(); ++i) {
      const int32_t q = events[i].request;
      if (q >= first_request) ++batch.request_calls[q - first_request];
    }
    batch.thread = thread;
    folded_.aggregate.Add(batch);
  } else {
    for (size_t i = 0; i < scope_rows.size(); ++i) {
      folded_.scopes.push_back(RowOf(scope_rows[i]));
      folded_.scopes.back().field = std::move(fields[i]);
    }
    for (const auto& row : request_rows) folded_.requests.push_back(RowOf(row));
    for (size_t i = 0; i < events.size(); ++i) {
      const int32_t q = events[i].request;
      if (q >= first_request) ++folded_.requests[q].calls;
    }
  }
  const c10::OperatorHandle* last = nullptr;  // a loop repeats operators: most events repeat the last one
  for (size_t i = 0; i < events.size(); ++i) {
    if (last != nullptr && *last == events[i].op()) continue;
    last = &events[i].op();
    if (!seen_.insert(events[i].op()).second) continue;
    const auto& n = events[i].op().operator_name();
    folded_.operators_seen.insert(n.overload_name.empty() ? n.name : absl::StrCat(n.name, ".", n.overload_name));
  }
  folded_.calls += static_cast<int64_t>(events.size());
}

}  // namespace torchscan
