// Layer rows aggregated across requests (ScanOptions::layer_rows,
// LayerRowMode::kAggregated, the default of all-threads scans): a server's
// report and memory bounded by its model, not by its traffic.
//
// A group is one module identity within its request -- full path and call
// index counted from the request's start (or, outside requests, from the
// top-level module call's) -- and one call signature: the operators,
// shapes, dtypes and scalars of every call made inside it. Calls of
// different shapes or batch sizes are never merged. A group holds its call
// count and the sums of every metric. Requests are summarised by the
// distribution of their totals and by class (signature and totals), which
// names the requests that differ from the common case. The last N
// requests' own rows are kept on request (ScanOptions::per_request_rows).
//
// Streaming scans aggregate each fold (streaming.h) and drop the module
// calls and requests they folded; reports aggregate the calls still held
// the same way, so what a report says does not depend on when folds ran.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/functional/function_ref.h"

#include "reports/layers.h"
#include "torchscan_dispatch/analyses/receptive_field.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// A receptive-field answer written onto a layer row (nullopt: not seen).
void SetLayerField(reports::LayerTally& row, const std::optional<Field>& field);

// Finished module calls and requests of one set of calls, to be aggregated.
struct AggregateBatch {
  const BlockLog<Event>* events = nullptr;
  int64_t base = 0;  // a scope's begin/end_event minus base indexes `events`
  const std::vector<Recorder::Scope>* scopes = nullptr;
  int32_t first_scope = 0;  // scopes [first_scope, size) are this batch's
  // By scope - first_scope: path, call_index, parent (a scope index, or
  // -1), depth, failed, values and receptive field.
  const std::vector<reports::LayerTally>* scope_rows = nullptr;
  // By Event::request (and Scope::request) - first_request.
  int32_t first_request = 0;
  std::vector<std::string> request_ids;
  std::vector<int64_t> request_seqs;
  const std::vector<reports::LayerTally>* request_rows = nullptr;  // each request's totals
  std::vector<int64_t> request_calls;
  const std::vector<int64_t>* times = nullptr;  // Recorder::call_times() of `events` (nullptr: untimed)
  int64_t thread = 0;
};

// Values seen once per request: exact while few distinct values were seen
// (a served model's totals take one or a few), then in buckets 1/64 of an
// octave wide (about 1.1%; "exact": false). Memory is bounded either way.
class Distribution {
 public:
  void Add(Count::Wide v, int64_t n = 1);
  void Merge(const Distribution& o);
  int64_t count() const { return n_; }
  // {"requests", "min", "median", "p99", "max", "exact"} (nearest rank).
  nlohmann::json Json() const;

 private:
  static constexpr size_t kExactValues = 4096;
  void Coarsen();
  static int32_t Bucket(Count::Wide v);
  static Count::Wide BucketFloor(int32_t b);
  std::map<Count::Wide, int64_t> exact_;
  std::map<int32_t, int64_t> buckets_;
  bool coarse_ = false;
  int64_t n_ = 0;
  Count::Wide min_ = 0, max_ = 0;
};

class LayerAggregate {
 public:
  // Requests whose own rows are kept (the last ones; SIZE_MAX: all of them).
  size_t keep_requests = 0;

  void Add(const AggregateBatch& batch);
  void Merge(const LayerAggregate& other);
  int64_t requests() const { return requests_; }

  struct KeptRequest {
    int64_t seq = 0;
    std::string id;
    int64_t calls = 0;
    reports::LayerTally totals;               // known / complete
    std::vector<reports::LayerTally> layers;  // parents index this list
  };
  // Oldest first.
  const std::deque<KeptRequest>& kept() const { return kept_; }
  // The kept requests' rows as one layer list (parents re-indexed).
  std::vector<reports::LayerTally> KeptLayers() const;

  // The report's "aggregate" field.
  nlohmann::json Json(const std::string& scope, const std::array<bool, 4>& requested, bool timed) const;

 private:
  struct Group {
    reports::LayerTally row;  // sums; parent: a group index
    uint64_t signature = 0;
    nlohmann::json input;  // the first call's first tensor: {"shape", "dtype"} (null: none)
    int64_t calls = 0;
    std::pair<int64_t, int64_t> order;  // (request seq, position in it) where it was first seen
  };
  using GroupKey = std::tuple<std::string, int32_t, uint64_t, bool>;  // path, call_index, signature, failed
  struct RequestClass {
    uint64_t signature = 0;
    std::array<Count, 4> totals{};
    std::array<bool, 4> complete{};
    int64_t calls = 0;
    nlohmann::json input;
    int64_t requests = 0;
    std::string first_id, last_id;
    int64_t first_seq = 0, last_seq = 0;
  };
  using ClassKey = std::tuple<uint64_t, Count::Wide, Count::Wide, Count::Wide, Count::Wide, int, int64_t>;
  static constexpr size_t kMaxClasses = 256;

  // The group of `key`, created from `row` (`input`: its input, asked for
  // a new group only) or with `row` added to it.
  int32_t GroupOf(const GroupKey& key, const reports::LayerTally& row, int32_t parent,
                  absl::FunctionRef<nlohmann::json()> input, std::pair<int64_t, int64_t> order);
  void AddClass(const ClassKey& key, const RequestClass& c);
  uint64_t EventHash(const Event& e);
  void Trim();

  std::vector<Group> groups_;
  std::map<GroupKey, int32_t> group_index_;
  int64_t requests_ = 0;
  int64_t units_ = 0;  // requests, and top-level module calls outside any request
  std::array<Distribution, 4> totals_;
  Distribution time_ns_;
  std::vector<RequestClass> classes_;
  std::map<ClassKey, int32_t> class_index_;
  int64_t omitted_requests_ = 0;  // requests of classes past kMaxClasses
  std::deque<KeptRequest> kept_;
  std::unordered_map<c10::OperatorHandle, uint64_t> name_hash_;  // not merged: a cache
};

}  // namespace torchscan
