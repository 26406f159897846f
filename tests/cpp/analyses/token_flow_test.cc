// The token-flow pass (torchscan_dispatch/analyses/token_flow.h): the relation algebra
// on hand-written rows, and the pass on real ATen calls recorded by a scan.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

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
  TokenMask m;
  m.rows = 1;
  m.cols = 4;
  m.lo = {0};
  m.hi = {2};  // keys 0..2 for every query (key 3 padding, as the caller read the mask)
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

TEST(TokenFlowJson, RefusesAScopeItCannotFind) {
  // No scan on this thread: nothing to read.
  const auto j = nlohmann::json::parse(TokenFlowJson(R"({"query": "masks", "scope": 0, "path": ""})"));
  EXPECT_EQ(j["attention"], false);
}

}  // namespace
}  // namespace torchscan
