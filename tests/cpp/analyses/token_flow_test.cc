// The token-flow pass (torchscan_dispatch/analyses/token_flow.h): the relation algebra
// on hand-written rows, and the pass on real ATen calls recorded by a scan.
#include <gtest/gtest.h>

#include <cmath>

#include <ATen/core/Tensor.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/analyses/token_flow.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

TokenRows Rows(std::vector<std::pair<int64_t, int64_t>> r) {
  TokenRows d;
  for (auto [lo, hi] : r) {
    d.lo.push_back(lo);
    d.hi.push_back(hi);
  }
  return d;
}

std::string Named(const TokenRows& d, int64_t source) {
  auto r = NameRelation(d, source);
  if (!r) return "unnamed";
  std::string s = r->kind;
  if (r->limit >= 0) s += " limit " + std::to_string(r->limit);
  if (r->first_position > 0) s += " first " + std::to_string(r->first_position);
  return s;
}

TEST(TokenRelations, Names) {
  EXPECT_EQ(Named(TokenRows::Same(4), 4), "same_position");
  EXPECT_EQ(Named(TokenRows::None(4), 4), "none");
  // Row i reads 0..min(i, 2): a prefix capped at 3 of 5 sources.
  EXPECT_EQ(Named(Rows({{0, 0}, {0, 1}, {0, 2}, {0, 2}, {0, 2}}), 5), "prefix limit 3");
  // Every row reads 0..3 of 7: all below 4.
  EXPECT_EQ(Named(Rows({{0, 3}, {0, 3}}), 7), "all limit 4");
  // Row 0 reads nothing, the others 0..i: a prefix from position 1.
  EXPECT_EQ(Named(Rows({{0, -1}, {0, 1}, {0, 2}}), 3), "prefix first 1");
  // A window of two (i-1..i) and a row without dependency between others: no name.
  EXPECT_EQ(Named(Rows({{0, 0}, {0, 1}, {1, 2}}), 3), "unnamed");
  EXPECT_EQ(Named(Rows({{0, 0}, {0, -1}, {0, 2}}), 3), "unnamed");
  // And back: a named relation's rows.
  const TokenRows p = RowsOf({"prefix", 3, 1}, 5, 5);
  EXPECT_EQ(p.lo, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(p.hi, (std::vector<int64_t>{-1, 1, 2, 2, 2}));
}

TEST(TokenRelations, ComposeAndUnite) {
  std::string why;
  const TokenRows prefix = RowsOf({"prefix"}, 4, 4);
  // Output i reads mid 0..i, each reading source 0..j <= i: prefix.
  auto c = ComposeRows(prefix, prefix, &why);
  ASSERT_TRUE(c);
  EXPECT_EQ(Named(*c, 4), "prefix");
  // Through mid positions that each read source 0..2: all below 3.
  c = ComposeRows(prefix, RowsOf({"all", 3}, 4, 6), &why);
  ASSERT_TRUE(c);
  EXPECT_EQ(Named(*c, 6), "all limit 3");
  // Two windows of two: i-2..i (rows clipped at 0).
  const TokenRows window = Rows({{0, 0}, {0, 1}, {1, 2}, {2, 3}});
  c = ComposeRows(window, window, &why);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->lo, (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(c->hi, (std::vector<int64_t>{0, 1, 2, 3}));
  // Row 0 reads mid 0..1, which read source 0 and 2: {0, 2} is no interval.
  EXPECT_FALSE(ComposeRows(Rows({{0, 1}}), Rows({{0, 0}, {2, 2}}), &why));
  EXPECT_NE(why.find("interval"), std::string::npos);
  // Rows out of order (mid 0 reads 3, mid 1 reads 0..2): together 0..3.
  c = ComposeRows(Rows({{0, 1}}), Rows({{3, 3}, {0, 2}}), &why);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->lo[0], 0);
  EXPECT_EQ(c->hi[0], 3);
  // A residual (same position) next to a prefix: the prefix; next to keys
  // 0..2 only, row 4 reads {0, 1, 2, 4}: no interval.
  auto u = UniteRows(TokenRows::Same(4), prefix);
  ASSERT_TRUE(u);
  EXPECT_EQ(Named(*u, 4), "prefix");
  EXPECT_FALSE(UniteRows(TokenRows::Same(5), RowsOf({"all", 3}, 5, 5)));
}

// A mask's slice from its rows of allowed keys ([lo, hi] runs; TokenMask).
TokenMask Slice(int64_t cols, std::vector<TokenRuns> runs) {
  TokenMask m;
  m.rows = static_cast<int64_t>(runs.size());
  m.cols = cols;
  m.shape = {m.rows, m.cols};
  m.runs = std::move(runs);
  return m;
}

TEST(VisibleKeys, CausalMasksAndOneScore) {
  // Causal over 4: query i sees keys 0..i.
  auto v = VisibleKeys(4, 4, true);
  EXPECT_EQ(v[0], (TokenRuns{{0, 0}}));
  EXPECT_EQ(v[3], (TokenRuns{{0, 3}}));
  // Key padding hiding the last key (one row broadcast to every query):
  // query 3 now sees 0..2; query 0 still key 0 alone.
  RestrictKeys(v, Slice(4, {{{0, 2}}}));
  EXPECT_EQ(v[3], (TokenRuns{{0, 2}}));
  const AttentionReads r = ReadsOf(v);
  // Query 0's softmax is over one score: output 0 reads value 0 only.
  EXPECT_TRUE(r.query[0].empty() && r.key[0].empty());
  EXPECT_EQ(r.value[0], (TokenRuns{{0, 0}}));
  // Query 2 sees keys 0..2: value and key 0..2, and query 2 itself.
  EXPECT_EQ(r.key[2], (TokenRuns{{0, 2}}));
  EXPECT_EQ(r.query[2], (TokenRuns{{2, 2}}));
  // A mask with a hole: key 1 hidden from every query; one column broadcasts to every key.
  v = VisibleKeys(2, 4, false);
  RestrictKeys(v, Slice(4, {{{0, 0}, {2, 3}}}));
  EXPECT_EQ(v[1], (TokenRuns{{0, 0}, {2, 3}}));
  v = VisibleKeys(2, 4, false);
  RestrictKeys(v, Slice(1, {{{0, 0}}, {}}));
  EXPECT_EQ(v[0], (TokenRuns{{0, 3}}));
  EXPECT_TRUE(v[1].empty());
  // Runs: {0..1, 4} and {2..3} unite into 0..4; intersect to nothing.
  EXPECT_EQ(UniteRuns({{0, 1}, {4, 4}}, {{2, 3}}), (TokenRuns{{0, 4}}));
  EXPECT_TRUE(IntersectRuns({{0, 1}, {4, 4}}, {{2, 3}}).empty());
  EXPECT_FALSE(IntervalRows({{{0, 1}, {3, 3}}}));
}

NativeTensor Seq(uintptr_t identity, int64_t length) { return {true, false, identity, {2, length, 16}}; }

NativeLayerRequest Mha(int64_t length, int64_t source, bool self) {
  NativeLayerRequest q;
  q.layer = "MultiheadAttention";
  q.attention = {{/*batch_first=*/true, false}};
  q.arguments["query"] = Seq(1, length);
  q.arguments["key"] = Seq(self ? 1 : 2, source);
  q.arguments["value"] = Seq(self ? 1 : 3, source);
  return q;
}

std::string Relations(const NativeLayerResult& r) {
  if (!r.complete) return "unavailable: " + r.reason;
  std::string s;
  for (const NativeSource& src : r.sources) {
    for (const auto& a : src.arguments) s += a + (&a == &src.arguments.back() ? "" : "/");
    s += " " + src.relation.kind;
    if (src.relation.limit >= 0) s += " limit " + std::to_string(src.relation.limit);
    if (src.relation.first_position > 0) s += " first " + std::to_string(src.relation.first_position);
    s += "; ";
  }
  return s;
}

TEST(NativeLayer, MultiheadAttention) {
  // Self-attention, causal mask of length 4: output i sees keys 0..i; its
  // value, key and query dependencies all lie in 0..i, and query/key/value
  // are one tensor: prefix.
  NativeLayerRequest q = Mha(4, 4, true);
  q.masks["attn_mask"] = Slice(4, {{{0, 0}}, {{0, 1}}, {{0, 2}}, {{0, 3}}});
  NativeLayerResult r = AnalyseNativeLayer(q);
  EXPECT_EQ(Relations(r), "query/key/value prefix; ");
  EXPECT_EQ(r.output_axis, 1);
  EXPECT_EQ(r.output_length, 4);
  // Cross-attention of 3 queries, key padding hiding the last of 4 keys:
  // every query sees keys 0..2 (three scores): query i itself, keys and
  // values 0..2 (all below 3).
  q = Mha(3, 4, false);
  TokenMask pad = Slice(4, {{{0, 2}}});
  pad.shape = {2, 4};
  q.masks["key_padding_mask"] = pad;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)), "query same_position; key all limit 3; value all limit 3; ");
  // Only key 0 visible: every softmax is over one score, so no output
  // reads the query or the keys; each reads value 0, which is positions
  // 0..min(i, limit - 1) with limit 1 (prefix is named before all).
  pad.runs = {{{0, 0}}};
  q.masks["key_padding_mask"] = pad;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)), "query none; key none; value prefix limit 1; ");
  // is_causal over 3: query 0 sees key 0 alone (value 0 only), queries 1, 2
  // see 0..i: query from position 1, keys a prefix from 1, values a prefix.
  q = Mha(3, 3, false);
  q.flags["is_causal"] = true;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)), "query same_position first 1; key prefix first 1; value prefix; ");
}

TEST(NativeLayer, ResidualsAndWhatIsUnavailable) {
  NativeLayerRequest q;
  q.layer = "TransformerEncoderLayer";
  q.attention = {{true, false}};
  q.arguments["src"] = Seq(7, 4);
  // Key i hidden from query i: query i sees the other 3 keys (not one
  // interval), its softmax reads query i, and the residual reads i: all.
  q.masks["src_mask"] = Slice(4, {{{1, 3}}, {{0, 0}, {2, 3}}, {{0, 1}, {3, 3}}, {{0, 2}}});
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)), "src all; ");
  // A window of two (i-1..i) is none of the named relations.
  q.masks["src_mask"] = Slice(4, {{{0, 0}}, {{0, 1}}, {{1, 2}}, {{2, 3}}});
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)),
            "unavailable: the output's dependency on src is none of the relations the schema names (none, "
            "same_position, prefix, all), e.g. a sliding window, or key padding next to a residual path");
  // is_causal next to a mask that is not causal: PyTorch applies one or the other.
  q.masks["src_mask"] = Slice(4, {{{0, 3}}, {{0, 3}}, {{0, 3}}, {{0, 3}}});
  q.flags["is_causal"] = true;
  EXPECT_NE(Relations(AnalyseNativeLayer(q)).find("is_causal is set with an attn_mask that is not causal"),
            std::string::npos);
  q.flags.clear();
  TokenMask meta;
  meta.problem = TokenMask::Problem::kMeta;
  q.masks["src_mask"] = meta;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)),
            "unavailable: attn_mask is on meta: its values, which decide the relation, are unknown");
  q.masks.clear();
  TokenMask pad = Slice(3, {{{0, 2}}});
  pad.shape = {2, 3};
  q.masks["src_key_padding_mask"] = pad;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)), "unavailable: key_padding_mask has shape (2, 3), expected (..., 4)");
  q.masks.clear();
  q.attention[0].extra_positions = true;
  EXPECT_EQ(Relations(AnalyseNativeLayer(q)),
            "unavailable: bias_k/bias_v and add_zero_attn attend to positions that are no input's");
}

TEST(NativeLayer, DecoderThroughJson) {
  // tgt: causal self-attention over 3 plus residuals: prefix. memory: the
  // cross block's keys/values 0..3 of 5 (padding hides 4) for every query:
  // all below 4.
  const auto j = nlohmann::json::parse(TokenFlowJson(R"({"query": "native", "layer": "TransformerDecoderLayer",
      "attention": [{"batch_first": false, "extra_positions": false},
                    {"batch_first": false, "extra_positions": false}],
      "arguments": {"tgt": {"identity": 1, "sizes": [3, 2, 16]}, "memory": {"identity": 2, "sizes": [5, 2, 16]}},
      "masks": {"memory_key_padding_mask": {"shape": [2, 5], "rows": 1, "cols": 5, "runs": [0, 0, 3]}},
      "flags": {"tgt_is_causal": true}})"));
  EXPECT_EQ(j["status"], "complete");
  EXPECT_EQ(j["output"], nlohmann::json({{"sequence_axis", 0}, {"length", 3}}));
  EXPECT_EQ(j["sources"][0]["arguments"], nlohmann::json({"tgt"}));
  EXPECT_EQ(j["sources"][0]["relation"], nlohmann::json({{"kind", "prefix"}}));
  EXPECT_EQ(j["sources"][1]["identity"], 2);
  EXPECT_EQ(j["sources"][1]["relation"], nlohmann::json({{"kind", "all"}, {"limit", 4}}));
}

// One module call "attn" recorded by a scan, analysed while the scan runs.
class Scanned : public ::testing::Test {
 protected:
  template <class F>
  TokenFlowResult Run(F&& body, std::vector<std::pair<const at::Tensor*, int32_t>> inputs,
                      std::map<uintptr_t, TokenMask> masks = {}, TokenMaskQuery* query = nullptr) {
    Session s;
    TokenFlowResult r;
    {
      ScanGuard guard(s);
      auto scope = s.PushModuleScope("attn");
      EXPECT_TRUE(scope.ok());
      const at::Tensor out = body();
      const uintptr_t id = reinterpret_cast<uintptr_t>(out.unsafeGetTensorImpl());
      EXPECT_TRUE(s.PopModuleScope(*scope, false, {id}).ok());
      TokenFlowRequest req;
      req.scope = *scope;
      for (size_t k = 0; k < inputs.size(); ++k) {
        const at::Tensor& t = *inputs[k].first;
        req.inputs.push_back({reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()), static_cast<int32_t>(k),
                              inputs[k].second, t.size(inputs[k].second)});
      }
      req.output = id;
      req.output_sizes = out.sizes().vec();
      req.masks = std::move(masks);
      if (query != nullptr) *query = FindAttentionMasks(*ThreadTopRecorder(), *scope);
      r = AnalyseTokenFlow(*ThreadTopRecorder(), req);
    }
    return r;
  }
  static std::string Rel(const TokenFlowResult& r, int32_t source) {
    const TokenRelation& t = r.sources.at(source);
    std::string s = t.kind;
    if (t.limit >= 0) s += " limit " + std::to_string(t.limit);
    if (t.first_position > 0) s += " first " + std::to_string(t.first_position);
    return s;
  }
  const at::Tensor q = at::randn({1, 2, 4, 8}), k = at::randn({1, 2, 4, 8}), v = at::randn({1, 2, 4, 8});
};

TEST_F(Scanned, CausalSdpaOfThreeTensors) {
  const TokenFlowResult r = Run([&] { return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true); },
                                {{&q, 2}, {&k, 2}, {&v, 2}});
  ASSERT_TRUE(r.complete) << r.reason;
  EXPECT_EQ(r.output_axis, 2);
  EXPECT_EQ(r.output_length, 4);
  // Query 0 sees key 0 alone: a softmax over one score is 1, so output 0
  // reads value 0 only. Queries i >= 1 see keys 0..i: query i itself, keys
  // and values 0..i.
  EXPECT_EQ(Rel(r, 0), "same_position first 1");
  EXPECT_EQ(Rel(r, 1), "prefix first 1");
  EXPECT_EQ(Rel(r, 2), "prefix");
}

TEST_F(Scanned, SuppliedMaskAndUnknownMask) {
  const at::Tensor keep = at::ones({1, 1, 1, 4}, at::kBool);
  const uintptr_t id = reinterpret_cast<uintptr_t>(keep.unsafeGetTensorImpl());
  const TokenMask m = Slice(4, {{{0, 2}}});  // keys 0..2 for every query (key 3 padding, as the caller read it)
  TokenMaskQuery found;
  auto body = [&] { return at::scaled_dot_product_attention(q, k, v, keep); };
  TokenFlowResult r = Run(body, {{&q, 2}, {&k, 2}, {&v, 2}}, {{id, m}}, &found);
  ASSERT_TRUE(r.complete) << r.reason;
  // Three visible keys for every query: query i, keys and values 0..2.
  EXPECT_EQ(Rel(r, 0), "same_position");
  EXPECT_EQ(Rel(r, 1), "all limit 3");
  EXPECT_EQ(Rel(r, 2), "all limit 3");
  EXPECT_TRUE(found.attention);
  EXPECT_EQ(found.masks, std::vector<uintptr_t>{id});
  // Without the mask's values the relation is unknown.
  r = Run(body, {{&q, 2}, {&k, 2}, {&v, 2}});
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.reason.find("neither an argument nor a buffer"), std::string::npos) << r.reason;
}

TEST_F(Scanned, AMaskWrittenAfterTheAttentionReadItIsNamed) {
  // The mask's values are read when the module call returns: a write into it
  // (or into a view made from it) after the attention leaves the values the
  // attention ran with unknown (Note [Masks written after use]).
  const TokenMask all = Slice(4, {{{0, 3}}});  // what a reading after the write finds: every key
  for (int how = 0; how < 3; ++how) {
    const at::Tensor keep = at::ones({4, 4}, at::kBool).tril();
    const uintptr_t id = reinterpret_cast<uintptr_t>(keep.unsafeGetTensorImpl());
    auto body = [&] {
      at::Tensor y = at::scaled_dot_product_attention(q, k, v, keep);
      if (how == 0) keep.fill_(true);
      if (how == 1) keep.slice(0, 1).fill_(true);
      return y;  // how == 2: the mask left alone
    };
    const TokenFlowResult r = Run(body, {{&q, 2}, {&k, 2}, {&v, 2}}, {{id, all}});
    if (how < 2) {
      EXPECT_FALSE(r.complete) << how;
      EXPECT_NE(r.reason.find("aten::fill_ wrote into the mask after the attention read it"), std::string::npos)
          << r.reason;
    } else {
      ASSERT_TRUE(r.complete) << r.reason;
      EXPECT_EQ(Rel(r, 2), "all");  // every key visible (as read): output i reads values 0..3
    }
  }
}

TEST_F(Scanned, ProjectionsViewsAndAnUnsupportedOperator) {
  const at::Tensor x = at::randn({1, 4, 16}), w = at::randn({16, 16});
  // (N, L, E) -> linear over E -> heads (N, H, L, D): positions stay on L.
  auto heads = [&](const at::Tensor& t) { return at::linear(t, w).view({1, 4, 2, 8}).transpose(1, 2); };
  TokenFlowResult r = Run(
      [&] {
        const at::Tensor h = heads(x);
        return at::scaled_dot_product_attention(h, h, h, {}, 0.0, true).transpose(1, 2).reshape({1, 4, 16});
      },
      {{&x, 1}});
  ASSERT_TRUE(r.complete) << r.reason;
  EXPECT_EQ(r.output_axis, 1);
  EXPECT_EQ(Rel(r, 0), "prefix");  // one tensor as q, k, v: the union of the above
  r = Run([&] { return at::cumsum(heads(x), 2); }, {{&x, 1}});
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.reason.find("aten::cumsum"), std::string::npos) << r.reason;
}

TEST_F(Scanned, AMaskWithAHoleIsNamed) {
  const at::Tensor keep = at::ones({1, 1, 1, 4}, at::kBool);
  const uintptr_t id = reinterpret_cast<uintptr_t>(keep.unsafeGetTensorImpl());
  // Key 1 hidden: query row 0 sees keys {0, 2, 3}, no interval the pass can carry.
  const TokenFlowResult r = Run([&] { return at::scaled_dot_product_attention(q, k, v, keep); },
                                {{&q, 2}, {&k, 2}, {&v, 2}}, {{id, Slice(4, {{{0, 0}, {2, 3}}})}});
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.reason.find("attn_mask lets query row 0 see keys that are not one interval"), std::string::npos)
      << r.reason;
}

TEST_F(Scanned, ANewTensorAtAFreedViewsAddressIsNoView) {
  // Note [Reused identities]. A view of `base` is taken and freed; the next
  // tensor made (one output, no other tensor on the way) gets the freed
  // TensorImpl's address from the allocator. An in-place write into `base`
  // changes base's views, not that new tensor, so the output made from it
  // still reads x's positions one for one.
  const at::Tensor x = at::randn({1, 4, 16}), w = at::randn({16, 16});
  uintptr_t freed = 0, made = 0;
  const TokenFlowResult r = Run(
      [&] {
        at::Tensor base = at::linear(x, w);
        {
          const at::Tensor view = base.view({1, 4, 2, 8});
          freed = reinterpret_cast<uintptr_t>(view.unsafeGetTensorImpl());
        }
        const at::Tensor made_now = at::mul(x, x);
        made = reinterpret_cast<uintptr_t>(made_now.unsafeGetTensorImpl());
        base.mul_(2);
        return at::mul(made_now, made_now);
      },
      {{&x, 1}});
  if (made != freed) GTEST_SKIP() << "this allocator did not reuse the freed view's address";
  ASSERT_TRUE(r.complete) << r.reason;
  EXPECT_EQ(Rel(r, 0), "same_position");
}

TEST(TokenFlowJson, RefusesAScopeItCannotFind) {
  // No scan on this thread: nothing to read.
  const auto j = nlohmann::json::parse(TokenFlowJson(R"({"query": "masks", "scope": 0, "path": ""})"));
  EXPECT_EQ(j["attention"], false);
}

// Note [Token-flow requests without JSON]: a malformed request is refused
// (-1) without reading past its words or text; a well-formed one for a scope
// this thread does not hold is answered unavailable, as in JSON.
TEST(TokenFlowWords, RefusesMalformedRequestsAndAnswersAnUnknownScope) {
  int64_t answer[16];
  std::string reason;
  // scope 3, path "ab" (text offset 0, length 2), output 7, sizes [1, 4], no inputs, masks or steps.
  const std::vector<int64_t> good = {3, 0, 2, 7, 2, 1, 4, 0, 0, 0};
  ASSERT_EQ(TokenFlowWords(good.data(), static_cast<int64_t>(good.size()), "ab", answer, 16, &reason), 5);
  EXPECT_EQ(answer[0], 0);  // unavailable
  EXPECT_EQ(reason, "the module call's recorded calls were not found");
  EXPECT_EQ(TokenFlowWords(good.data(), static_cast<int64_t>(good.size()), "ab", answer, 4, &reason), -1)
      << "an answer that does not fit";
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_EQ(TokenFlowWords(good.data(), static_cast<int64_t>(cut), "ab", answer, 16, &reason), -1) << cut;
  }
  std::vector<int64_t> longer = good;
  longer.push_back(0);  // a word left over
  EXPECT_EQ(TokenFlowWords(longer.data(), static_cast<int64_t>(longer.size()), "ab", answer, 16, &reason), -1);
  std::vector<int64_t> bad = good;
  bad[2] = 3;  // the path runs past the text
  EXPECT_EQ(TokenFlowWords(bad.data(), static_cast<int64_t>(bad.size()), "ab", answer, 16, &reason), -1);
  bad = good;
  bad[4] = int64_t{1} << 40;  // a count past the words
  EXPECT_EQ(TokenFlowWords(bad.data(), static_cast<int64_t>(bad.size()), "ab", answer, 16, &reason), -1);
  // One step with inputs whose relation kind is not one of the four.
  const std::vector<int64_t> kind = {3, 0, 2, 7, 0, 0, 0, 1, 5, 9, 0, 1, 4, 1, 11, 1, 4, 7, -1, 0};
  EXPECT_EQ(TokenFlowWords(kind.data(), static_cast<int64_t>(kind.size()), "ab", answer, 16, &reason), -1);
  std::vector<int64_t> known = kind;
  known[known.size() - 3] = 3;  // "all"
  EXPECT_EQ(TokenFlowWords(known.data(), static_cast<int64_t>(known.size()), "ab", answer, 16, &reason), 5);
  // One mask: identity 9, no problem, dtype "" (offset 0, length 0), shape
  // [4, 4], summarized: 1 row of 4 columns, one run [0, 3] (row 0, keys 0..3).
  const std::vector<int64_t> masked = {3, 0, 2, 7, 0, 0, 1, 9, 0, 0, 0, 2, 4, 4, 1, 1, 4, 3, 0, 0, 3, 0};
  EXPECT_EQ(TokenFlowWords(masked.data(), static_cast<int64_t>(masked.size()), "ab", answer, 16, &reason), 5);
  for (size_t cut = 0; cut < masked.size(); ++cut) {
    EXPECT_EQ(TokenFlowWords(masked.data(), static_cast<int64_t>(cut), "ab", answer, 16, &reason), -1) << cut;
  }
  bad = masked;
  bad[8] = 5;  // a problem past kMaskProblemNames
  EXPECT_EQ(TokenFlowWords(bad.data(), static_cast<int64_t>(bad.size()), "ab", answer, 16, &reason), -1);
  bad = masked;
  bad[17] = int64_t{1} << 40;  // a runs count past the words
  EXPECT_EQ(TokenFlowWords(bad.data(), static_cast<int64_t>(bad.size()), "ab", answer, 16, &reason), -1);
}

// The one check of a mask summary's runs (SetMaskRuns), which JSON and word
// requests share: runs in row order, each inside the row and columns, apart
// from the row's previous run, and rows and columns no more than the mask's
// shape has; anything else leaves the mask's reason set.
TEST(TokenFlowWords, MaskRunsAreCheckedOnce) {
  auto reason_of = [](int64_t rows, int64_t cols, std::vector<int64_t> flat, std::vector<int64_t> shape = {2, 4}) {
    TokenMask m;
    m.shape = std::move(shape);
    SetMaskRuns(m, rows, cols, flat);
    return m.reason;
  };
  TokenMask two;
  two.shape = {2, 4};
  SetMaskRuns(two, 2, 4, {0, 0, 1, 0, 3, 3, 1, 2, 2});
  ASSERT_EQ(two.reason, "");
  ASSERT_EQ(two.runs.size(), 2u);
  EXPECT_EQ(two.runs[0], (TokenRuns{{0, 1}, {3, 3}}));
  EXPECT_EQ(two.runs[1], (TokenRuns{{2, 2}}));
  EXPECT_EQ(reason_of(2, 4, {0, 0, 1, 0, 2, 3}), "summary is malformed") << "touching runs";
  EXPECT_EQ(reason_of(2, 4, {0, 2, 1}), "summary is malformed") << "lo past hi";
  EXPECT_EQ(reason_of(2, 4, {2, 0, 0}), "summary is malformed") << "a row past rows";
  EXPECT_EQ(reason_of(2, 4, {0, 0, 4}), "summary is malformed") << "a key past cols";
  EXPECT_EQ(reason_of(2, 4, {0, 0}), "summary is malformed") << "not triples";
  EXPECT_EQ(reason_of(-1, 4, {}), "summary is malformed") << "negative rows";
  // Counts the shape cannot have, refused before they size anything.
  EXPECT_EQ(reason_of(int64_t{1} << 31, 4, {}), "summary is malformed") << "rows past the shape";
  EXPECT_EQ(reason_of(2, 5, {}), "summary is malformed") << "columns past the shape";
  EXPECT_EQ(reason_of(1, 4, {}, {-3, 4}), "summary is malformed") << "a negative size";
  // The forms read_mask gives: a key padding mask (N, S) as one row, a 1-d
  // mask as one row, a (B, H, L, S) mask as its L rows, no keys at all.
  EXPECT_EQ(reason_of(1, 3, {0, 0, 1}, {5, 3}), "");
  EXPECT_EQ(reason_of(1, 3, {0, 0, 2}, {3}), "");
  EXPECT_EQ(reason_of(4, 6, {3, 0, 5}, {2, 8, 4, 6}), "");
  EXPECT_EQ(reason_of(4, 0, {}, {4, 0}), "");
}

// Note [Reading a mask's values]: the summary's words (problem, rows, cols,
// runs) straight from memory, for contiguous masks and views alike.
TEST(ReadMaskValues, SummariesOfDenseCpuMasks) {
  using W = std::vector<int64_t>;
  // Causal 3x3 (row i lets keys 0..i through), as bool and as float with -inf above the diagonal.
  const at::Tensor causal = at::ones({3, 3}, at::kBool).tril();
  EXPECT_EQ(ReadMaskValues(causal, /*blocks_true=*/false, /*padding=*/false), (W{0, 3, 3, 0, 0, 0, 1, 0, 1, 2, 0, 2}));
  // Blocking where True: the complement, row 2 lets nothing through.
  EXPECT_EQ(ReadMaskValues(causal, true, false), (W{0, 3, 3, 0, 1, 2, 1, 2, 2}));
  const at::Tensor additive = at::zeros({3, 3}).masked_fill(causal.logical_not(), -INFINITY);
  EXPECT_EQ(ReadMaskValues(additive, false, false), ReadMaskValues(causal, false, false));
  // The dtype's lowest value blocks as -inf does; NaN or +inf anywhere make the mask unreadable.
  const at::Tensor lowest = at::zeros({1, 4}, at::kHalf).index_fill(1, at::arange(2, 4), -65504.0);
  EXPECT_EQ(ReadMaskValues(lowest, false, false), (W{0, 1, 4, 0, 0, 1}));
  EXPECT_EQ(ReadMaskValues(at::zeros({2, 2}).index_fill(1, at::arange(1, 2), NAN), false, false), (W{3, 0, 0}));
  EXPECT_EQ(ReadMaskValues(at::zeros({2, 2}, at::kDouble).fill_(INFINITY), false, false), (W{3, 0, 0}));
  // A view: the transpose of a mask reads its rows as columns; a slab
  // expanded over batch and heads (strides of 0) is read once per element.
  EXPECT_EQ(ReadMaskValues(causal.t(), false, false), ReadMaskValues(causal.t().contiguous(), false, false));
  EXPECT_EQ(ReadMaskValues(causal.expand({2, 4, 3, 3}), false, false), ReadMaskValues(causal, false, false));
  // Key padding (N, S): one row; batch elements that let different keys through differ.
  const at::Tensor padding = at::ones({2, 4}, at::kBool).index_fill(1, at::arange(3, 4), false);
  EXPECT_EQ(ReadMaskValues(padding, false, true), (W{0, 1, 4, 0, 0, 2}));
  EXPECT_EQ(ReadMaskValues(causal, false, true), (W{4, 0, 0}));
  // Every other mask is left to the tensor operators.
  EXPECT_EQ(ReadMaskValues(at::ones({2, 2}, at::kLong), false, false), std::nullopt) << "an integer dtype";
  EXPECT_EQ(ReadMaskValues(at::ones({0, 3}, at::kBool), false, false), std::nullopt) << "no elements";
  EXPECT_EQ(ReadMaskValues(at::ones({}, at::kBool), false, false), std::nullopt) << "0-d";
  EXPECT_EQ(ReadMaskValues(at::Tensor(), false, false), std::nullopt) << "undefined";
}

TEST(ReadMaskValues, AnyNonzeroByteOfABooleanMaskIsTrue) {
  // A uint8 tensor viewed as bool keeps its bytes: 2 and 4 are True to
  // PyTorch, as 1 is. Keys 1..3 let through, or (blocking where True) key 0.
  at::Tensor bytes = at::zeros({4}, at::kByte);
  bytes.select(0, 1).fill_(2);
  bytes.select(0, 2).fill_(1);
  bytes.select(0, 3).fill_(4);
  const at::Tensor mask = bytes.view(at::kBool).unsqueeze(0);
  EXPECT_EQ(ReadMaskValues(mask, false, false), (std::vector<int64_t>{0, 1, 4, 0, 1, 3}));
  EXPECT_EQ(ReadMaskValues(mask, true, false), (std::vector<int64_t>{0, 1, 4, 0, 0, 0}));
}

TEST(ReadMaskValues, MasksWhoseStorageShrankAreLeftToTheOperators) {
  // A storage resized under its tensor keeps their sizes and strides but
  // not their memory: resized to nothing (its data pointer is null), or
  // below what a view reaches. Reading either would fault.
  at::Tensor freed = at::ones({4, 4}, at::kBool);
  at::native::resize_bytes_cpu(freed.storage().unsafeGetStorageImpl(), 0);
  EXPECT_EQ(ReadMaskValues(freed, false, false), std::nullopt);
  // Float32 rows 1..3 of a 4x4 mask: they reach elements 4..15, bytes 16..63.
  const at::Tensor base = at::zeros({4, 4});
  const at::Tensor rows = base.slice(0, 1, 4);
  EXPECT_EQ(ReadMaskValues(rows, false, false), (std::vector<int64_t>{0, 3, 4, 0, 0, 3, 1, 0, 3, 2, 0, 3}));
  base.storage().unsafeGetStorageImpl()->set_nbytes(63);  // one byte short of the last element
  EXPECT_EQ(ReadMaskValues(rows, false, false), std::nullopt);
  base.storage().unsafeGetStorageImpl()->set_nbytes(64);
  EXPECT_NE(ReadMaskValues(rows, false, false), std::nullopt) << "exactly the bytes it reaches";
}

TEST(ReadMaskValues, ViewsReadAsTheirContiguousCopies) {
  // Random views (offsets, steps, transposes, dims of stride 0) of random
  // masks against their contiguous copies, whose rows are read in order:
  // the strides are followed right, and (under AddressSanitizer) no read
  // leaves the storage.
  at::manual_seed(11);
  int compared = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int64_t dims = 1 + trial % 4;
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < dims; ++d) sizes.push_back(at::randint(1, 7, {}).item<int64_t>());
    at::Tensor mask = trial % 2 ? at::rand(sizes).lt(0.5)
                                : at::zeros(sizes).masked_fill(at::rand(sizes).lt(0.4), -INFINITY).to(at::kHalf);
    for (int64_t d = 0; d < dims; ++d) {
      const int64_t n = mask.size(d);
      const int64_t start = at::randint(0, n, {}).item<int64_t>();
      const int64_t end = start + 1 + at::randint(0, n - start, {}).item<int64_t>();
      mask = mask.slice(d, start, end, 1 + at::randint(0, 3, {}).item<int64_t>());
    }
    if (dims > 1 && trial % 3 == 0) mask = mask.transpose(0, dims - 1);
    if (trial % 5 == 0) {
      std::vector<int64_t> wider = {3};
      wider.insert(wider.end(), mask.sizes().begin(), mask.sizes().end());
      mask = mask.unsqueeze(0).expand(wider);
    }
    for (const bool padding : {false, true}) {
      const auto read = ReadMaskValues(mask, false, padding);
      ASSERT_NE(read, std::nullopt);
      EXPECT_EQ(read, ReadMaskValues(mask.contiguous(), false, padding)) << mask.sizes() << mask.strides();
      ++compared;
    }
  }
  EXPECT_EQ(compared, 800);
}

}  // namespace
}  // namespace torchscan
