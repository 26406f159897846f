#include "torchscan_dispatch/analyses/module_handlers.h"

#include <exception>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "torchscan_dispatch/analyses/operator_view.h"

namespace torchscan {

namespace {

// kLayerMetricNames index of a module-view metric name, or -1.
int MetricIndex(const std::string& name) {
  for (int m = 1; m < 4; ++m) {
    if (name == reports::kLayerMetricNames[m]) return m;
  }
  return -1;
}

// Whether scope `s` is `q` or runs inside it.
bool InCall(const std::vector<Recorder::Scope>& scopes, int32_t s, int32_t q) {
  for (; s >= 0; s = scopes[static_cast<size_t>(s)].parent) {
    if (s == q) return true;
  }
  return false;
}

std::string Label(const std::string& path) { return path.empty() ? "(root)" : path; }

void Evaluate(const RegisteredModuleHandler& h, const ModuleCall& call,
              std::array<std::optional<HandlerOutcome::Supplied>, 4>& supplied,
              std::vector<std::pair<int, reports::Diagnostic>>& diagnostics) {
  std::vector<int> requested;
  for (const std::string& name : h.metrics) requested.push_back(MetricIndex(name));
  if (requested.empty()) requested = {1, 2, 3};
  auto note = [&](int m, const char* code, const char* severity, const std::string& message) {
    const std::string metric = m > 0                   ? reports::kLayerMetricNames[m]
                               : requested.size() == 1 ? reports::kLayerMetricNames[requested[0]]
                                                       : "module_view";
    diagnostics.push_back({m,
                           {code, severity, metric, absl::StrCat(Label(call.path), ": ", message), std::nullopt,
                            call.path, std::nullopt}});
  };
  auto unavailable = [&](MetricOwnership ownership, std::string method) {
    return HandlerOutcome::Supplied{MetricStatus::kUnavailable, 0, ownership, std::move(method)};
  };
  auto fail = [&](const char* code, const std::string& message) {
    for (int m : requested) supplied[m] = unavailable(h.ownership, h.method);
    note(0, code, "error", absl::StrCat(message, "; the requested estimates are unavailable"));
  };
  const std::string name = h.method.substr(sizeof("custom_module_handler:") - 1);
  ModuleEstimate estimate;
  try {
    estimate = h.fn(call);
  } catch (const std::exception& e) {
    fail("custom_handler_error", absl::StrCat("its handler ", name, " threw: ", e.what()));
    return;
  }
  for (const auto& [metric, _] : estimate.metrics) {
    if (MetricIndex(metric) < 0) {
      fail("custom_handler_invalid", absl::StrCat("its handler ", name, " returned the unsupported metric name \"",
                                                  metric, "\" (handlers supply module_flops, macs, dmas)"));
      return;
    }
  }
  for (const auto& [metric, e] : estimate.metrics) {
    const int m = MetricIndex(metric);
    const std::string method = e.method.empty() ? h.method : absl::StrCat(h.method, ":", e.method);
    if (e.status != MetricStatus::kUnavailable && !e.value.exact()) {
      supplied[m] = unavailable(e.ownership, h.method);
      note(m, "custom_metric_invalid", "error",
           absl::StrCat("its handler's ", metric, " value is invalid (",
                        e.value.state() == Count::State::kNegative ? "negative" : "past 2^128 - 1",
                        "); the estimate is unavailable"));
      continue;
    }
    if (e.status == MetricStatus::kPartial) {
      note(m, "custom_metric_partial", "warning",
           absl::StrCat("its handler's ", metric, " estimate is partial: ", e.value.Digits(), " is a lower bound"));
    } else if (e.status == MetricStatus::kUnavailable) {
      note(m, "custom_metric_unavailable", "warning",
           absl::StrCat("its handler says its ", metric, " estimate is unavailable"));
    }
    supplied[m] = HandlerOutcome::Supplied{e.status, e.status == MetricStatus::kUnavailable ? Count(0) : e.value,
                                           e.ownership, method};
  }
  for (int m : requested) {
    if (h.metrics.empty() || supplied[m]) continue;
    supplied[m] = unavailable(h.ownership, h.method);
    note(m, "custom_metric_unavailable", "warning",
         absl::StrCat("its handler owns ", reports::kLayerMetricNames[m],
                      " but its estimate leaves it out; the estimate is unavailable"));
  }
}

}  // namespace

HandlerOutcome RunModuleHandlers(const std::map<std::string, RegisteredModuleHandler>& handlers, const CallSet& set,
                                 OpCatalog& catalog) {
  HandlerOutcome out;
  const auto& scopes = set.scopes;
  const size_t n = scopes.size();
  out.supplied.resize(n);
  out.diagnostics.resize(n);
  std::vector<const RegisteredModuleHandler*> handler_of(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    auto it = handlers.find(scopes[i].path);
    if (it == handlers.end() || scopes[i].failed) continue;  // a forward that raised runs no handler
    handler_of[i] = &it->second;
    out.any = true;
  }
  if (!out.any) return out;
  std::vector<ModuleCall> calls(n);
  for (size_t i = 0; i < n; ++i) {
    calls[i].path = scopes[i].path;
    calls[i].call_index = scopes[i].call_index;
    calls[i].depth = scopes[i].parent >= 0 ? calls[static_cast<size_t>(scopes[i].parent)].depth + 1 : 0;
  }
  const auto& events = set.events();
  // Handlers see each tensor's address as its identity, comparable across
  // the calls they are given.
  for (size_t k = 0; k < events.size(); ++k) {
    const Event& e = events[k];
    const ResolvedCall* rc = nullptr;
    for (int32_t q = e.scope; q >= 0; q = scopes[static_cast<size_t>(q)].parent) {
      if (handler_of[static_cast<size_t>(q)] == nullptr) continue;
      const OpInfo& info = catalog.Get(e.op());
      const bool nested = e.parent >= 0 && InCall(scopes, events[static_cast<size_t>(e.parent)].scope, q);
      if (rc == nullptr) rc = &out.calls.emplace_back(e);
      calls[static_cast<size_t>(q)].ops.push_back(
          {info.name, FormulaCall(info, rc->args(), rc->outputs()), q == e.scope, nested});
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (handler_of[i] != nullptr) Evaluate(*handler_of[i], calls[i], out.supplied[i], out.diagnostics[i]);
  }
  return out;
}

void ApplyModuleHandlers(const HandlerOutcome& outcome, std::vector<reports::LayerTally>& layers,
                         reports::ModuleTally* totals) {
  if (!outcome.any || outcome.supplied.size() != layers.size()) return;
  using Custom = reports::LayerTally::Custom;
  const size_t n = layers.size();
  std::vector<std::array<Count, 4>> native_known(n);
  std::vector<std::array<bool, 4>> native_complete(n);
  for (size_t i = 0; i < n; ++i) {
    native_known[i] = layers[i].known;
    native_complete[i] = layers[i].complete;
    for (int m = 0; m < 4; ++m) native_complete[i][m] = native_complete[i][m] && !layers[i].failed;
  }
  std::array<bool, 4> changed = {false, false, false, false};
  for (size_t i = 0; i < n; ++i) {
    reports::LayerTally& l = layers[i];
    const int32_t p = l.parent;
    for (int m = 1; m < 4; ++m) {
      if (p >= 0 && static_cast<size_t>(p) < i) {
        const auto& parent_supplied = outcome.supplied[static_cast<size_t>(p)][m];
        if (layers[static_cast<size_t>(p)].owner[m] >= 0) {
          l.owner[m] = layers[static_cast<size_t>(p)].owner[m];
        } else if (parent_supplied && parent_supplied->ownership == MetricOwnership::kSubtree) {
          l.owner[m] = p;
        }
      }
      if (l.owner[m] >= 0) {  // the outermost owner wins
        changed[m] = true;
        continue;
      }
      const auto& s = outcome.supplied[i][m];
      if (!s) continue;
      l.custom[m] = s->ownership == MetricOwnership::kSubtree ? Custom::kSubtree : Custom::kModuleCall;
      l.custom_method[m] = s->method;
      l.custom_unavailable[m] = s->status == MetricStatus::kUnavailable;
      l.known[m] = s->known;
      l.complete[m] = s->status == MetricStatus::kComplete;
      changed[m] = true;
    }
  }
  if (totals == nullptr) return;
  for (int m = 1; m < 4; ++m) {
    if (!changed[m]) continue;
    const int t = m - 1;
    bool unattributed = false;  // other threads' calls left this metric uncounted
    for (const auto& d : totals->diagnostics) {
      unattributed = unattributed || (d.code == "unattributed_thread_work" &&
                                      (d.metric == "module_view" || d.metric == reports::kModuleMetricNames[t]));
    }
    // What the layers' built-in values do not explain (calls outside every
    // module call) is kept as it was.
    Count rows = 0;
    bool rows_complete = true;
    for (size_t i = 0; i < n; ++i) {
      AddCount(rows, native_known[i][m]);
      rows_complete = rows_complete && native_complete[i][m];
    }
    const Count::Wide total = totals->known[t].wide(), listed = rows.wide();
    Count known = Count::FromWide(total > listed ? total - listed : 0);
    bool complete = !unattributed && (totals->complete[t] || !rows_complete);
    for (size_t i = 0; i < n; ++i) {
      const reports::LayerTally& l = layers[i];
      if (l.owner[m] >= 0) continue;
      if (!l.custom_unavailable[m]) complete = AddCount(known, l.known[m]) && complete;
      complete = complete && l.complete[m] && !l.custom_unavailable[m] && !l.failed;
    }
    const bool was = totals->complete[t];
    totals->known[t] = known;
    totals->complete[t] = complete;
    if (complete && !was) {
      // Every call the module view could not value is covered by a handler
      // now: its gap diagnostics ("m is a lower bound") no longer hold.
      auto& ds = totals->diagnostics;
      for (size_t k = ds.size(); k-- > 0;) {
        if (ds[k].metric == reports::kLayerMetricNames[m] && ds[k].op) ds.erase(ds.begin() + static_cast<long>(k));
      }
    }
  }
  // The handlers' diagnostics, one per (code, path, metric) with its number of calls.
  std::map<std::tuple<std::string, std::string, std::string>, size_t> seen;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [m, d] : outcome.diagnostics[i]) {
      if (m > 0 && layers[i].owner[m] >= 0) continue;  // covered: its value is not used
      auto key = std::make_tuple(d.code, *d.path, d.metric);
      auto it = seen.find(key);
      if (it != seen.end()) {
        auto& calls = totals->diagnostics[it->second].calls;
        calls = calls.value_or(1) + 1;
        continue;
      }
      seen[key] = totals->diagnostics.size();
      totals->diagnostics.push_back(d);
    }
  }
}

}  // namespace torchscan
