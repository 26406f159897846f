// Byte conventions of collectives (formulas/communication.h). Every expected
// value is derived by hand in its comment from the convention's definition.
#include "formulas/communication.h"

#include <gtest/gtest.h>

namespace torchscan::comm {
namespace {

TEST(CommunicationFormulas, RingAllReduce) {
  // DDP's bucket of 232 bytes on 2 ranks: 2(2-1)/2 x 232 = 232 each way.
  Bytes b = RingAllReduce(232, 2);
  EXPECT_EQ(b.sent, Count(232));
  EXPECT_EQ(b.received, Count(232));
  // 400 bytes on 4 ranks: 2 x 3 / 4 x 400 = 600.
  EXPECT_EQ(RingAllReduce(400, 4).sent, Count(600));
  // 10 bytes on 3 ranks: 2 x 2 / 3 x 10 = 13.33..., rounded up to 14.
  EXPECT_EQ(RingAllReduce(10, 3).sent, Count(14));
  // A group of one moves nothing.
  EXPECT_EQ(RingAllReduce(232, 1).sent, Count(0));
}

TEST(CommunicationFormulas, RingAllGatherAndReduceScatter) {
  // Gathering 232 bytes over 2 ranks: each forwards the other's half, 116.
  EXPECT_EQ(RingAllGather(232, 2).sent, Count(116));
  EXPECT_EQ(RingAllGather(232, 2).received, Count(116));
  // 12 bytes over 3 ranks: 2/3 x 12 = 8.
  EXPECT_EQ(RingReduceScatter(12, 3).received, Count(8));
  // 10 bytes over 4 ranks: 3/4 x 10 = 7.5 -> 8.
  EXPECT_EQ(RingReduceScatter(10, 4).sent, Count(8));
}

TEST(CommunicationFormulas, DirectRootedCollectives) {
  // Broadcast of 20 bytes to 4 ranks: the root sends 3 x 20 = 60, others receive 20.
  EXPECT_EQ(DirectBroadcast(20, 4, true).sent, Count(60));
  EXPECT_EQ(DirectBroadcast(20, 4, true).received, Count(0));
  EXPECT_EQ(DirectBroadcast(20, 4, false).received, Count(20));
  EXPECT_EQ(DirectBroadcast(20, 4, false).sent, Count(0));
  // Reduce: the mirror image.
  EXPECT_EQ(DirectReduce(20, 4, true).received, Count(60));
  EXPECT_EQ(DirectReduce(20, 4, false).sent, Count(20));
  // Scatter / gather of 8-byte slices on 3 ranks: the root moves 2 slices, 16.
  EXPECT_EQ(DirectScatter(8, 3, true).sent, Count(16));
  EXPECT_EQ(DirectScatter(8, 3, false).received, Count(8));
  EXPECT_EQ(DirectGather(8, 3, true).received, Count(16));
  EXPECT_EQ(DirectGather(8, 3, false).sent, Count(8));
  EXPECT_EQ(DirectBroadcast(20, 1, true).sent, Count(0));
}

TEST(CommunicationFormulas, PairwiseAllToAll) {
  // 16-byte input, 4 bytes of it addressed to this rank; 24-byte output, 6 of them its own.
  const Bytes b = PairwiseAllToAll(16, 4, 24, 6);
  EXPECT_EQ(b.sent, Count(12));
  EXPECT_EQ(b.received, Count(18));
}

TEST(CommunicationFormulas, CeilShareRefusesWhatItCannotHold) {
  // 2^127 x 4 passes 2^128 - 1: inexact, never wrapped.
  const Count huge = Count::FromWide(Count::Wide{1} << 127);
  EXPECT_FALSE(CeilShare(huge, 4, 2).exact());
  EXPECT_EQ(CeilShare(7, 1, 2), Count(4));  // 3.5 -> 4
}

}  // namespace
}  // namespace torchscan::comm
