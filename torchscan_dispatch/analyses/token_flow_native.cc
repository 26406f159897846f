// Masks and visible keys (Note [Visible keys]), shared by the token-flow
// pass's SDPA rule and the analysis of native attention and Transformer
// layers here: a native layer's relation is derived from its configuration
// and the masks it ran with, which the caller read (token_flow.h).
#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torchscan_dispatch/analyses/token_flow_pass.h"

namespace torchscan {

using token_flow_internal::N;

// ---- Runs

TokenRuns IntersectRuns(const TokenRuns& a, const TokenRuns& b) {
  TokenRuns out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

TokenRuns UniteRuns(const TokenRuns& a, const TokenRuns& b) {
  TokenRuns all;
  all.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(all));
  TokenRuns out;
  for (const auto& r : all) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::optional<TokenRows> IntervalRows(const std::vector<TokenRuns>& rows) {
  TokenRows d = TokenRows::None(static_cast<int64_t>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].size() > 1) return std::nullopt;
    if (!rows[i].empty()) std::tie(d.lo[i], d.hi[i]) = rows[i][0];
  }
  return d;
}

// ---- Masks and visible keys (Note [Visible keys])

std::string MaskValueProblem(const TokenMask& m, std::string_view what) {
  switch (m.problem) {
    case TokenMask::Problem::kMeta:
      return absl::StrCat(N(what), " is on meta: its values, which decide the relation, are unknown");
    case TokenMask::Problem::kDtype:
      return absl::StrCat(N(what), " has dtype ", m.dtype, "; only boolean and floating masks are understood");
    case TokenMask::Problem::kNonFinite:
      return absl::StrCat(N(what), " holds NaN or +inf");
    default:
      return "";
  }
}

std::string token_flow_internal::SdpaMaskProblem(const TokenMask& m) {
  if (std::string why = MaskValueProblem(m, "it"); !why.empty()) return why;
  if (!m.reason.empty()) return m.reason;
  if (m.shape.empty()) return "is 0-d";
  if (m.problem == TokenMask::Problem::kDiffers) return "it differs between batch elements or heads";
  for (size_t r = 0; r < m.runs.size(); ++r) {
    if (m.runs[r].size() > 1)
      return absl::StrCat("lets query row ", r, " see keys that are not one interval of positions");
  }
  return "";
}

std::vector<TokenRuns> VisibleKeys(int64_t length, int64_t source, bool causal) {
  std::vector<TokenRuns> v(length);
  for (int64_t i = 0; i < length; ++i) {
    const int64_t hi = causal ? std::min(i, source - 1) : source - 1;
    if (hi >= 0) v[i].push_back({0, hi});
  }
  return v;
}

void RestrictKeys(std::vector<TokenRuns>& visible, const TokenMask& m) {
  for (size_t i = 0; i < visible.size(); ++i) {
    const TokenRuns& row = m.runs[m.rows == 1 ? 0 : i];
    // One column: its value applies to every key.
    visible[i] = m.cols == 1 ? (row.empty() ? TokenRuns{} : visible[i]) : IntersectRuns(visible[i], row);
  }
}

AttentionReads ReadsOf(const std::vector<TokenRuns>& visible) {
  AttentionReads r;
  r.value = visible;
  r.key.resize(visible.size());
  r.query.resize(visible.size());
  for (size_t i = 0; i < visible.size(); ++i) {
    int64_t count = 0;
    for (const auto& [lo, hi] : visible[i]) count += hi - lo + 1;
    if (count < 2) continue;  // a softmax over one score: the value alone
    r.key[i] = visible[i];
    r.query[i] = {{static_cast<int64_t>(i), static_cast<int64_t>(i)}};
  }
  return r;
}

namespace {

// ---- Native layers

// PyTorch's tuple of a shape: (5, 7), (7,), ().
std::string Shape(const std::vector<int64_t>& s) {
  return absl::StrCat("(", absl::StrJoin(s, ", "), s.size() == 1 ? ",)" : ")");
}

struct Failed {
  std::string reason;
};

const NativeTensor& Argument(const NativeLayerRequest& q, const std::string& name) {
  static const NativeTensor kNone{false};
  auto it = q.arguments.find(name);
  return it == q.arguments.end() ? kNone : it->second;
}

const TokenMask* MaskOf(const NativeLayerRequest& q, const std::string& name) {
  auto it = q.masks.find(name);
  return it == q.masks.end() ? nullptr : &it->second;
}

bool Flag(const NativeLayerRequest& q, const std::string& name) {
  auto it = q.flags.find(name);
  return it != q.flags.end() && it->second;
}

int32_t SeqAxis(const NativeTensor& t, bool batch_first) {
  if (!t.tensor || t.nested) throw Failed{"a nested or non-tensor input has no rectangular token axis"};
  const size_t d = t.sizes.size();
  if (d == 2) return 0;  // unbatched (L, E)
  if (d != 3) throw Failed{absl::StrCat("expected a 2-d or 3-d input, got ", d, "-d")};
  return batch_first ? 1 : 0;
}

void PlainPositions(const NativeAttention& a) {
  if (a.extra_positions) throw Failed{"bias_k/bias_v and add_zero_attn attend to positions that are no input's"};
}

void Usable(const TokenMask& m, std::string_view what) {
  if (std::string why = MaskValueProblem(m, what); !why.empty()) throw Failed{why};
  if (!m.reason.empty()) throw Failed{absl::StrCat(N(what), " ", m.reason)};
}

// MultiheadAttention's boolean masks block where True, float masks where
// -inf or the dtype's most negative value; the caller read them so. Its
// is_causal is a hint that attn_mask is the causal mask: depending on its
// path it applies the one or the other, so only a causal attn_mask (or
// none) is unambiguous.
std::vector<TokenRuns> Visibility(int64_t length, int64_t source, const TokenMask* attn_mask,
                                  const TokenMask* key_padding_mask, bool is_causal) {
  std::vector<TokenRuns> v = VisibleKeys(length, source, is_causal);
  if (attn_mask != nullptr) {
    const TokenMask& a = *attn_mask;
    Usable(a, "attn_mask");
    const size_t n = a.shape.size();
    if (n < 2 || a.shape[n - 2] != length || a.shape[n - 1] != source) {
      throw Failed{
          absl::StrCat("attn_mask has shape ", Shape(a.shape), ", expected (..., ", length, ", ", source, ")")};
    }
    if (a.problem == TokenMask::Problem::kDiffers) throw Failed{"attn_mask differs between batch elements or heads"};
    if (a.rows != length || a.cols != source) throw Failed{"attn_mask summary is malformed"};
    if (is_causal && a.runs != v) {
      throw Failed{
          "is_causal is set with an attn_mask that is not causal; PyTorch applies one or the other depending on its "
          "path"};
    }
    RestrictKeys(v, a);
  }
  if (key_padding_mask != nullptr) {
    const TokenMask& k = *key_padding_mask;
    Usable(k, "key_padding_mask");
    if (k.shape.empty()) throw Failed{"the analysis failed (IndexError: tuple index out of range)"};
    if (k.shape.back() != source) {
      throw Failed{absl::StrCat("key_padding_mask has shape ", Shape(k.shape), ", expected (..., ", source, ")")};
    }
    if (k.problem == TokenMask::Problem::kDiffers) throw Failed{"key_padding_mask differs between batch elements"};
    if (k.rows != 1 || k.cols != source) throw Failed{"key_padding_mask summary is malformed"};
    RestrictKeys(v, k);
  }
  for (const TokenRuns& row : v) {
    if (row.empty()) throw Failed{"a query position sees no key (its output is NaN)"};
  }
  return v;
}

std::vector<TokenRuns> Unite(std::vector<TokenRuns> a, const std::vector<TokenRuns>& b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] = UniteRuns(a[i], b[i]);
  return a;
}

struct Group {
  std::string name;
  const NativeTensor* tensor;
  std::vector<TokenRuns> d;  // output position -> the positions of `tensor` it reads
  int32_t axis;
};

// Arguments that are one tensor (self-attention) are one source, reading the union of theirs.
std::vector<NativeSource> Sources(const std::vector<Group>& groups) {
  struct Merged {
    NativeSource source;
    std::vector<TokenRuns> d;
  };
  std::vector<Merged> merged;
  for (const Group& g : groups) {
    auto it = std::find_if(merged.begin(), merged.end(),
                           [&](const Merged& m) { return m.source.identity == g.tensor->identity; });
    if (it != merged.end()) {
      it->source.arguments.push_back(g.name);
      it->d = Unite(std::move(it->d), g.d);
      continue;
    }
    NativeSource s;
    s.arguments = {g.name};
    s.identity = g.tensor->identity;
    s.axis = g.axis;
    s.length = g.tensor->sizes[g.axis];
    merged.push_back({std::move(s), g.d});
  }
  std::vector<NativeSource> out;
  for (Merged& m : merged) {
    std::optional<TokenRelation> named;
    if (auto rows = IntervalRows(m.d)) named = NameRelation(*rows, m.source.length);
    if (!named) {
      throw Failed{absl::StrCat("the output's dependency on ", absl::StrJoin(m.source.arguments, "/"),
                                " is none of the relations the schema names (none, same_position, prefix, all), "
                                "e.g. a sliding window, or key padding next to a residual path")};
    }
    m.source.relation = *named;
    out.push_back(std::move(m.source));
  }
  return out;
}

// A residual self-attention block on x: output i reads what attention's
// query, key and value read, and x at i through the residual.
std::vector<TokenRuns> SelfBlock(const NativeAttention& attn, int64_t length, const TokenMask* mask,
                                 const TokenMask* padding, bool is_causal) {
  const AttentionReads r = ReadsOf(Visibility(length, length, mask, padding, is_causal));
  std::vector<TokenRuns> d = Unite(Unite(r.query, r.key), r.value);
  for (int64_t i = 0; i < length; ++i) d[i] = UniteRuns(d[i], {{i, i}});
  return d;
}

NativeLayerResult Analyse(const NativeLayerRequest& q) {
  NativeLayerResult r;
  if (q.attention.empty() || (q.layer == "TransformerDecoderLayer" && q.attention.size() < 2)) {
    throw Failed{"the request names no attention module"};
  }
  const NativeAttention& self = q.attention[0];
  std::vector<Group> groups;
  if (q.layer == "MultiheadAttention") {
    PlainPositions(self);
    const NativeTensor &query = Argument(q, "query"), &key = Argument(q, "key"), &value = Argument(q, "value");
    const int32_t axis = SeqAxis(query, self.batch_first);
    const int32_t kaxis = SeqAxis(key, self.batch_first), vaxis = SeqAxis(value, self.batch_first);
    r.output_axis = axis;
    r.output_length = query.sizes[axis];
    const int64_t source = key.sizes[kaxis];
    if (value.sizes[vaxis] != source) throw Failed{"key and value lengths differ"};
    const AttentionReads reads = ReadsOf(Visibility(r.output_length, source, MaskOf(q, "attn_mask"),
                                                    MaskOf(q, "key_padding_mask"), Flag(q, "is_causal")));
    groups = {
        {"query", &query, reads.query, axis}, {"key", &key, reads.key, kaxis}, {"value", &value, reads.value, vaxis}};
  } else if (q.layer == "TransformerEncoderLayer") {
    PlainPositions(self);
    const NativeTensor& src = Argument(q, "src");
    r.output_axis = SeqAxis(src, self.batch_first);
    r.output_length = src.sizes[r.output_axis];
    groups = {{"src", &src,
               SelfBlock(self, r.output_length, MaskOf(q, "src_mask"), MaskOf(q, "src_key_padding_mask"),
                         Flag(q, "is_causal")),
               r.output_axis}};
  } else if (q.layer == "TransformerDecoderLayer") {
    PlainPositions(self);
    const NativeTensor &tgt = Argument(q, "tgt"), &memory = Argument(q, "memory");
    r.output_axis = SeqAxis(tgt, self.batch_first);
    r.output_length = tgt.sizes[r.output_axis];
    std::vector<TokenRuns> d_tgt = SelfBlock(self, r.output_length, MaskOf(q, "tgt_mask"),
                                             MaskOf(q, "tgt_key_padding_mask"), Flag(q, "tgt_is_causal"));
    const NativeAttention& cross = q.attention[1];
    PlainPositions(cross);
    const int32_t maxis = SeqAxis(memory, cross.batch_first);
    const AttentionReads reads = ReadsOf(Visibility(r.output_length, memory.sizes[maxis], MaskOf(q, "memory_mask"),
                                                    MaskOf(q, "memory_key_padding_mask"), Flag(q, "memory_is_causal")));
    // The cross block's query is the self block's output at the same
    // position, which the residual carries anyway: tgt's relation is d_tgt.
    groups = {{"tgt", &tgt, std::move(d_tgt), r.output_axis},
              {"memory", &memory, Unite(reads.key, reads.value), maxis}};
  } else {
    throw Failed{absl::StrCat("not a native layer: ", q.layer)};
  }
  r.sources = Sources(groups);
  r.complete = true;
  return r;
}

}  // namespace

NativeLayerResult AnalyseNativeLayer(const NativeLayerRequest& request) {
  try {
    return Analyse(request);
  } catch (const Failed& f) {
    NativeLayerResult r;
    r.reason = f.reason;
    return r;
  }
}

void SetMaskRuns(TokenMask& mask, int64_t rows, int64_t cols, const std::vector<int64_t>& flat) {
  mask.rows = rows;
  mask.cols = cols;
  // Rows come from the mask's leading dims and columns from its last one
  // (either may be a broadcast 1): a count past them is malformed, refused
  // before it sizes the runs.
  int64_t lead = 1, last = 1;
  bool sizes_ok = true;
  for (size_t k = 0; k < mask.shape.size(); ++k) {
    const int64_t d = mask.shape[k];
    sizes_ok = sizes_ok && d >= 0;
    if (k + 1 == mask.shape.size()) {
      last = d;
    } else if (d >= 0) {
      lead = d == 0                                           ? 0
             : lead > std::numeric_limits<int64_t>::max() / d ? std::numeric_limits<int64_t>::max()
                                                              : lead * d;
    }
  }
  if (!sizes_ok || rows < 0 || cols < 0 || rows > std::max<int64_t>(1, lead) || cols > std::max<int64_t>(1, last) ||
      rows > (int64_t{1} << 32)) {
    mask.reason = "summary is malformed";
    return;
  }
  mask.runs.resize(rows);
  // Runs as [row, lo, hi, ...] in row order.
  bool ok = flat.size() % 3 == 0;
  for (size_t k = 0; ok && k < flat.size(); k += 3) {
    const int64_t row = flat[k], lo = flat[k + 1], hi = flat[k + 2];
    ok = row >= 0 && row < rows && lo >= 0 && lo <= hi && hi < cols &&
         (mask.runs[row].empty() || lo > mask.runs[row].back().second + 1);
    if (ok) mask.runs[row].push_back({lo, hi});
  }
  if (!ok) mask.reason = "summary is malformed";
}

namespace token_flow_internal {

TokenMask MaskFromJson(const nlohmann::json& m) {
  TokenMask mask;
  const std::string problem = m.value("problem", "");
  for (int p = 1; p < kMaskProblems; ++p) {
    if (problem == kMaskProblemNames[p]) mask.problem = static_cast<TokenMask::Problem>(p);
  }
  mask.dtype = m.value("dtype", "");
  mask.shape = m.value("shape", std::vector<int64_t>{});
  if (m.contains("reason")) mask.reason = m.at("reason").get<std::string>();
  if (!m.contains("rows")) return mask;
  SetMaskRuns(mask, m.at("rows").get<int64_t>(), m.at("cols").get<int64_t>(), m.at("runs").get<std::vector<int64_t>>());
  return mask;
}

std::string NativeLayerJson(const nlohmann::json& j) {
  NativeLayerRequest q;
  q.layer = j.at("layer").get<std::string>();
  for (const auto& a : j.at("attention")) {
    q.attention.push_back({a.at("batch_first").get<bool>(), a.at("extra_positions").get<bool>()});
  }
  for (const auto& [name, t] : j.at("arguments").items()) {
    NativeTensor n;
    n.tensor = t.value("tensor", true);
    n.nested = t.value("nested", false);
    n.identity = static_cast<uintptr_t>(t.value("identity", uint64_t{0}));
    n.sizes = t.value("sizes", std::vector<int64_t>{});
    q.arguments[name] = std::move(n);
  }
  for (const auto& [name, m] : j.at("masks").items()) q.masks[name] = MaskFromJson(m);
  for (const auto& [name, f] : j.at("flags").items()) q.flags[name] = f.get<bool>();
  const NativeLayerResult r = AnalyseNativeLayer(q);
  if (!r.complete) return nlohmann::json{{"status", "unavailable"}, {"reason", r.reason}}.dump();
  nlohmann::json sources = nlohmann::json::array();
  for (const NativeSource& s : r.sources) {
    sources.push_back({{"arguments", s.arguments},
                       {"identity", static_cast<uint64_t>(s.identity)},
                       {"sequence_axis", s.axis},
                       {"length", s.length},
                       {"relation", RelationJson(s.relation)}});
  }
  return nlohmann::json{{"status", "complete"},
                        {"output", {{"sequence_axis", r.output_axis}, {"length", r.output_length}}},
                        {"sources", std::move(sources)}}
      .dump();
}

}  // namespace token_flow_internal
}  // namespace torchscan
