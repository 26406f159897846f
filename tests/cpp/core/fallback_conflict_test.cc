// Another library holding a fallback on the mode key: TorchScan refuses with
// a message that says so, instead of failing obscurely.
#include <gtest/gtest.h>

#include <torch/library.h>

#include "torchscan_dispatch/core/recorder.h"
#include "torchscan_dispatch/torchscan.h"

namespace torchscan {
namespace {

void OtherFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  op.redispatchBoxed(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kModeKey), stack);
}

TEST(FallbackConflict, StartFailsWithClearMessage) {
  torch::Library other(torch::Library::IMPL, "_", kModeKey, __FILE__, __LINE__);
  other.fallback(torch::CppFunction::makeFromBoxedFunction<&OtherFallback>());
  Session s;
  const torchscan::Status st = s.Start();
  EXPECT_EQ(st.code(), torchscan::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("another library already registered a fallback"), std::string::npos)
      << st.message();
  EXPECT_FALSE(ModeKeyIncluded());
}

}  // namespace
}  // namespace torchscan
