#include "formulas/communication.h"

namespace torchscan::comm {

Count CeilShare(Count bytes, Count numerator_factor, int64_t n) {
  const Count top = bytes * numerator_factor;
  const Count d(n);
  Count q = top / d;
  // Round up: a remainder means one more (partial) byte.
  if (top.exact() && q.exact() && q * d != top) q += 1;
  return q;
}

Bytes RingAllReduce(Count bytes, int64_t n) {
  if (n <= 1) return {0, 0};  // a group of one moves nothing
  const Count b = CeilShare(bytes, Count(2) * (n - 1), n);
  return {b, b};
}

Bytes RingAllGather(Count full_bytes, int64_t n) {
  if (n <= 1) return {0, 0};
  const Count b = CeilShare(full_bytes, Count(n - 1), n);
  return {b, b};
}

Bytes RingReduceScatter(Count full_bytes, int64_t n) { return RingAllGather(full_bytes, n); }

Bytes DirectBroadcast(Count bytes, int64_t n, bool is_root) {
  if (n <= 1) return {0, 0};
  return is_root ? Bytes{bytes * Count(n - 1), 0} : Bytes{0, bytes};
}

Bytes DirectReduce(Count bytes, int64_t n, bool is_root) {
  if (n <= 1) return {0, 0};
  return is_root ? Bytes{0, bytes * Count(n - 1)} : Bytes{bytes, 0};
}

Bytes DirectScatter(Count slice_bytes, int64_t n, bool is_root) { return DirectBroadcast(slice_bytes, n, is_root); }

Bytes DirectGather(Count slice_bytes, int64_t n, bool is_root) { return DirectReduce(slice_bytes, n, is_root); }

Bytes PairwiseAllToAll(Count input_bytes, Count own_input_slice, Count output_bytes, Count own_output_slice) {
  return {input_bytes - own_input_slice, output_bytes - own_output_slice};
}

}  // namespace torchscan::comm
