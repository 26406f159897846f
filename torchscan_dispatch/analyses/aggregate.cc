#include "torchscan_dispatch/analyses/aggregate.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "reports/metric.h"
#include "reports/names.h"
#include "torchscan_dispatch/analyses/operator_view.h"

namespace torchscan {

namespace {

inline void Mix(uint64_t& h, uint64_t v) {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
}

constexpr uint64_t kSeed = 0x5DEECE66Dull;

// The first defined tensor among a call's operands (nullptr: none).
const TensorMeta* FirstOperand(const Event& e) {
  for (const ArgMeta& a : e.args()) {
    const TensorMeta* t = a.kind == ArgKind::kTensor                      ? &a.tensor()
                          : a.kind == ArgKind::kTensorList && a.count > 0 ? &a.tensors()[0]
                                                                          : nullptr;
    if (t != nullptr && t->defined) return t;
  }
  return nullptr;
}

// What a module call or request was given, as far as its calls show: the
// first tensor operand of its first call that has one (a fill that builds
// its input has none), {"shape", "dtype"}; null when no call has one.
nlohmann::json InputOf(const BlockLog<Event>& events, int64_t begin, int64_t end) {
  for (int64_t i = std::max<int64_t>(begin, 0); i < end && i < static_cast<int64_t>(events.size()); ++i) {
    const TensorMeta* t = FirstOperand(events[i]);
    if (t == nullptr) continue;
    nlohmann::json shape =
        t->nested ? nlohmann::json() : nlohmann::json(std::vector<int64_t>(t->sizes().begin(), t->sizes().end()));
    return {{"shape", shape}, {"dtype", reports::DtypeName(t->dtype)}};
  }
  return nullptr;
}

std::string Hex(uint64_t h) { return absl::StrFormat("%016x", h); }

void AddRowValues(reports::LayerTally& to, const reports::LayerTally& from) {
  for (int m = 0; m < 4; ++m) {
    if (!AddCount(to.known[m], from.known[m])) to.complete[m] = false;
    to.complete[m] = to.complete[m] && from.complete[m];
  }
}

}  // namespace

void SetLayerField(reports::LayerTally& row, const std::optional<Field>& field) {
  if (!field) return;  // kUnseen
  using S = reports::LayerTally::FieldState;
  const Field& f = *field;
  row.field_state = f.kind == Field::Kind::kSpatial   ? S::kSpatial
                    : f.kind == Field::Kind::kUnknown ? S::kUnknown
                                                      : S::kNotApplicable;
  row.field_reason = f.reason;
  row.field_axes.clear();
  for (const AxisField& a : f.axes) row.field_axes.push_back({a.dim, {a.rf, a.jump, a.padding}});
}

// ---- Distribution

int32_t Distribution::Bucket(Count::Wide v) {
  if (v == 0) return -1;
  return static_cast<int32_t>(std::floor(std::log2(static_cast<long double>(v)) * 64));
}

Count::Wide Distribution::BucketFloor(int32_t b) {
  if (b < 0) return 0;
  return static_cast<Count::Wide>(std::ceil(std::exp2(static_cast<long double>(b) / 64)));
}

void Distribution::Coarsen() {
  for (const auto& [v, n] : exact_) buckets_[Bucket(v)] += n;
  exact_.clear();
  coarse_ = true;
}

void Distribution::Add(Count::Wide v, int64_t n) {
  if (n <= 0) return;
  min_ = n_ == 0 ? v : std::min(min_, v);
  max_ = n_ == 0 ? v : std::max(max_, v);
  n_ += n;
  if (coarse_) {
    buckets_[Bucket(v)] += n;
    return;
  }
  exact_[v] += n;
  if (exact_.size() > kExactValues) Coarsen();
}

void Distribution::Merge(const Distribution& o) {
  if (o.n_ == 0) return;
  const Count::Wide lo = o.min_, hi = o.max_;
  if (o.coarse_ && !coarse_) Coarsen();
  if (coarse_) {
    if (o.coarse_) {
      for (const auto& [b, n] : o.buckets_) buckets_[b] += n;
    } else {
      for (const auto& [v, n] : o.exact_) buckets_[Bucket(v)] += n;
    }
  } else {
    for (const auto& [v, n] : o.exact_) exact_[v] += n;
    if (exact_.size() > kExactValues) Coarsen();
  }
  min_ = n_ == 0 ? lo : std::min(min_, lo);
  max_ = n_ == 0 ? hi : std::max(max_, hi);
  n_ += o.n_;
}

nlohmann::json Distribution::Json() const {
  nlohmann::json j = {{"requests", n_}, {"exact", !coarse_}};
  if (n_ == 0) {
    for (const char* k : {"min", "median", "p99", "max"}) j[k] = nullptr;
    return j;
  }
  // Nearest rank: the smallest value with at least ceil(p * n) values at or below it.
  auto at = [&](double p) -> Count::Wide {
    const int64_t rank = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(p * static_cast<double>(n_))));
    int64_t seen = 0;
    if (!coarse_) {
      for (const auto& [v, n] : exact_) {
        if ((seen += n) >= rank) return v;
      }
    } else {
      for (const auto& [b, n] : buckets_) {
        if ((seen += n) >= rank) return std::clamp(BucketFloor(b), min_, max_);
      }
    }
    return max_;
  };
  j["min"] = reports::CountJson(Count::FromWide(min_));
  j["median"] = reports::CountJson(Count::FromWide(at(0.5)));
  j["p99"] = reports::CountJson(Count::FromWide(at(0.99)));
  j["max"] = reports::CountJson(Count::FromWide(max_));
  return j;
}

// ---- LayerAggregate

uint64_t LayerAggregate::EventHash(const Event& e) {
  auto it = name_hash_.find(e.op());
  if (it == name_hash_.end()) {
    const auto& n = e.op().operator_name();
    uint64_t h = std::hash<std::string>()(n.name);
    Mix(h, std::hash<std::string>()(n.overload_name));
    it = name_hash_.emplace(e.op(), h).first;
  }
  uint64_t h = HashCallValues(it->second, e.args());
  h = HashCallValues(h, e.outputs());
  Mix(h, static_cast<uint64_t>(e.raised()) | static_cast<uint64_t>(e.finished()) << 1 |
             static_cast<uint64_t>(e.unfinished()) << 2);
  return h;
}

int32_t LayerAggregate::GroupOf(const GroupKey& key, const reports::LayerTally& row, int32_t parent,
                                absl::FunctionRef<nlohmann::json()> input, std::pair<int64_t, int64_t> order) {
  auto [it, fresh] = group_index_.emplace(key, static_cast<int32_t>(groups_.size()));
  if (fresh) {
    Group g;
    g.row = row;
    g.row.parent = parent;
    g.row.thread = 0;
    g.row.request.clear();
    g.signature = std::get<2>(key);
    g.input = input();
    g.calls = 1;
    g.order = order;
    groups_.push_back(std::move(g));
    return it->second;
  }
  Group& g = groups_[it->second];
  AddRowValues(g.row, row);
  ++g.calls;
  g.order = std::min(g.order, order);
  return it->second;
}

void LayerAggregate::AddClass(const ClassKey& key, const RequestClass& c) {
  auto it = class_index_.find(key);
  if (it == class_index_.end()) {
    if (classes_.size() >= kMaxClasses) {
      omitted_requests_ += c.requests;
      return;
    }
    class_index_.emplace(key, static_cast<int32_t>(classes_.size()));
    classes_.push_back(c);
    return;
  }
  RequestClass& to = classes_[it->second];
  to.requests += c.requests;
  if (c.first_seq < to.first_seq) {
    to.first_seq = c.first_seq;
    to.first_id = c.first_id;
  }
  if (c.last_seq > to.last_seq) {
    to.last_seq = c.last_seq;
    to.last_id = c.last_id;
  }
}

void LayerAggregate::Add(const AggregateBatch& b) {
  const BlockLog<Event>& events = *b.events;
  const auto& scopes = *b.scopes;
  const int32_t nscopes = static_cast<int32_t>(scopes.size()) - b.first_scope;
  const int32_t nrequests = static_cast<int32_t>(b.request_ids.size());
  // Signatures: every call made inside a module call or request, in order.
  std::vector<uint64_t> scope_sig(std::max(nscopes, 0), kSeed), request_sig(nrequests, kSeed);
  std::vector<Count::Wide> request_begin(nrequests, ~Count::Wide{0});
  std::vector<int64_t> time_lo(nrequests, -1), time_hi(nrequests, -1);
  std::vector<int64_t> request_operand(nrequests, -1);  // its first call with a tensor operand
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const int32_t q = e.request - b.first_request;
    const bool in_request = e.request >= 0 && q >= 0 && q < nrequests;
    if (e.scope < b.first_scope && !in_request) continue;
    const uint64_t h = EventHash(e);
    for (int32_t s = e.scope; s >= b.first_scope; s = scopes[s].parent) Mix(scope_sig[s - b.first_scope], h);
    if (!in_request) continue;
    Mix(request_sig[q], h);
    if (request_operand[q] < 0 && FirstOperand(e) != nullptr) request_operand[q] = static_cast<int64_t>(i);
    if (b.times != nullptr && 2 * i + 1 < b.times->size()) {
      const int64_t start = (*b.times)[2 * i], end = (*b.times)[2 * i + 1];
      if (time_lo[q] < 0 || start < time_lo[q]) time_lo[q] = start;
      if (end >= 0 && end > time_hi[q]) time_hi[q] = end;
    }
  }
  auto seq_of = [&](int32_t request) -> int64_t {
    const int32_t q = request - b.first_request;
    return request >= 0 && q >= 0 && q < nrequests && q < static_cast<int32_t>(b.request_seqs.size())
               ? b.request_seqs[q]
               : INT64_MAX;
  };
  // Module calls, parents first (scopes open in call order).
  std::vector<int32_t> group_of(std::max(nscopes, 0), -1);
  std::vector<bool> counted(std::max(nscopes, 0), false);
  for (int32_t k = 0; k < nscopes; ++k) {
    const Recorder::Scope& sc = scopes[b.first_scope + k];
    if (sc.end_event < 0 || sc.unsettled) continue;  // running, or part of a request still running
    const reports::LayerTally& row = (*b.scope_rows)[k];
    const int32_t parent = sc.parent >= b.first_scope ? group_of[sc.parent - b.first_scope] : -1;
    group_of[k] = GroupOf({sc.path, sc.call_index, scope_sig[k], sc.failed}, row, parent,
                          [&] { return InputOf(events, sc.begin_event - b.base, sc.end_event - b.base); },
                          {seq_of(sc.request), k});
    counted[k] = true;
    if (sc.parent < b.first_scope && sc.request < 0) ++units_;
  }
  // Requests.
  for (int32_t q = 0; q < nrequests; ++q) {
    const reports::LayerTally& totals = (*b.request_rows)[q];
    const int64_t seq = q < static_cast<int32_t>(b.request_seqs.size()) ? b.request_seqs[q] : 0;
    ++requests_;
    ++units_;
    for (int m = 0; m < 4; ++m) totals_[m].Add(totals.known[m].wide());
    if (b.times != nullptr && time_lo[q] >= 0 && time_hi[q] >= time_lo[q]) {
      time_ns_.Add(static_cast<Count::Wide>(time_hi[q] - time_lo[q]));
    }
    RequestClass c;
    c.signature = request_sig[q];
    c.totals = totals.known;
    c.complete = totals.complete;
    c.calls = b.request_calls[q];
    if (request_operand[q] >= 0) c.input = InputOf(events, request_operand[q], request_operand[q] + 1);
    c.requests = 1;
    c.first_id = c.last_id = b.request_ids[q];
    c.first_seq = c.last_seq = seq;
    int complete_bits = 0;
    for (int m = 0; m < 4; ++m) complete_bits |= (totals.complete[m] ? 1 : 0) << m;
    AddClass({c.signature, totals.known[0].wide(), totals.known[1].wide(), totals.known[2].wide(),
              totals.known[3].wide(), complete_bits, c.calls},
             c);
    if (keep_requests == 0) continue;
    KeptRequest kept;
    kept.seq = seq;
    kept.id = b.request_ids[q];
    kept.calls = c.calls;
    kept.totals = totals;
    std::vector<int32_t> local(std::max(nscopes, 0), -1);
    for (int32_t k = 0; k < nscopes; ++k) {
      const Recorder::Scope& sc = scopes[b.first_scope + k];
      if (!counted[k] || sc.request != q + b.first_request) continue;
      reports::LayerTally row = (*b.scope_rows)[k];
      row.parent = sc.parent >= b.first_scope ? local[sc.parent - b.first_scope] : -1;
      row.depth = row.parent >= 0 ? kept.layers[row.parent].depth + 1 : 0;
      if (b.thread > 0) row.thread = b.thread;
      row.request = kept.id;
      local[k] = static_cast<int32_t>(kept.layers.size());
      kept.layers.push_back(std::move(row));
    }
    kept_.push_back(std::move(kept));
  }
  Trim();
}

void LayerAggregate::Trim() {
  if (kept_.size() > 1 &&
      !std::is_sorted(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; })) {
    std::sort(kept_.begin(), kept_.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  }
  while (kept_.size() > keep_requests) kept_.pop_front();
}

void LayerAggregate::Merge(const LayerAggregate& other) {
  std::vector<int32_t> at(other.groups_.size(), -1);
  for (size_t i = 0; i < other.groups_.size(); ++i) {
    const Group& g = other.groups_[i];
    auto [it, fresh] = group_index_.emplace(GroupKey{g.row.path, g.row.call_index, g.signature, g.row.failed},
                                            static_cast<int32_t>(groups_.size()));
    at[i] = it->second;
    if (fresh) {
      groups_.push_back(g);
      groups_.back().row.parent = g.row.parent >= 0 ? at[g.row.parent] : -1;  // parents come first
      continue;
    }
    Group& to = groups_[it->second];
    AddRowValues(to.row, g.row);
    to.calls += g.calls;
    to.order = std::min(to.order, g.order);
  }
  requests_ += other.requests_;
  units_ += other.units_;
  for (int m = 0; m < 4; ++m) totals_[m].Merge(other.totals_[m]);
  time_ns_.Merge(other.time_ns_);
  for (const auto& [key, index] : other.class_index_) AddClass(key, other.classes_[index]);
  omitted_requests_ += other.omitted_requests_;
  keep_requests = std::max(keep_requests, other.keep_requests);
  kept_.insert(kept_.end(), other.kept_.begin(), other.kept_.end());
  Trim();
}

std::vector<reports::LayerTally> LayerAggregate::KeptLayers() const {
  std::vector<reports::LayerTally> out;
  for (const KeptRequest& k : kept_) {
    const int32_t offset = static_cast<int32_t>(out.size());
    for (const reports::LayerTally& row : k.layers) {
      out.push_back(row);
      if (row.parent >= 0) out.back().parent += offset;
    }
  }
  return out;
}

nlohmann::json LayerAggregate::Json(const std::string& scope, const std::array<bool, 4>& requested, bool timed) const {
  // Groups in the order they were first seen: a request's module calls in
  // call order, then groups first seen in later requests.
  std::vector<int32_t> order(groups_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return groups_[a].order < groups_[b].order; });
  std::vector<int32_t> position(groups_.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int32_t>(i);
  std::vector<reports::LayerTally> rows;
  rows.reserve(order.size());
  for (int32_t g : order) {
    rows.push_back(groups_[g].row);
    reports::LayerTally& r = rows.back();
    r.parent = r.parent >= 0 ? position[r.parent] : -1;
  }
  nlohmann::json layers = reports::LayersJson(rows, scope, requested);
  for (size_t i = 0; i < order.size(); ++i) {
    const Group& g = groups_[order[i]];
    layers[i]["calls"] = g.calls;
    layers[i]["signature"] = Hex(g.signature);
    layers[i]["input"] = g.input;
  }
  nlohmann::json totals = nlohmann::json::object();
  for (int m = 0; m < 4; ++m) {
    if (!requested[m]) continue;
    nlohmann::json d = totals_[m].Json();
    d["unit"] = reports::kLayerMetricUnits[m];
    totals[reports::kLayerMetricNames[m]] = std::move(d);
  }
  if (timed) {
    nlohmann::json d = time_ns_.Json();
    d["unit"] = "ns";
    totals["time"] = std::move(d);
  }
  // Classes, the common case (most requests) first.
  std::vector<int32_t> by_size(classes_.size());
  for (size_t i = 0; i < by_size.size(); ++i) by_size[i] = static_cast<int32_t>(i);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int32_t a, int32_t b) {
    return classes_[a].requests != classes_[b].requests ? classes_[a].requests > classes_[b].requests
                                                        : classes_[a].first_seq < classes_[b].first_seq;
  });
  nlohmann::json classes = nlohmann::json::array();
  for (size_t i = 0; i < by_size.size(); ++i) {
    const RequestClass& c = classes_[by_size[i]];
    nlohmann::json t = nlohmann::json::object();
    for (int m = 0; m < 4; ++m) {
      if (!requested[m]) continue;
      t[reports::kLayerMetricNames[m]] =
          reports::MetricJson({c.complete[m] ? MetricStatus::kComplete : MetricStatus::kPartial, c.totals[m],
                               reports::kLayerMetricUnits[m], scope, reports::kLayerMetricMethods[m]});
    }
    classes.push_back({{"common", i == 0},
                       {"requests", c.requests},
                       {"signature", Hex(c.signature)},
                       {"input", c.input},
                       {"calls", c.calls},
                       {"totals", t},
                       {"first_request", c.first_id},
                       {"last_request", c.last_id}});
  }
  const bool all = keep_requests == SIZE_MAX;
  return {{"grouped_by", {"path", "call_index", "signature"}},
          {"requests", requests_},
          {"units", units_},
          {"layers", layers},
          {"request_totals", totals},
          {"request_classes", classes},
          {"requests_in_omitted_classes", omitted_requests_},
          {"per_request_rows",
           {{"kept", all ? nlohmann::json("all") : nlohmann::json(keep_requests)}, {"requests", kept_.size()}}}};
}

}  // namespace torchscan
