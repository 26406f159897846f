// The formula table and the stated exclusions never name the same operator:
// an operator is either counted or excluded with a reason, not both.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "formulas/registry.h"

namespace torchscan {
namespace {

TEST(TrainingRegistry, NoOperatorIsBothCountedAndExcluded) {
  for (const Exclusion& e : StatedExclusions()) {
    EXPECT_EQ(FindOperatorFormula(e.op), nullptr) << std::string(e.op) << " has a formula and a stated exclusion";
  }
}

TEST(TrainingRegistry, EveryRowNamesADistinctOperator) {
  std::set<std::string_view> seen;
  for (const OperatorFormula& f : BuiltinOperatorFormulas()) {
    EXPECT_TRUE(seen.insert(f.op).second) << std::string(f.op) << " has two rows";
  }
}

}  // namespace
}  // namespace torchscan
