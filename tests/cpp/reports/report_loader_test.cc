// The loader and the counts it reads: exact up to 2^128 - 1 through text and
// from the builders, repeated keys and deep nesting refused while parsing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "formulas/count.h"
#include "reports/diff.h"
#include "reports/flop_report.h"
#include "reports/render.h"
#include "reports/validate.h"
#include "tests/cpp/reports/reader_testing.h"

namespace torchscan::reports {
namespace {

using json = nlohmann::json;
using testing::GetSeeds;
using testing::Huge;

TEST(ReportReaders, CountsTo2To128AreReadExactly) {
  // Through text, as every caller of the loader sees them.
  const auto huge = LoadReport(DumpJson(Huge()));
  ASSERT_TRUE(huge.ok()) << huge.status();
  const auto text = RenderReport(*huge);
  ASSERT_TRUE(text.ok()) << text.status();
  // 2^64 - 1 = 18,446,744,073,709,551,615 -> 18.45 x 10^18 ("E", exa).
  EXPECT_NE(text->find("Module view (TorchScan conventions): 18.45E FLOPs"), std::string::npos) << *text;
  json before = GetSeeds().analysis;
  const auto d = CompareReports(before, *huge);
  ASSERT_TRUE(d.ok()) << d.status();
  // 2^64 - 1 - 36, exact (the seed's module_flops total is 36).
  EXPECT_EQ((*d)["totals"]["module_flops"]["delta"].get<uint64_t>(), UINT64_MAX - 36);
  // 2^65 - 28 exactly (the seed's first call of "0" has 28 dmas):
  // 36893488147419103232 - 28 = 36893488147419103204.
  const std::string out = DumpJson(*d);
  EXPECT_NE(out.find("\"delta\":36893488147419103204,"), std::string::npos) << out;
  // And back: the reverse diff's delta is the negative of it.
  const auto back = CompareReports(*huge, before);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_NE(DumpJson(*back).find("\"delta\":-36893488147419103204,"), std::string::npos) << DumpJson(*back);
}

// Two FlopReports of 2^64 and 2^64 + 2 FLOPs, all of them aten.mm. Through
// doubles both would be 2^64 (delta 0, aten.mm unchanged): the delta is exact.
TEST(ReportReaders, DiffPast2To64IsExact) {
  const std::string two64 = "18446744073709551616", two64_2 = "18446744073709551618";
  auto flop_text = [](const std::string& n) {
    return "{\"schema_version\": 1, \"context\": {}, \"total\": {\"status\": \"complete\", \"value\": " + n +
           ", \"known_value\": " + n +
           ", \"unit\": \"FLOPs\", \"scope\": \"forward\", \"method\": \"m\"}, "
           "\"by_module\": {}, \"by_operator\": {\"aten.mm\": " +
           n +
           "}, \"ignored_operators\": {}, "
           "\"diagnostics\": []}";
  };
  const auto b = LoadReport(flop_text(two64)), a = LoadReport(flop_text(two64_2));
  ASSERT_TRUE(b.ok() && a.ok()) << b.status() << a.status();
  const auto d = CompareReports(*b, *a);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)["totals"]["operator_flops"]["delta"], 2);
  ASSERT_TRUE((*d)["by_operator"].contains("aten.mm")) << DumpJson(*d);
  EXPECT_EQ((*d)["by_operator"]["aten.mm"]["delta"], 2);
  EXPECT_NE(DumpJson(*d).find("\"value\":18446744073709551618"), std::string::npos) << DumpJson(*d);
  // 2^128 - 1 is the largest count; 2^128 and 2^200 are refused wherever a count is read.
  EXPECT_TRUE(LoadReport(flop_text("340282366920938463463374607431768211455")).ok());
  for (const std::string n :
       {"340282366920938463463374607431768211456", "1606938044258990275541962092341162602522202993782792835301376"}) {
    const auto r = LoadReport(flop_text(n), {"big.json", ""});
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().message().rfind("big.json: total.value: a count past 2^128 - 1", 0), 0) << r.status();
  }
  // A count written as a float is exact only below 2^53.
  const auto f = LoadReport(flop_text("1e20"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("total.value: expected an integer count, got the float"), std::string::npos)
      << f.status();
  EXPECT_TRUE(LoadReport(flop_text("4096.0")).ok());
}

// JSON leaves a repeated key's meaning open: the loader refuses it, naming
// the object, wherever it is.
TEST(ReportReaders, DuplicateKeysAreRefused) {
  const std::string text = DumpJson(GetSeeds().flop);
  const size_t at = text.find("\"status\":");
  ASSERT_NE(at, std::string::npos);
  std::string dup = text;
  dup.insert(at, "\"status\":\"partial\",");
  const auto r = LoadReport(dup, {"d.json", "after"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "after report (d.json): total: the key \"status\" appears twice in one object; a "
            "report names each field once (which one was meant is unknowable)");
  const auto top = LoadReport("{\"schema_version\": 1, \"schema_version\": 1}");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.status().message().rfind("(top level): the key \"schema_version\" appears twice", 0), 0)
      << top.status();
  const auto in_array = LoadReport("{\"layers\": [{}, {\"a\": 1, \"b\": {\"x\": 1, \"x\": 2}}]}");
  ASSERT_FALSE(in_array.ok());
  EXPECT_EQ(in_array.status().message().rfind("layers[1].b: the key \"x\" appears twice", 0), 0) << in_array.status();
  // The same key in sibling objects is fine.
  EXPECT_TRUE(ParseReportJson("[{\"x\": 1}, {\"x\": 2}]").ok());
}

// 10^5 levels: refused by the parser at the limit, without recursion.
TEST(ReportReaders, DeepTextIsRefusedWhileParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto r = LoadReport(deep, {"deep.json", ""});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested more than 200 levels deep"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().message().rfind("deep.json: [0][0]", 0), 0) << r.status();
}

// In memory, builders hold counts past 2^64 - 1 as binary values (CountJson);
// the readers take them as a parser would see the text DumpJson writes.
TEST(ReportReaders, BuilderCountsPast2To64RenderAndDiff) {
  FlopTally wide, small;
  const Count big = Count::FromWide(Count::Wide{1} << 70);  // 2^70 = 1,180,591,620,717,411,303,424
  wide.by_operator = {{"aten.mm", big}};
  wide.known = big;
  small.by_operator = {{"aten.mm", 64}};
  small.known = 64;
  const json r = FlopReportJson(wide);
  EXPECT_TRUE(ValidateReport(r).ok()) << ValidateReport(r).status();
  const auto text = RenderReport(r);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->rfind("Operator FLOPs: 1.18Z (complete)\n", 0), 0) << *text;  // 1.18 x 10^21
  const auto d = CompareReports(FlopReportJson(small), r);
  ASSERT_TRUE(d.ok()) << d.status();
  // 2^70 - 64 = 1,180,591,620,717,411,303,360, exactly.
  EXPECT_NE(DumpJson((*d)["by_operator"]["aten.mm"]).find("\"delta\":1180591620717411303360,"), std::string::npos)
      << DumpJson(*d);
}

}  // namespace
}  // namespace torchscan::reports
