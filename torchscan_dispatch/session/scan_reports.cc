// The reports of a Session: the operator and module views, layer rows,
// traffic, memory, trace, and the scan report that holds them all.
#include "torchscan_dispatch/session/state.h"

#include "reports/row_encoders.h"
#include "reports/scan_report.h"

namespace torchscan {

namespace {

// Whether module handlers' results apply to `p`: C++ handlers
// (SetModuleHandler) run on any set; results handed over after the scan
// (SetModuleResultsJson) are the unfiltered set's.
bool HasHandlers(const Session::State& s, const Planned& p) {
  return !s.module_handlers.empty() || p.handlers.has_value();
}

// The three report parts of one set of calls.
nlohmann::json FlopJson(Session::State& s, Planned& p) {
  const Folded* folded = p.set->folded();
  return reports::FlopReportJson(TallyOperatorView(p.set->events(), p.set->label_sets, p.Plan(s.catalog, s.overrides),
                                                   s.catalog, s.overrides, s.Context(), nullptr,
                                                   folded ? &folded->operators : nullptr));
}

std::vector<reports::LayerTally> LayerTallies(Session::State& s, Planned& p, bool handlers = true,
                                              bool operator_view = true);

nlohmann::json ModuleJson(Session::State& s, Planned& p) {
  const Folded* folded = p.set->folded();
  reports::ModuleTally t = folded ? TallyModuleView(p.set->events(), p.ModulePlan(s.catalog), s.catalog, s.Context(),
                                                    nullptr, &folded->modules)
                                  : FinishModuleView(p.Modules(s.catalog).sums, s.Context());
  if (HasHandlers(s, p)) {
    // LayerTallies applies the handlers to the layers; the totals take them from the built-in rows.
    std::vector<reports::LayerTally> layers = LayerTallies(s, p, /*handlers=*/false);
    ApplyModuleHandlers(p.Handlers(s.module_handlers, s.catalog), layers, &t);
  }
  return reports::ModuleReportJson(t);
}

// Every layer call's tally: its own calls in both views and its output's
// field; with `handlers`, the module handlers' estimates applied; without
// `operator_view`, the operator view's per-layer figures left at zero.
std::vector<reports::LayerTally> LayerTallies(Session::State& s, Planned& p, bool handlers, bool operator_view) {
  const EventSet& set = *p.set;
  const auto& scopes = set.scopes;
  if (scopes.empty()) return {};  // no module calls: no pass over the calls
  const int64_t size = static_cast<int64_t>(set.events().size());
  std::vector<reports::LayerTally> layers(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) {
    layers[i].path = scopes[i].path;
    layers[i].call_index = scopes[i].call_index;
    layers[i].parent = scopes[i].parent;
    layers[i].depth = scopes[i].parent >= 0 ? layers[scopes[i].parent].depth + 1 : 0;
    layers[i].failed = scopes[i].failed;
    layers[i].thread = scopes[i].thread;
    if (scopes[i].request >= 0) layers[i].request = set.requests[scopes[i].request];
  }
  // Streaming scans: the folded module calls' values and fields come from the folds.
  const Folded* folded = set.folded();
  auto folded_row = [&](size_t i) -> const FoldedRow* {
    return folded && i < folded->scopes.size() && folded->scopes[i].folded ? &folded->scopes[i] : nullptr;
  };
  for (size_t i = 0; i < scopes.size(); ++i) {
    if (const FoldedRow* f = folded_row(i)) StartRow(layers[i], *f);
  }
  {
    OperatorSums op_sums;  // the totals are FlopJson's; only the rows are wanted here
    ModuleSums module_sums;
    if (operator_view) {
      AccumulateOperatorView(set.events(), set.label_sets, p.Plan(s.catalog, s.overrides), s.catalog, s.overrides,
                             op_sums, TallyRows{&layers});
    }
    if (folded) {
      AccumulateModuleView(set.events(), p.ModulePlan(s.catalog), s.catalog, module_sums, TallyRows{&layers});
    } else {
      // The pass the module report shares; each row starts from zero here.
      const auto& pass = p.Modules(s.catalog).scopes;
      for (size_t i = 0; i < scopes.size(); ++i) {
        for (int m = 1; m < 4; ++m) {
          layers[i].known[m] = pass[i].known[m];
          layers[i].complete[m] = pass[i].complete[m];
        }
      }
    }
  }
  std::vector<FieldQuery> queries(scopes.size());
  for (size_t i = 0; i < scopes.size(); ++i) {
    queries[i] = {scopes[i].end_event < 0 ? size : scopes[i].end_event, scopes[i].outputs};
  }
  std::vector<std::optional<Field>> fields(scopes.size());
  if (!folded) {
    fields = ComputeFields(set.events(), p.ModulePlan(s.catalog), s.catalog, queries);
  } else {
    // Each thread's calls continue the data flow its folds left.
    for (const EventSet::ThreadFlow& flow : set.flows) {
      std::vector<size_t> mine;
      std::vector<FieldQuery> asked;
      for (size_t i = 0; i < scopes.size(); ++i) {
        if (folded_row(i) || scopes[i].begin_event < static_cast<int64_t>(flow.begin) ||
            scopes[i].begin_event > static_cast<int64_t>(flow.end) ||
            (set.flows.size() > 1 && scopes[i].thread != flow.thread)) {
          continue;
        }
        mine.push_back(i);
        asked.push_back(queries[i]);
      }
      FieldFlow state = flow.fields;
      auto answers = state.Run(set.events(), flow.begin, flow.end, p.ModulePlan(s.catalog), s.catalog, asked);
      for (size_t k = 0; k < mine.size(); ++k) fields[mine[k]] = std::move(answers[k]);
    }
    for (size_t i = 0; i < scopes.size(); ++i) {
      if (const FoldedRow* f = folded_row(i)) fields[i] = f->field;
    }
  }
  if (set.memory != nullptr && set.memory->enabled) {
    const MemoryResult& memory = p.Memory(s.catalog);
    for (size_t i = 0; i < scopes.size(); ++i) {
      layers[i].memory = true;
      layers[i].memory_status = memory.scopes[i].status;
      layers[i].peak_memory = memory.scopes[i].peak;
      layers[i].allocated_bytes = memory.scopes[i].allocated;
    }
  }
  for (size_t i = 0; i < scopes.size(); ++i) SetLayerField(layers[i], fields[i]);
  if (handlers && HasHandlers(s, p)) ApplyModuleHandlers(p.Handlers(s.module_handlers, s.catalog), layers);
  return layers;
}

// A tally's resolved results (reports/layers.h, Note [One layer-row writer])
// as the public values.
LayerRow RowOf(reports::LayerTally& l, const std::string& scope) {
  LayerRow row;
  for (int m = 0; m < 4; ++m) {
    const reports::LayerMetricResult r = reports::LayerMetricOf(l, m, scope, true);
    row.status[m] = r.status;
    row.known[m] = r.known;
    row.owner[m] = l.owner[m];
    if (r.custom != reports::LayerTally::Custom::kNone) {
      row.ownership[m] =
          r.custom == reports::LayerTally::Custom::kSubtree ? MetricOwnership::kSubtree : MetricOwnership::kModuleCall;
      row.method[m] = std::string(r.method);
    }
  }
  for (int k = 0; k < 3; ++k) {
    const reports::LayerFieldResult r = reports::LayerFieldOf(l, k);
    LayerRow::Field& f = row.fields[k];
    f.status = r.status;
    f.value = r.value;
    f.not_applicable = r.not_applicable;
    f.reason = std::string(r.reason);
    if (r.axes) {
      for (const auto& a : l.field_axes) f.axes.emplace_back(a.dim, a.values[k]);
    }
  }
  row.path = std::move(l.path);
  row.call_index = l.call_index;
  row.parent = l.parent;
  row.depth = l.depth;
  row.failed = l.failed;
  row.thread = l.thread;
  row.request = std::move(l.request);
  row.memory = l.memory;
  row.memory_status = l.memory_status;
  row.peak_memory = l.peak_memory;
  row.allocated_bytes = l.allocated_bytes;
  return row;
}

bool Unfiltered(const ReportFilter& f) { return f.threads.empty() && f.requests.empty(); }

}  // namespace

namespace {

// A streaming scan's folded calls are sums by thread, not by request.
absl::Status CheckFilter(const Session::State& s, const ReportFilter& filter) {
  if (!s.options.streaming || filter.requests.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "torchscan: a streaming scan keeps each request's totals (the scan report's \"requests\"), not its calls; "
      "filter by request in a full scan (streaming off)");
}

// One report part of a stopped scan's calls (all of them, or those `filter` keeps).
absl::StatusOr<std::string> StoppedReport(Session::State& s, const ReportFilter& filter,
                                          absl::FunctionRef<nlohmann::json(Planned&)> part) {
  if (s.phase != Phase::kStopped) {
    return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
  }
  if (auto st = CheckFilter(s, filter); !st.ok()) return st;
  if (Unfiltered(filter)) return reports::DumpJson(part(s.Calls()));  // counts past 2^64 - 1 exact
  Planned p{s.Gather(filter)};
  return reports::DumpJson(part(p));
}

}  // namespace

StatusOr<std::string> Session::FlopReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    return StoppedReport(*state_, filter, [&](Planned& p) { return FlopJson(*state_, p); });
  }());
}

StatusOr<std::string> Session::ModuleReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    return StoppedReport(*state_, filter, [&](Planned& p) { return ModuleJson(*state_, p); });
  }());
}

StatusOr<std::string> Session::TrafficJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    if (state_->options.streaming) {
      return absl::InvalidArgumentError(
          "torchscan: the traffic view values every call; a streaming scan keeps sums: start a full scan "
          "(streaming off) for it");
    }
    return StoppedReport(*state_, filter, [&](Planned& p) {
      State& s = *state_;
      const TrafficResult t = ComputeTraffic(p.set->events(), p.Plan(s.catalog, s.overrides), s.catalog, s.overrides);
      return torchscan::TrafficJson(p.set->events(), p.set->scopes, t, s.catalog);
    });
  }());
}

// The memory report of the whole scan (ScanOptions::memory).
static absl::StatusOr<nlohmann::json> MemoryPart(Session::State& s, Planned& p) {
  if (!s.options.memory) {
    return absl::FailedPreconditionError(
        "torchscan: this scan did not attribute memory; start it with "
        "memory=True (Python) or ScanOptions::memory = true (C++)");
  }
  if (p.set->memory == nullptr) {
    return absl::InvalidArgumentError(
        "torchscan: the memory report covers the whole scan; ask for it without a filter");
  }
  return MemoryJson(p.Memory(s.catalog), s.options.scope);
}

StatusOr<std::string> Session::MemoryReportJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    absl::StatusOr<nlohmann::json> j = MemoryPart(s, s.Calls());
    if (!j.ok()) return j.status();
    return reports::DumpJson(*j);
  }());
}

StatusOr<std::string> Session::TraceJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the trace is available once the scan has stopped");
    }
    if (!s.options.timestamps) {
      return absl::FailedPreconditionError(
          "torchscan: this scan took no timestamps; start it with trace=True (Python) "
          "or ScanOptions::timestamps = true (C++)");
    }
    Planned& p = s.Calls();
    const TrafficResult t = ComputeTraffic(p.set->events(), p.Plan(s.catalog, s.overrides), s.catalog, s.overrides);
    // One track per thread, labelled with its number (the report's
    // threads[].thread) and, when it has one, its name.
    std::vector<TraceThread> threads;
    int64_t stopped_ns = s.recorder.stopped_ns;
    if (s.options.threads == Threads::kCurrent) {
      threads.push_back({1, "scanned thread"});
    } else {
      for (const auto& log : s.logs) {
        threads.push_back({log->number, log->name.empty() ? absl::StrCat("thread ", log->number)
                                                          : absl::StrCat(log->name, " (thread ", log->number, ")")});
      }
      stopped_ns = s.all->stopped_ns();
    }
    return reports::DumpJson(torchscan::TraceJson(*p.set, threads, stopped_ns, t, s.catalog));
  }());
}

// Streaming scans that aggregate layer rows drop each module call once folded.
static absl::Status CheckPerCallRows(const Session::State& s) {
  if (!s.options.streaming || !s.Aggregated()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "torchscan: this streaming scan aggregates layer rows across requests (ScanOptions::layer_rows), so it "
      "keeps no row per module call; read ScanReportJson's \"aggregate\" (or the last requests' rows, "
      "ScanOptions::per_request_rows), or scan with LayerRowMode::kPerCall");
}

StatusOr<std::string> Session::LayersJson(const ReportFilter& filter, bool operator_view) {
  return Public([&]() -> absl::StatusOr<std::string> {
    if (auto st = CheckPerCallRows(*state_); !st.ok()) return st;
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    if (auto st = CheckFilter(s, filter); !st.ok()) return st;
    // The rows' text as the one writer produces it (Note [One layer-row writer]).
    std::string out;
    auto write = [&](Planned& p) {
      reports::AppendLayersJson(LayerTallies(s, p, /*handlers=*/true, operator_view), s.options.scope,
                                {true, true, true, true}, out, operator_view);
    };
    if (Unfiltered(filter)) {
      write(s.Calls());
    } else {
      Planned p{s.Gather(filter)};
      write(p);
    }
    return out;
  }());
}

StatusOr<std::string> Session::LayersPickle(bool operator_view) {
  return Public([&]() -> absl::StatusOr<std::string> {
    if (auto st = CheckPerCallRows(*state_); !st.ok()) return st;
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    std::string out;
    reports::AppendLayersPickle(LayerTallies(s, s.Calls(), /*handlers=*/true, operator_view), s.options.scope,
                                {true, true, true, true}, out, operator_view);
    return out;
  }());
}

StatusOr<std::string> Session::ReportsPickle(bool flop, bool module) {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    Planned& p = s.Calls();
    std::string out;
    reports::PickleStream stream(out);
    stream.BeginArray();
    if (flop) reports::AppendJsonValue(FlopJson(s, p), stream);
    if (module) reports::AppendJsonValue(ModuleJson(s, p), stream);
    stream.EndArray();
    stream.Finish();
    return out;
  }());
}

StatusOr<std::vector<LayerRow>> Session::LayerRows(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::vector<LayerRow>> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) {
      return absl::FailedPreconditionError("torchscan: the report is available once the scan has stopped");
    }
    if (auto st = CheckFilter(s, filter); !st.ok()) return st;
    if (auto st = CheckPerCallRows(s); !st.ok()) return st;
    std::vector<reports::LayerTally> tallies;
    if (Unfiltered(filter)) {
      tallies = LayerTallies(s, s.Calls());
    } else {
      Planned p{s.Gather(filter)};
      tallies = LayerTallies(s, p);
    }
    std::vector<LayerRow> rows;
    rows.reserve(tallies.size());
    for (reports::LayerTally& l : tallies) rows.push_back(RowOf(l, s.options.scope));
    return rows;
  }());
}

StatusOr<std::string> Session::ScanReportJson(const ReportFilter& filter) {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    std::lock_guard<std::mutex> lock(s.report_mu);
    if (s.phase == Phase::kIdle) return absl::FailedPreconditionError("torchscan: the scan has not started");
    if (s.phase == Phase::kActive && s.options.threads == Threads::kCurrent) {
      return absl::FailedPreconditionError(
          "torchscan: a scan of the current thread reports once it has stopped; snapshots while it runs "
          "need ScanOptions::threads = Threads::kAll");
    }
    const bool snapshot = s.phase == Phase::kActive;
    if (auto st = CheckFilter(s, filter); !st.ok()) return st;
    // Threads keep recording meanwhile; folding waits until the report is built.
    struct PauseFolds {
      std::atomic<int>& n;
      explicit PauseFolds(std::atomic<int>& c) : n(c) { ++n; }
      ~PauseFolds() { --n; }
    } pause(*s.folds_paused);
    // Every part of the report reads the same cut of each thread's log.
    const std::vector<Cut> cuts = s.options.threads == Threads::kAll ? s.Cuts() : std::vector<Cut>();
    Planned fresh;
    Planned& p = !snapshot && Unfiltered(filter) ? s.Calls() : (fresh.set = s.Gather(filter, &cuts), fresh);
    const bool op_view = s.options.operator_view && !s.options.structure;
    const bool module_view = s.options.module_view && !s.options.structure;
    reports::ScanReportParts j;
    j.scope = s.options.scope;
    j.metrics = {op_view, module_view, module_view, module_view};
    j.context = {{"torch_version", TORCHSCAN_BUILT_TORCH_VERSION},
                 {"threads", s.options.threads == Threads::kAll ? "all" : "current"},
                 {"analysis_mode", s.options.structure ? "structure" : "full"},
                 {"snapshot", snapshot},
                 {"in_flight_calls", p.set->in_flight},
                 {"streaming", s.options.streaming},
                 // "aggregated": layer rows across requests in "aggregate" (aggregate.h).
                 {"layer_rows", s.Aggregated() ? "aggregated" : "per_call"},
                 {"unattributed_calls", s.unattributed}};
    // Distributed jobs (communication.h): this rank's place and its collectives' bytes.
    if (const nlohmann::json d = DistributedContextJson(); !d.is_null()) j.context.update(d);
    {
      CommunicationSums comm = p.set->folded() ? p.set->folded()->communication : CommunicationSums();
      AccumulateCommunication(p.set->events(), s.catalog, p.set->first_index, comm);
      j.communication = FinishCommunication(std::move(comm), s.options.scope);
    }
    j.operator_flops = op_view ? FlopJson(s, p) : nlohmann::json();
    if (s.options.memory && p.set->memory != nullptr) j.memory = *MemoryPart(s, p);
    j.module_report = module_view ? ModuleJson(s, p) : nlohmann::json();
    std::vector<reports::LayerTally> layers = LayerTallies(s, p);
    // Per thread and per request: each one's own calls, valued alone.
    // `whole`: the part is every call of the report, whose views are valued above.
    auto total_of = [&](Planned& part, bool whole) {
      nlohmann::json t = nlohmann::json::object();
      if (op_view) t["operator_flops"] = whole ? j.operator_flops["total"] : FlopJson(s, part)["total"];
      if (module_view) {
        // Keep the report alive while iterating: items() of a temporary's member dangles.
        const nlohmann::json module = whole ? j.module_report : ModuleJson(s, part);
        for (const auto& [name, metric] : module["totals"].items()) t[name] = metric;
      }
      return t;
    };
    std::vector<std::pair<int64_t, std::string>> threads;
    if (s.options.threads == Threads::kCurrent) {
      threads.emplace_back(1, "");
    } else {
      for (const Cut& cut : cuts) {
        // Threads that ran ATen work.
        if (cut.count > 0 || cut.folded > 0) threads.emplace_back(cut.log->number, cut.log->name);
      }
    }
    size_t kept = 0;
    for (const auto& [number, name] : threads) kept += filter.threads.empty() || filter.threads.count(number);
    for (const auto& [number, name] : threads) {
      if (!filter.threads.empty() && !filter.threads.count(number)) continue;
      // The only thread with calls holds all of them: its totals are the report's, not valued again.
      const bool whole = kept == 1;
      Planned part;
      if (!whole) {
        ReportFilter one = filter;
        one.threads = {number};
        part.set = s.Gather(one, &cuts);
      }
      const EventSet& set = whole ? *p.set : *part.set;
      const int64_t folded_calls = set.folded() ? set.folded()->calls : 0;
      j.threads.push_back({{"thread", number},
                           {"name", name},
                           {"calls", static_cast<int64_t>(set.events().size()) + folded_calls},
                           {"totals", total_of(part, whole)}});
    }
    // Per request, in one pass: the calls re-scoped by request, tallied like layers.
    std::vector<reports::LayerTally> request_rows;
    std::vector<int64_t> request_calls;
    if (!p.set->requests.empty()) {
      Planned by_request{p.set->ByRequest()};
      std::vector<reports::LayerTally>& rows = request_rows;
      rows.resize(by_request.set->scopes.size());
      std::vector<int64_t>& calls = request_calls;
      calls.assign(rows.size(), 0);
      // Streaming scans: the folded requests' values and calls first.
      if (const Folded* f = by_request.set->folded()) {
        for (size_t q = 0; q < rows.size() && q < f->scopes.size(); ++q) {
          StartRow(rows[q], f->scopes[q]);
          calls[q] = f->scopes[q].calls;
        }
      }
      if (op_view) {
        OperatorSums sums;
        AccumulateOperatorView(by_request.set->events(), by_request.set->label_sets,
                               by_request.Plan(s.catalog, s.overrides), s.catalog, s.overrides, sums, TallyRows{&rows});
      }
      if (module_view) {
        ModuleSums sums;
        AccumulateModuleView(by_request.set->events(), by_request.ModulePlan(s.catalog), s.catalog, sums,
                             TallyRows{&rows});
      }
      for (size_t i = 0; i < by_request.set->events().size(); ++i) {
        const int32_t q = by_request.set->events()[i].scope;
        if (q >= 0) ++calls[q];
      }
    }
    if (s.Aggregated()) {
      // The folds' aggregate, and the calls still held aggregated alike;
      // "layers" and "requests": the last requests kept whole.
      LayerAggregate aggregate;
      aggregate.keep_requests = s.options.per_request_rows;
      if (const Folded* f = p.set->folded()) aggregate.Merge(f->aggregate);
      AggregateBatch held;
      held.events = &p.set->events();
      held.scopes = &p.set->scopes;
      held.scope_rows = &layers;
      held.request_ids = p.set->requests;
      held.request_seqs = p.set->request_seqs;
      held.request_rows = &request_rows;
      held.request_calls = request_calls;
      held.times = p.set->times;
      aggregate.Add(held);
      j.aggregate = aggregate.Json(s.options.scope, j.metrics, held.times != nullptr);
      for (const LayerAggregate::KeptRequest& k : aggregate.kept()) {
        j.requests.push_back(reports::RequestJson(k.id, k.calls, k.totals, j));
      }
      layers = aggregate.KeptLayers();
    } else {
      for (size_t q = 0; q < request_rows.size(); ++q) {
        j.requests.push_back(reports::RequestJson(p.set->requests[q], request_calls[q], request_rows[q], j));
      }
    }
    j.layers = std::move(layers);
    // Thread names and request ids are caller bytes: never fail on bad UTF-8 (DumpJson).
    return reports::ScanReportText(j);
  }());
}

}  // namespace torchscan
