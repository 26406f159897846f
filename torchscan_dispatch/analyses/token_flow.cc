#include "torchscan_dispatch/analyses/token_flow.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "torchscan_dispatch/analyses/token_flow_pass.h"

namespace torchscan {

// ---- Relations

TokenRows TokenRows::None(int64_t rows) { return {std::vector<int64_t>(rows, 0), std::vector<int64_t>(rows, -1)}; }

TokenRows TokenRows::Same(int64_t rows) {
  TokenRows r{std::vector<int64_t>(rows), std::vector<int64_t>(rows)};
  std::iota(r.lo.begin(), r.lo.end(), 0);
  std::iota(r.hi.begin(), r.hi.end(), 0);
  return r;
}

std::optional<TokenRelation> NameRelation(const TokenRows& d, int64_t source_length) {
  const int64_t n = d.rows();
  int64_t first = 0;
  while (first < n && d.empty(first)) ++first;
  if (first == n) return TokenRelation{"none"};
  for (int64_t i = first; i < n; ++i) {
    if (d.empty(i)) return std::nullopt;  // a dependency that stops and starts again
  }
  TokenRelation r;
  r.first_position = first;
  bool same = n <= source_length;
  for (int64_t i = first; same && i < n; ++i) same = d.lo[i] == i && d.hi[i] == i;
  if (same) {
    r.kind = "same_position";
    return r;
  }
  // prefix / all: every row starts at 0; the last row's end gives the limit.
  const int64_t limit = d.hi[n - 1] + 1;
  bool zero = true, prefix = n > 1, all = true;
  for (int64_t i = first; i < n; ++i) {
    zero = zero && d.lo[i] == 0;
    prefix = prefix && d.hi[i] == std::min(i, limit - 1);
    all = all && d.hi[i] == limit - 1;
  }
  if (!zero || !(prefix || all)) return std::nullopt;
  r.kind = prefix ? "prefix" : "all";
  if (limit < source_length) r.limit = limit;
  return r;
}

TokenRows RowsOf(const TokenRelation& r, int64_t rows, int64_t source_length) {
  TokenRows d = TokenRows::None(rows);
  if (r.kind == "none") return d;
  const int64_t limit = r.limit >= 0 ? r.limit : source_length;
  for (int64_t i = std::max<int64_t>(r.first_position, 0); i < rows; ++i) {
    if (r.kind == "same_position") {
      if (i < source_length) d.lo[i] = d.hi[i] = i;
    } else {
      d.lo[i] = 0;
      d.hi[i] = r.kind == "prefix" ? std::min(i, limit - 1) : limit - 1;
    }
  }
  return d;
}

std::optional<TokenRows> ComposeRows(const TokenRows& a, const TokenRows& b, std::string* why) {
  const int64_t m = b.rows();
  TokenRows out = TokenRows::None(a.rows());
  // b's rows are usually monotone (both ends non-decreasing over its
  // non-empty rows): then a union over a range of rows is one interval
  // exactly when consecutive non-empty rows touch, which prefix sums answer.
  std::vector<int64_t> next(m + 1, m), prev(m + 1, -1), gaps(m + 1, 0);
  bool monotone = true;
  int64_t last = -1;
  for (int64_t j = 0; j < m; ++j) {
    gaps[j + 1] = gaps[j];
    if (b.empty(j)) continue;
    if (last >= 0) {
      monotone = monotone && b.lo[j] >= b.lo[last] && b.hi[j] >= b.hi[last];
      if (b.lo[j] > b.hi[last] + 1) gaps[j + 1] += 1;  // a hole between rows last and j
    }
    last = j;
  }
  for (int64_t j = m - 1; j >= 0; --j) next[j] = b.empty(j) ? next[j + 1] : j;
  for (int64_t j = 0; j < m; ++j) prev[j + 1] = b.empty(j) ? prev[j] : j;
  int64_t budget = 50'000'000;  // the general path's work, past which the pass gives up
  for (int64_t i = 0; i < a.rows(); ++i) {
    if (a.empty(i)) continue;
    const int64_t lo = std::max<int64_t>(a.lo[i], 0), hi = std::min<int64_t>(a.hi[i], m - 1);
    if (lo > hi) continue;
    const int64_t f = next[lo], l = prev[hi + 1];
    if (f > hi) continue;  // only empty rows of b
    if (monotone) {
      if (gaps[l + 1] - gaps[f + 1] != 0) {
        *why = "a dependency that is not one interval of positions";
        return std::nullopt;
      }
      out.lo[i] = b.lo[f];
      out.hi[i] = b.hi[l];
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> parts;
    for (int64_t j = f; j <= l; ++j) {
      if (!b.empty(j)) parts.push_back({b.lo[j], b.hi[j]});
    }
    budget -= static_cast<int64_t>(parts.size());
    if (budget < 0) {
      *why = "relations too large for the token-flow pass";
      return std::nullopt;
    }
    std::sort(parts.begin(), parts.end());
    int64_t end = parts[0].second;
    for (const auto& [plo, phi] : parts) {
      if (plo > end + 1) {
        *why = "a dependency that is not one interval of positions";
        return std::nullopt;
      }
      end = std::max(end, phi);
    }
    out.lo[i] = parts[0].first;
    out.hi[i] = end;
  }
  return out;
}

std::optional<TokenRows> UniteRows(const TokenRows& a, const TokenRows& b) {
  TokenRows out = a;
  for (int64_t i = 0; i < a.rows(); ++i) {
    if (b.empty(i)) continue;
    if (a.empty(i)) {
      out.lo[i] = b.lo[i];
      out.hi[i] = b.hi[i];
      continue;
    }
    if (std::max(a.lo[i], b.lo[i]) > std::min(a.hi[i], b.hi[i]) + 1) return std::nullopt;
    out.lo[i] = std::min(a.lo[i], b.lo[i]);
    out.hi[i] = std::max(a.hi[i], b.hi[i]);
  }
  return out;
}

namespace {

using token_flow_internal::Catalog;
using token_flow_internal::Has;
using token_flow_internal::IsAttention;
using token_flow_internal::MaskFromJson;
using token_flow_internal::Pass;
using token_flow_internal::RelationJson;
using token_flow_internal::SdpaArgs;
using token_flow_internal::SdpaOf;

TokenRelation RelationFromJson(const nlohmann::json& j) {
  TokenRelation r;
  r.kind = j.at("kind").get<std::string>();
  r.limit = j.value("limit", static_cast<int64_t>(-1));
  r.first_position = j.value("first_position", static_cast<int64_t>(0));
  return r;
}

bool ClosedScope(const Recorder& r, int32_t scope) {
  // Its calls are still held: a streaming scan drops calls it has folded.
  return scope >= 0 && scope < static_cast<int32_t>(r.scopes().size()) && r.scopes()[scope].end_event >= 0 &&
         r.scopes()[scope].begin_event >= r.folded();
}

}  // namespace

const Recorder* ClosedScopeRecorder(int32_t scope, std::string_view path) {
  const Recorder* recorder = ThreadTopRecorder();
  return recorder != nullptr && ClosedScope(*recorder, scope) && recorder->scopes()[scope].path == path ? recorder
                                                                                                        : nullptr;
}

nlohmann::json token_flow_internal::RelationJson(const TokenRelation& r) {
  nlohmann::json j = {{"kind", r.kind}};
  if (r.limit >= 0) j["limit"] = r.limit;
  if (r.first_position > 0) j["first_position"] = r.first_position;
  return j;
}

TokenMaskQuery FindAttentionMasks(const Recorder& recorder, int32_t scope, const std::vector<int32_t>& steps) {
  TokenMaskQuery q;
  if (!ClosedScope(recorder, scope)) return q;
  const auto& sc = recorder.scopes()[scope];
  const auto& events = recorder.events();
  const int64_t base = recorder.folded();
  std::vector<std::pair<int64_t, int64_t>> skip;  // the steps' calls, as the pass takes them (Pass::Run)
  for (int32_t s : steps) {
    if (auto calls = token_flow_internal::StepCalls(recorder, scope, s)) skip.push_back(*calls);
  }
  std::sort(skip.begin(), skip.end());
  size_t k = 0;
  for (int64_t i = sc.begin_event - base; i < sc.end_event - base; ++i) {
    while (k < skip.size() && skip[k].second <= i) ++k;
    if (k < skip.size() && skip[k].first <= i) {
      i = skip[k].second - 1;  // past the step's calls
      continue;
    }
    const Event& e = events[i];
    const OpInfo& info = Catalog().Get(e.op());
    // The catalog's cached traits: this runs after every module call of a crawl.
    if (info.traits.Has(TokenTrait::kSoftmax)) q.softmax = true;
    if (!info.traits.Has(TokenTrait::kAttention)) continue;
    q.attention = true;
    const SdpaArgs at = SdpaOf(info.name);
    // The kernel SDPA dispatches to gets a mask SDPA derived (a boolean one
    // made additive): the pass reads the outer call's.
    if (at.mask < 0 || (e.parent >= 0 && Catalog().Get(events[e.parent].op()).traits.Has(TokenTrait::kAttention)))
      continue;
    const ResolvedCall rc(e);  // identities followed from call to call
    const OpCall call = FormulaCall(info, rc.args(), rc.outputs());
    const ArgMeta& m = call.arg(at.mask);
    if (m.is_tensor() && m.tensor().defined &&
        std::find(q.masks.begin(), q.masks.end(), m.tensor().identity) == q.masks.end()) {
      q.masks.push_back(m.tensor().identity);
    }
  }
  return q;
}

TokenFlowResult AnalyseTokenFlow(const Recorder& recorder, const TokenFlowRequest& request) {
  if (!ClosedScope(recorder, request.scope)) {
    TokenFlowResult r;
    r.reason = "the module call's recorded calls were not found";
    return r;
  }
  Pass pass(recorder, request);
  TokenFlowResult r = pass.Run();
  r.explicit_attention = pass.products_of_tokens;
  return r;
}

std::string TokenFlowJson(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  // A native layer's relation needs no recorded calls: what it ran with is in the request.
  if (j.value("query", "") == "native") return token_flow_internal::NativeLayerJson(j);
  const int32_t scope = j.at("scope").get<int32_t>();
  const Recorder* recorder = ClosedScopeRecorder(scope, j.at("path").get<std::string>());
  const bool ours = recorder != nullptr;
  if (j.value("query", "") == "masks") {
    nlohmann::json out = {{"attention", false}, {"masks", nlohmann::json::array()}};
    if (!ours) return out.dump();
    const TokenMaskQuery q = FindAttentionMasks(*recorder, scope, j.value("steps", std::vector<int32_t>{}));
    out["attention"] = q.attention;
    out["softmax"] = q.softmax;
    for (uintptr_t m : q.masks) out["masks"].push_back(static_cast<uint64_t>(m));
    return out.dump();
  }
  if (!ours) {
    return nlohmann::json{{"status", "unavailable"}, {"reason", "the module call's recorded calls were not found"}}
        .dump();
  }
  TokenFlowRequest req;
  req.scope = scope;
  for (const auto& in : j.at("inputs")) {
    req.inputs.push_back({static_cast<uintptr_t>(in.at("identity").get<uint64_t>()), in.at("source").get<int32_t>(),
                          in.at("axis").get<int32_t>(), in.at("length").get<int64_t>()});
  }
  req.output = static_cast<uintptr_t>(j.at("output").get<uint64_t>());
  req.output_sizes = j.at("output_sizes").get<std::vector<int64_t>>();
  for (const auto& m : j.at("masks")) {
    req.masks[static_cast<uintptr_t>(m.at("identity").get<uint64_t>())] = MaskFromJson(m);
  }
  for (const auto& s : j.at("steps")) {
    TokenStep step;
    step.scope = s.at("scope").get<int32_t>();
    step.output = static_cast<uintptr_t>(s.at("output").get<uint64_t>());
    if (s.contains("reason")) {
      step.reason = s.at("reason").get<std::string>();
    } else {
      step.mixed = static_cast<uint64_t>(s.value("mixed", int64_t{0}));
      step.output_axis = s.at("output_axis").get<int32_t>();
      step.output_length = s.at("output_length").get<int64_t>();
      for (const auto& in : s.at("inputs")) {
        step.inputs.push_back({static_cast<uintptr_t>(in.at("identity").get<uint64_t>()), in.at("axis").get<int32_t>(),
                               in.at("length").get<int64_t>(), RelationFromJson(in.at("relation"))});
      }
    }
    req.steps.push_back(std::move(step));
  }
  const TokenFlowResult r = AnalyseTokenFlow(*recorder, req);
  if (!r.complete) {
    return nlohmann::json{{"status", "unavailable"}, {"reason", r.reason}, {"explicit_attention", r.explicit_attention}}
        .dump();
  }
  nlohmann::json out = {{"status", "complete"}, {"output_axis", r.output_axis}, {"output_length", r.output_length}};
  if (r.mixed != 0) out["mixed"] = static_cast<int64_t>(r.mixed);
  out["sources"] = nlohmann::json::array();
  for (const auto& [source, rel] : r.sources)
    out["sources"].push_back({{"source", source}, {"relation", RelationJson(rel)}});
  return out.dump();
}

namespace {

// The words of a request, read with bounds checks: a malformed one is
// refused, never read past its end.
struct Words {
  const int64_t* w;
  int64_t n, i = 0;
  std::string_view text;
  bool ok = true;
  int64_t Next() {
    if (i >= n) {
      ok = false;
      return 0;
    }
    return w[i++];
  }
  int64_t Count() {  // a list's length: at most the words left
    const int64_t c = Next();
    if (c < 0 || c > n - i) ok = false;
    return ok ? c : 0;
  }
  std::string Text() {
    const int64_t offset = Next(), length = Next();
    if (offset < 0 || length < 0 || offset > static_cast<int64_t>(text.size()) ||
        length > static_cast<int64_t>(text.size()) - offset) {
      ok = false;
      return {};
    }
    return std::string(text.substr(static_cast<size_t>(offset), static_cast<size_t>(length)));
  }
};

int KindCode(std::string_view kind) {
  for (int k = 0; k < 4; ++k) {
    if (kind == kRelationKinds[k]) return k;
  }
  return -1;
}

// A mask's words from its problem on (both requests' masks end so); nullopt
// for an unknown problem.
std::optional<TokenMask> ReadMask(Words& in) {
  TokenMask mask;
  const int64_t problem = in.Next();
  if (problem < 0 || problem >= kMaskProblems) return std::nullopt;
  mask.problem = static_cast<TokenMask::Problem>(problem);
  mask.dtype = in.Text();
  for (int64_t j = in.Count(); j > 0; --j) mask.shape.push_back(in.Next());
  if (in.Next() != 0) {
    const int64_t rows = in.Next(), cols = in.Next();
    std::vector<int64_t> runs;
    for (int64_t j = in.Count(); j > 0; --j) runs.push_back(in.Next());
    SetMaskRuns(mask, rows, cols, runs);
  }
  return mask;
}

// A relation's words: kind, limit, first_position.
bool PutRelation(const TokenRelation& rel, int64_t*& at) {
  const int kind = KindCode(rel.kind);
  if (kind < 0) return false;
  *at++ = kind;
  *at++ = rel.limit;
  *at++ = rel.first_position;
  return true;
}

}  // namespace

int64_t TokenFlowWords(const int64_t* words, int64_t count, std::string_view text, int64_t* answer, int64_t capacity,
                       std::string* reason) {
  Words in{words, count, 0, text};
  TokenFlowRequest req;
  req.scope = static_cast<int32_t>(in.Next());
  const std::string path = in.Text();
  req.output = static_cast<uintptr_t>(in.Next());
  for (int64_t k = in.Count(); k > 0; --k) req.output_sizes.push_back(in.Next());
  for (int64_t k = in.Count(); k > 0; --k) {
    TokenInput t;
    t.identity = static_cast<uintptr_t>(in.Next());
    t.source = static_cast<int32_t>(in.Next());
    t.axis = static_cast<int32_t>(in.Next());
    t.length = in.Next();
    req.inputs.push_back(t);
  }
  for (int64_t k = in.Count(); k > 0; --k) {
    const auto identity = static_cast<uintptr_t>(in.Next());
    std::optional<TokenMask> mask = ReadMask(in);
    if (!mask) return -1;
    req.masks[identity] = std::move(*mask);
  }
  for (int64_t k = in.Count(); k > 0; --k) {
    TokenStep step;
    step.scope = static_cast<int32_t>(in.Next());
    step.output = static_cast<uintptr_t>(in.Next());
    const int64_t form = in.Next();
    if (form == 1) {
      step.reason = in.Text();
    } else if (form == 0 || form == 2) {
      if (form == 2) step.mixed = static_cast<uint64_t>(in.Next());
      step.output_axis = static_cast<int32_t>(in.Next());
      step.output_length = in.Next();
      for (int64_t j = in.Count(); j > 0; --j) {
        TokenStep::Input t;
        t.identity = static_cast<uintptr_t>(in.Next());
        t.axis = static_cast<int32_t>(in.Next());
        t.length = in.Next();
        const int64_t kind = in.Next();
        if (kind < 0 || kind > 3) return -1;
        t.relation.kind = kRelationKinds[kind];
        t.relation.limit = in.Next();
        t.relation.first_position = in.Next();
        step.inputs.push_back(std::move(t));
      }
    } else {
      return -1;
    }
    req.steps.push_back(std::move(step));
  }
  if (!in.ok || in.i != in.n) return -1;
  const Recorder* recorder = ClosedScopeRecorder(req.scope, path);
  TokenFlowResult r;
  if (recorder != nullptr) {
    r = AnalyseTokenFlow(*recorder, req);
  } else {
    r.reason = "the module call's recorded calls were not found";
  }
  const int64_t size = 5 + (r.complete ? 4 * static_cast<int64_t>(r.sources.size()) : 0);
  if (capacity < size) return -1;
  answer[0] = r.complete ? 1 : 0;
  // TokenFlowJson says explicit_attention only with an unavailable answer, mixed with a complete one.
  answer[1] = r.complete ? static_cast<int64_t>(r.mixed) : r.explicit_attention ? 1 : 0;
  answer[2] = r.output_axis;
  answer[3] = r.output_length;
  answer[4] = r.complete ? static_cast<int64_t>(r.sources.size()) : 0;
  if (!r.complete) {
    *reason = r.reason;
    return size;
  }
  int64_t* at = answer + 5;
  for (const auto& [source, rel] : r.sources) {
    *at++ = source;
    if (!PutRelation(rel, at)) return -1;
  }
  return size;
}

int64_t NativeLayerWords(const int64_t* words, int64_t count, std::string_view text, int64_t* answer, int64_t capacity,
                         std::string* reason) {
  Words in{words, count, 0, text};
  NativeLayerRequest q;
  q.layer = in.Text();
  for (int64_t k = in.Count(); k > 0; --k) {
    NativeAttention a;
    a.batch_first = in.Next() != 0;
    a.extra_positions = in.Next() != 0;
    q.attention.push_back(a);
  }
  std::vector<std::string> names;  // the arguments in request order: the answer's sources name them by index
  for (int64_t k = in.Count(); k > 0; --k) {
    std::string name = in.Text();
    NativeTensor t;
    const int64_t kind = in.Next();
    if (kind < 0 || kind > 2) return -1;
    t.tensor = kind != 0;
    t.nested = kind == 1;
    t.identity = static_cast<uintptr_t>(in.Next());
    for (int64_t j = in.Count(); j > 0; --j) t.sizes.push_back(in.Next());
    if (q.arguments.count(name) != 0) return -1;
    q.arguments[name] = std::move(t);
    names.push_back(std::move(name));
  }
  for (int64_t k = in.Count(); k > 0; --k) {
    std::string name = in.Text();
    std::optional<TokenMask> mask = ReadMask(in);
    if (!mask) return -1;
    q.masks[std::move(name)] = std::move(*mask);
  }
  for (int64_t k = in.Count(); k > 0; --k) {
    std::string name = in.Text();
    q.flags[std::move(name)] = in.Next() != 0;
  }
  if (!in.ok || in.i != in.n) return -1;
  const NativeLayerResult r = AnalyseNativeLayer(q);
  int64_t size = 4;
  if (r.complete) {
    for (const NativeSource& s : r.sources) size += 7 + static_cast<int64_t>(s.arguments.size());
  }
  if (capacity < size) return -1;
  answer[0] = r.complete ? 1 : 0;
  answer[1] = r.output_axis;
  answer[2] = r.output_length;
  answer[3] = r.complete ? static_cast<int64_t>(r.sources.size()) : 0;
  if (!r.complete) {
    *reason = r.reason;
    return size;
  }
  int64_t* at = answer + 4;
  for (const NativeSource& s : r.sources) {
    *at++ = static_cast<int64_t>(s.identity);
    *at++ = s.axis;
    *at++ = s.length;
    if (!PutRelation(s.relation, at)) return -1;
    *at++ = static_cast<int64_t>(s.arguments.size());
    for (const std::string& name : s.arguments) {
      const auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) return -1;
      *at++ = it - names.begin();
    }
  }
  return size;
}

}  // namespace torchscan
