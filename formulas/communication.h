// Bytes one rank sends and receives in a collective, by a stated algorithm
// convention. Pure functions of sizes and group shape: which collective ran
// and with which group is decided by torchscan_dispatch/communication.cc.
//
// Every value is a payload convention, not a measurement: what the named
// algorithm moves between processes (headers, retries, the backend's own
// chunking and intra-host copies are not counted). A value that is not a
// whole number of bytes is rounded up (ceil), so a convention never
// undercounts its own model.
#pragma once

#include <cstdint>

#include "formulas/count.h"

namespace torchscan::comm {

struct Bytes {
  Count sent;
  Count received;
};

// ceil(numerator_factor * bytes / n): the share of `bytes` a ring step pattern moves.
Count CeilShare(Count bytes, Count numerator_factor, int64_t n);

// "ring" all-reduce of a `bytes`-sized buffer on n ranks: a reduce-scatter
// (n - 1 steps, each rank sends one chunk of bytes/n to its successor and
// receives one from its predecessor) then an all-gather of the reduced chunks
// (n - 1 more such steps): 2 (n - 1) / n x bytes sent and as many received.
Bytes RingAllReduce(Count bytes, int64_t n);

// "ring" all-gather into a buffer of `full_bytes` (n shards of full/n): each
// rank forwards n - 1 shards around the ring: (n - 1) / n x full sent and received.
Bytes RingAllGather(Count full_bytes, int64_t n);

// "ring" reduce-scatter of an input of `full_bytes` (the reduce-scatter half
// of the ring all-reduce): (n - 1) / n x full sent and received.
Bytes RingReduceScatter(Count full_bytes, int64_t n);

// "direct" broadcast: the root sends the whole buffer to each of the n - 1
// other ranks ((n - 1) x bytes sent); every other rank receives it once.
Bytes DirectBroadcast(Count bytes, int64_t n, bool is_root);

// "direct" reduce to a root: every other rank sends its whole buffer to the
// root, which receives n - 1 of them (and reduces them locally).
Bytes DirectReduce(Count bytes, int64_t n, bool is_root);

// "direct" scatter / gather of n slices of `slice_bytes`: the root keeps its
// own slice and sends (scatter) or receives (gather) the n - 1 others; every
// other rank receives (scatter) or sends (gather) one slice.
Bytes DirectScatter(Count slice_bytes, int64_t n, bool is_root);
Bytes DirectGather(Count slice_bytes, int64_t n, bool is_root);

// "pairwise" all-to-all: a rank sends every slice of its input except the one
// addressed to itself and receives every slice of its output except its own.
Bytes PairwiseAllToAll(Count input_bytes, Count own_input_slice, Count output_bytes, Count own_output_slice);

}  // namespace torchscan::comm
