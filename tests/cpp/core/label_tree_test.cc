// Module label sets (by_module) stored as a tree: storage linear in the
// nesting depth, and the same attribution as a flat set of labels.
#include <gtest/gtest.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

using Names = std::vector<std::string>;

// ModuleTracker-style labels of a chain: "Chain", "Chain.child", ...
std::vector<std::string> ChainLabels(int depth) {
  std::vector<std::string> labels{"Chain"};
  for (int i = 1; i < depth; ++i) labels.push_back(labels.back() + ".child");
  return labels;
}

// Entries a recorder keeps for its label sets after a forward through a chain
// of `depth` nested modules (enter all, leave in reverse).
size_t EntriesAfterChain(int depth) {
  Recorder r;
  r.SetLabels({"Global"});
  const auto labels = ChainLabels(depth);
  for (const auto& l : labels) r.EnterLabel(l);
  for (auto it = labels.rbegin(); it != labels.rend(); ++it) r.ExitLabel(*it);
  return r.label_sets().size() + r.label_sets().labels();
}

TEST(LabelTree, StorageIsLinearInNestingDepth) {
  // One node per label entered plus the empty set, one stored string per
  // label: Global + d chain labels -> (d + 2) nodes and (d + 1) strings. The
  // flat representation kept d + 1 sets holding 1 + 2 + ... + (d + 1) strings.
  EXPECT_EQ(EntriesAfterChain(100), 102u + 101u);
  EXPECT_EQ(EntriesAfterChain(400), 402u + 401u);
}

TEST(LabelTree, LeavingInReverseOrderReusesSets) {
  Recorder r;
  for (int pass = 0; pass < 3; ++pass) {
    r.EnterLabel("A");
    r.EnterLabel("B");
    r.ExitLabel("B");
    r.ExitLabel("A");
  }
  EXPECT_EQ(r.label_sets().size(), 3u);  // {}, {A}, {A, B}
}

TEST(LabelTree, LeavingOutOfOrderKeepsTheOthers) {
  Recorder r;
  r.EnterLabel("A");
  r.EnterLabel("B");
  r.EnterLabel("C");
  r.EnterLabel("B");  // already in: no-op
  r.ExitLabel("B");   // backward passes leave modules in any order
  r.ExitLabel("Z");   // never entered: no-op
  // The recorder's current set is the one the next call is tagged with; find
  // it as the newest node.
  const LabelTree& t = r.label_sets();
  const int32_t newest = static_cast<int32_t>(t.size()) - 1;
  EXPECT_EQ(t.Names(newest), (Names{"A", "C"}));
  r.ExitLabel("A");
  EXPECT_EQ(t.Names(static_cast<int32_t>(t.size()) - 1), (Names{"C"}));
  r.SetLabels({"Global", "Net"});  // replaces the whole set
  r.ExitLabel("C");                // not in the set any more: no-op
  EXPECT_EQ(t.Names(static_cast<int32_t>(t.size()) - 1), (Names{"Global", "Net"}));
}

TEST(LabelTree, ImportCopiesSetsOnce) {
  LabelTree from;
  const int32_t a = from.With(LabelTree::kEmpty, from.Intern("A"));
  const int32_t ab = from.With(a, from.Intern("B"));
  const int32_t ac = from.With(a, from.Intern("C"));
  LabelTree to;
  to.With(LabelTree::kEmpty, to.Intern("X"));  // ids differ between the trees
  std::vector<int32_t> memo;
  EXPECT_EQ(to.Names(to.Import(from, ab, memo)), (Names{"A", "B"}));
  EXPECT_EQ(to.Names(to.Import(from, ac, memo)), (Names{"A", "C"}));
  EXPECT_EQ(to.Import(from, LabelTree::kEmpty, memo), LabelTree::kEmpty);
  EXPECT_EQ(to.size(), 5u);  // {}, {X}, {A}, {A, B}, {A, C}
}

// by_module through Enter/Exit on both report paths (one recorder, and logs
// gathered from threads), against sums derived by hand.
void ExpectByModule(Threads threads) {
  const at::Tensor a = at::ones({2, 3}), b = at::ones({3, 4});  // mm: 2*4*3*2 = 48
  Session s(ScanOptions{"workload", threads});
  {
    ScanGuard guard(s);
    ASSERT_TRUE(s.SetModuleLabels({"Global"}).ok());
    ASSERT_TRUE(s.EnterModuleLabel("Net").ok());
    ASSERT_TRUE(s.EnterModuleLabel("Net.a").ok());
    at::mm(a, b);  // Global, Net, Net.a
    ASSERT_TRUE(s.EnterModuleLabel("Net.b").ok());
    at::mm(a, b);                                  // Global, Net, Net.a, Net.b
    ASSERT_TRUE(s.ExitModuleLabel("Net.a").ok());  // out of order
    at::mm(a, b);                                  // Global, Net, Net.b
    ASSERT_TRUE(s.ExitModuleLabel("Net.b").ok());
    ASSERT_TRUE(s.ExitModuleLabel("Net").ok());
    at::mm(a, b);  // Global
  }
  const auto r = nlohmann::json::parse(s.FlopReportJson().value());
  EXPECT_EQ(r["total"]["value"], 4 * 48);
  EXPECT_EQ(r["by_module"], nlohmann::json({{"Global", 4 * 48}, {"Net", 3 * 48}, {"Net.a", 2 * 48}, {"Net.b", 2 * 48}}))
      << r.dump(1);
}

TEST(LabelTree, ByModuleFromOneRecorder) { ExpectByModule(Threads::kCurrent); }
TEST(LabelTree, ByModuleFromGatheredThreadLogs) { ExpectByModule(Threads::kAll); }

}  // namespace
}  // namespace torchscan
