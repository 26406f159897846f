#include "torchscan_dispatch/analyses/module_handlers.h"

#include <algorithm>
#include <exception>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "formulas/result.h"
#include "torchscan_dispatch/analyses/operator_view.h"

namespace torchscan {

// Note [Opened estimates]
// Some native layers' built-in module-view estimates cover work of child
// modules their forward never calls: nn.MultiheadAttention reads
// out_proj's weights directly, and the Transformer layers' fused fast path
// runs one operator for the whole layer. When a handler is registered for
// such a child, the parent's call would count the child's work once in its
// built-in estimate while the handler never sees a call to value it. The
// parent's built-in estimates are then "opened": unavailable, with an
// expanded_atomic_boundary warning, so the totals say they are incomplete
// instead of silently mixing two conventions. Which calls are such layers is
// known only where the modules are (the Python shim names them, with the
// handled children they cover).

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
    // A one-metric handler's failure is about that metric: not reported where an owner covers it.
    note(requested.size() == 1 ? requested[0] : 0, code, "error",
         absl::StrCat(message, "; the requested estimates are unavailable"));
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

absl::StatusOr<HandlerOutcome> ModuleResultsFromJson(std::string_view json,
                                                     const std::vector<Recorder::Scope>& scopes) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("torchscan: module results: ", what));
  };
  if (!j.is_array()) return bad("expected a JSON array of {\"row\", \"metrics\", \"diagnostics\", \"opens\"}");
  const size_t n = scopes.size();
  HandlerOutcome out;
  out.supplied.resize(n);
  out.diagnostics.resize(n);
  out.opens.resize(n);
  auto text = [](const nlohmann::json& o, const char* key) -> std::optional<std::string> {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  for (const nlohmann::json& entry : j) {
    if (!entry.is_object() || !entry.contains("row") || !entry["row"].is_number_unsigned() ||
        entry["row"].get<uint64_t>() >= n) {
      return bad(absl::StrCat("every entry needs \"row\", a layer call's index below ", n));
    }
    const size_t i = entry["row"].get<size_t>();
    const std::string label = Label(scopes[i].path);
    if (auto it = entry.find("metrics"); it != entry.end()) {
      if (!it->is_object()) return bad("\"metrics\" must be an object");
      for (const auto& [name, r] : it->items()) {
        const int m = MetricIndex(name);
        const std::optional<std::string> status = r.is_object() ? text(r, "status") : std::nullopt;
        const std::optional<std::string> scope = r.is_object() ? text(r, "scope") : std::nullopt;
        const std::optional<std::string> method = r.is_object() ? text(r, "method") : std::nullopt;
        // A count up to 2^128 - 1 travels as a decimal string; null or absent: none (unavailable).
        const bool no_count = !r.is_object() || !r.contains("known_value") || r["known_value"].is_null();
        const std::optional<std::string> digits = no_count ? std::nullopt : text(r, "known_value");
        const std::optional<Count> known = no_count ? std::optional<Count>(Count(0))
                                           : digits ? ParseCount(*digits)
                                                    : std::nullopt;
        MetricStatus st = MetricStatus::kUnavailable;
        bool status_ok = false;
        for (MetricStatus c : {MetricStatus::kComplete, MetricStatus::kPartial, MetricStatus::kUnavailable}) {
          if (status && *status == MetricStatusName(c)) st = c, status_ok = true;
        }
        if (m < 0 || !status_ok || !method || !known || (scope != "module_call" && scope != "subtree")) {
          return bad(absl::StrCat("row ", i, " metric \"", name,
                                  "\" must be one of module_flops, macs, dmas with a status, a method, a scope "
                                  "(module_call or subtree) and a known_value as a decimal string up to 2^128 - 1"));
        }
        out.supplied[i][m] = HandlerOutcome::Supplied{
            st, st == MetricStatus::kUnavailable ? Count(0) : *known,
            *scope == "subtree" ? MetricOwnership::kSubtree : MetricOwnership::kModuleCall, *method};
        out.any = true;
      }
    }
    if (auto it = entry.find("diagnostics"); it != entry.end()) {
      if (!it->is_array()) return bad("\"diagnostics\" must be an array");
      for (const nlohmann::json& d : *it) {
        const auto code = d.is_object() ? text(d, "code") : std::nullopt;
        const auto severity = d.is_object() ? text(d, "severity") : std::nullopt;
        const auto metric = d.is_object() ? text(d, "metric") : std::nullopt;
        const auto message = d.is_object() ? text(d, "message") : std::nullopt;
        if (!code || !severity || !metric || !message) {
          return bad(absl::StrCat("row ", i, ": a diagnostic needs code, severity, metric and message strings"));
        }
        out.diagnostics[i].push_back({std::max(MetricIndex(*metric), 0),
                                      {*code, *severity, *metric, absl::StrCat(label, ": ", *message), std::nullopt,
                                       scopes[i].path, std::nullopt}});
        out.any = true;
      }
    }
    if (auto it = entry.find("opens"); it != entry.end()) {
      const auto type = it->is_object() ? text(*it, "type") : std::nullopt;
      HandlerOutcome::Opening opening;
      bool ok = type.has_value() && it->contains("covers") && (*it)["covers"].is_array() && !(*it)["covers"].empty();
      if (ok) {
        opening.type = *type;
        for (const nlohmann::json& c : (*it)["covers"]) {
          ok = ok && c.is_string();
          if (ok) opening.covers.push_back(c.get<std::string>());
        }
      }
      if (!ok) return bad(absl::StrCat("row ", i, ": \"opens\" needs a type and a non-empty list of covered paths"));
      out.opens[i] = std::move(opening);
      out.any = true;
    }
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
  std::vector<std::pair<int, reports::Diagnostic>> opened;  // the opened estimates' diagnostics
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
      if (!s) {
        // Note [Opened estimates]
        if (i < outcome.opens.size() && outcome.opens[i] && !l.failed) {
          const HandlerOutcome::Opening& o = *outcome.opens[i];
          l.opened[m] = true;
          l.known[m] = 0;
          l.complete[m] = false;
          changed[m] = true;
          std::vector<std::string> labels;
          for (const std::string& c : o.covers) labels.push_back(Label(c));
          opened.push_back(
              {m,
               {"expanded_atomic_boundary", "warning", reports::kLayerMetricNames[m],
                absl::StrCat(Label(l.path), ": a handler is registered for ", absl::StrJoin(labels, ", "),
                             ", which this ", o.type, " call covers without calling it (its built-in ",
                             reports::kLayerMetricNames[m],
                             " estimate includes that work); the estimate is opened and its missing work keeps the "
                             "totals incomplete"),
                std::nullopt, l.path, std::nullopt}});
        }
        continue;
      }
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
      complete = complete && l.complete[m] && !l.custom_unavailable[m] && !l.failed;  // opened: not complete
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
  auto add = [&](const reports::Diagnostic& d) {
    auto key = std::make_tuple(d.code, *d.path, d.metric);
    auto it = seen.find(key);
    if (it != seen.end()) {
      auto& calls = totals->diagnostics[it->second].calls;
      calls = calls.value_or(1) + 1;
      return;
    }
    seen[key] = totals->diagnostics.size();
    totals->diagnostics.push_back(d);
  };
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [m, d] : outcome.diagnostics[i]) {
      if (m > 0 && layers[i].owner[m] >= 0) continue;  // covered: its value is not used
      add(d);
    }
  }
  for (const auto& [m, d] : opened) add(d);
}

}  // namespace torchscan
