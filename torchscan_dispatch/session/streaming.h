// Streaming scans (ScanOptions::streaming): memory that does not grow with
// the number of calls. A recorder holds its calls until none of them, no
// module call and no request is open and at least ScanOptions::fold_every
// are held; the next call then has the recorder's Folder fold them into the
// sums the reports are built from, and they are dropped.
//
// What the reports keep is additive over whole call trees: the operator
// and module views' sums (with their gap and issue counts, written as
// diagnostics only when a report is built), the collectives, each module
// call's own values and each request's, and each module call's receptive
// field, answered by a data flow whose state carries over from one fold to
// the next (FieldFlow). So a report of a streaming scan equals that of the
// same scan with every call held (tests/python/api/test_streaming.py), while
// memory grows with module calls and requests, not with operator calls.
//
// What needs every call is refused in streaming scans: memory attribution
// and traces (they time or attribute each call), module handlers and
// deferred caller formulas (they value calls after the scan), and reports
// filtered by request.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "torchscan_dispatch/analyses/aggregate.h"
#include "torchscan_dispatch/analyses/communication.h"
#include "torchscan_dispatch/analyses/module_view.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/analyses/operator_view.h"
#include "torchscan_dispatch/analyses/receptive_field.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// A folded module call's or request's own values (LayerTally order:
// operator_flops, module_flops, macs, dmas).
struct FoldedRow {
  std::array<Count, 4> known = {0, 0, 0, 0};
  std::array<bool, 4> complete = {true, true, true, true};
  bool folded = false;         // this row holds values (its module call or request was folded)
  int64_t calls = 0;           // requests: calls made in it
  std::optional<Field> field;  // module calls: the output's field (nullopt: not seen)
};

// A report row (a module call's or a request's) starting from what its
// folded calls gave; the calls still held are tallied onto it.
inline void StartRow(reports::LayerTally& row, const FoldedRow& folded) {
  row.known = folded.known;
  row.complete = folded.complete;
}

// The sums of the folded calls of one recorder, or of several (EventSet).
struct Folded {
  int64_t calls = 0;
  OperatorSums operators;
  ModuleSums modules;
  CommunicationSums communication;
  std::vector<FoldedRow> scopes;         // by module scope; the scopes closed before the calls held
  std::vector<FoldedRow> requests;       // by request
  std::set<std::string> operators_seen;  // "aten::add.Tensor", for RecordedOperators
  // Recorder::aggregate_layers: the folded module calls and requests, aggregated
  // (scopes and requests above stay empty).
  LayerAggregate aggregate;

  // Adds `other`'s rows for the scopes and requests `scope_at` / `request_at`
  // map them to (-1: left out), and its sums.
  void Add(const Folded& other, const std::vector<int32_t>& scope_at, const std::vector<int32_t>& request_at);
};

// The views' Folder: folds calls into the sums each view reports.
class ViewFolder final : public Folder {
 public:
  // `paused`: while it is nonzero no fold starts (a snapshot is reading the
  // threads' logs at cuts it took, see Session::ScanReportJson).
  // `fields` false: the scan has no module scopes (ScanOptions::module_scopes),
  // so folds skip the receptive-field data flow.
  ViewFolder(const Overrides* overrides, std::shared_ptr<const std::atomic<int>> paused = nullptr, bool fields = true)
      : overrides_(overrides), paused_(std::move(paused)), fields_wanted_(fields) {}
  bool paused() const override { return paused_ && paused_->load() != 0; }
  void Fold(const Recorder& r) override;
  size_t folded_scopes() const override { return folded_.scopes.size(); }
  const Folded& folded() const { return folded_; }
  // Recorder::aggregate_layers: how many requests keep their own rows, and
  // the thread number they name (set before the first fold).
  LayerAggregate& aggregate() { return folded_.aggregate; }
  int64_t thread = 0;
  // Each call's receptive-field state after the folded calls.
  const FieldFlow& fields() const { return fields_; }
  // Recorder::aggregate_layers: the data flow starts afresh after a fold.
  // Nothing is open then, so the next requests' tensors are made after it;
  // a served model's activations take ever new addresses (large ones are
  // mapped anew), and a flow kept across folds would grow with the requests.
  void ForgetFields() override { fields_ = FieldFlow(); }

 private:
  const Overrides* overrides_;  // the session's caller formulas (fixed while the scan runs)
  std::shared_ptr<const std::atomic<int>> paused_;
  bool fields_wanted_;
  OpCatalog catalog_;  // this recorder's own: folds run on the recording thread
  Folded folded_;
  std::unordered_set<c10::OperatorHandle> seen_;  // operators named in folded_.operators_seen
  FieldFlow fields_;
};

// The views' folder of a streaming recorder (Recorder::folder is always one).
inline const ViewFolder& FolderOf(const Recorder& r) { return static_cast<const ViewFolder&>(*r.folder); }

}  // namespace torchscan
