// The zero-cost rules: operators that cost no FLOPs by what they do (named)
// or by their schema (views). Kept apart from the formula table in
// registry.cc; both are immutable and shared by every scan.
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "formulas/registry.h"

namespace torchscan {
namespace {

// Operators whose cost is zero by what they do, not by their schema's alias
// annotations. Copies and conversions move values without arithmetic
// (torchscan_flops_v1: "views/copies/fills/allocation ... are excluded").
const absl::flat_hash_map<std::string_view, ZeroCostReason>& ZeroCostNames() {
  using R = ZeroCostReason;
  static const auto* names = new absl::flat_hash_map<std::string_view, ZeroCostReason>{
      // metadata
      {"aten::size", R::kMetadata},
      {"aten::sym_size", R::kMetadata},
      {"aten::stride", R::kMetadata},
      {"aten::sym_stride", R::kMetadata},
      {"aten::numel", R::kMetadata},
      {"aten::sym_numel", R::kMetadata},
      {"aten::dim", R::kMetadata},
      {"aten::storage_offset", R::kMetadata},
      {"aten::sym_storage_offset", R::kMetadata},
      {"aten::is_contiguous", R::kMetadata},
      {"aten::sym_is_contiguous", R::kMetadata},
      {"aten::is_strides_like_format", R::kMetadata},
      {"aten::is_non_overlapping_and_dense", R::kMetadata},
      {"aten::is_same_size", R::kMetadata},
      {"aten::is_leaf", R::kMetadata},
      {"aten::output_nr", R::kMetadata},
      {"aten::_version", R::kMetadata},
      {"aten::requires_grad_", R::kMetadata},
      {"aten::retain_grad", R::kMetadata},
      {"aten::retains_grad", R::kMetadata},
      {"aten::_has_compatible_shallow_copy_type", R::kMetadata},
      // Forward-mode AD asks it whether a tangent may be a view of its primal.
      {"aten::_has_same_storage_numel", R::kMetadata},
      {"aten::detach_", R::kMetadata},
      {"aten::as_strided_", R::kMetadata},
      {"aten::set_data", R::kMetadata},
      // torch 2.14 on: set_data as an operator (torch.compile replays input data mutations with it).
      {"aten::shallow_copy_data_", R::kMetadata},
      // In-place views: they change self's sizes/strides (their schema marks
      // self written, so the view rule does not see them).
      {"aten::transpose_", R::kMetadata},
      {"aten::t_", R::kMetadata},
      {"aten::squeeze_", R::kMetadata},
      {"aten::unsqueeze_", R::kMetadata},
      {"aten::swapaxes_", R::kMetadata},
      {"aten::swapdims_", R::kMetadata},
      // torch.profiler.record_function markers (no tensor work).
      {"profiler::_record_function_enter", R::kMetadata},
      {"profiler::_record_function_enter_new", R::kMetadata},
      {"profiler::_record_function_exit", R::kMetadata},
      // set_ rebinds a tensor to a storage (how torch::jit::load builds parameters)
      {"aten::set_", R::kMetadata},
      {"aten::is_complex", R::kMetadata},
      {"aten::is_floating_point", R::kMetadata},
      {"aten::is_conj", R::kMetadata},
      {"aten::is_neg", R::kMetadata},
      {"aten::is_inference", R::kMetadata},
      {"aten::result_type", R::kMetadata},
      {"aten::can_cast", R::kMetadata},
      {"aten::promote_types", R::kMetadata},
      {"aten::_local_scalar_dense", R::kMetadata},
      {"aten::item", R::kMetadata},
      {"aten::_assert_async", R::kMetadata},
      {"aten::_assert_tensor_metadata", R::kMetadata},
      {"aten::sym_constrain_range_for_size", R::kMetadata},
      // Reads a LAPACK info tensor and raises on a nonzero code (linalg.inv, linalg.solve): no arithmetic.
      {"aten::_linalg_check_errors", R::kMetadata},
      // Picks the SDPA backend for the inputs' metadata and returns its index.
      {"aten::_fused_sdp_choice", R::kMetadata},
      {"aten::record_stream", R::kMetadata},
      {"aten::_nested_tensor_size", R::kMetadata},
      // FSDP2's stream bookkeeping for gradient buffers (a no-op by default; torch 2.15 on).
      {"fsdp::record_grad_output_stream", R::kMetadata},
      {"prim::layout", R::kMetadata},
      {"prim::device", R::kMetadata},
      // allocation
      {"aten::empty", R::kAllocation},
      {"aten::empty_like", R::kAllocation},
      {"aten::empty_strided", R::kAllocation},
      {"aten::new_empty", R::kAllocation},
      {"aten::new_empty_strided", R::kAllocation},
      {"aten::resize_", R::kAllocation},
      {"aten::resize_as_", R::kAllocation},
      {"aten::_resize_output_", R::kAllocation},
      {"aten::empty_permuted", R::kAllocation},
      // constants
      {"aten::zeros", R::kFill},
      {"aten::zeros_like", R::kFill},
      // A zero tensor without memory: forward-mode AD's tangent of an input
      // that has none (torch.func.jvp of a weight, for instance).
      {"aten::_efficientzerotensor", R::kFill},
      {"aten::new_zeros", R::kFill},
      {"aten::ones", R::kFill},
      {"aten::ones_like", R::kFill},
      {"aten::new_ones", R::kFill},
      {"aten::full", R::kFill},
      {"aten::full_like", R::kFill},
      {"aten::new_full", R::kFill},
      {"aten::fill_", R::kFill},
      {"aten::index_fill", R::kFill},
      {"aten::index_fill_", R::kFill},
      {"aten::fill", R::kFill},
      {"aten::zero_", R::kFill},
      {"aten::_foreach_zero", R::kFill},
      {"aten::_foreach_zero_", R::kFill},
      {"aten::scalar_tensor", R::kFill},
      {"aten::eye", R::kFill},
      // Index lists computed with integer arithmetic (excluded: zero).
      {"aten::tril_indices", R::kFill},
      {"aten::triu_indices", R::kFill},
      // (arange, range, linspace and logspace compute their values: formula rows.)
      // (aten::lift_fresh returns its input: the schema's view rule.)
      {"aten::lift_fresh_copy", R::kCopy},
      // copies, conversions, gathers
      {"aten::copy_", R::kCopy},
      {"aten::copy", R::kCopy},
      {"aten::clone", R::kCopy},
      {"aten::_foreach_copy", R::kCopy},
      {"aten::_foreach_copy_", R::kCopy},
      {"aten::_foreach_clone", R::kCopy},
      {"aten::_to_copy", R::kCopy},
      {"aten::to", R::kCopy},
      {"aten::_copy_from", R::kCopy},
      {"aten::_copy_from_and_resize", R::kCopy},
      {"aten::contiguous", R::kCopy},
      {"aten::cat", R::kCopy},
      {"aten::stack", R::kCopy},
      {"aten::split_with_sizes_copy", R::kCopy},
      {"aten::_chunk_cat", R::kCopy},
      // FSDP2's gradient copy-in (torch 2.15 on): _chunk_cat that casts to the
      // output's dtype as it copies (one fused kernel on CUDA; on CPU _to_copy
      // and _chunk_cat, which this call's count stands for).
      {"fsdp::chunk_cat_mixed_dtype", R::kCopy},
      // Casts that return their input when there is nothing to cast (their
      // schema says view; what they returned decides, see ZeroCostCosts).
      {"aten::_autocast_to_reduced_precision", R::kCopy},
      {"aten::_autocast_to_full_precision", R::kCopy},
      {"aten::pin_memory", R::kCopy},
      {"aten::index_select", R::kCopy},
      {"aten::gather", R::kCopy},
      {"aten::_reshape_copy", R::kCopy},
      {"aten::repeat", R::kCopy},
      {"aten::constant_pad_nd", R::kCopy},
      {"aten::flip", R::kCopy},
      {"aten::roll", R::kCopy},
      {"aten::index", R::kCopy},
      {"aten::select_scatter", R::kCopy},
      {"aten::slice_scatter", R::kCopy},
      {"aten::diagonal_scatter", R::kCopy},
      {"aten::as_strided_scatter", R::kCopy},
      {"aten::select_backward", R::kCopy},
      {"aten::slice_backward", R::kCopy},
      {"aten::expand_copy", R::kCopy},
      {"aten::permute_copy", R::kCopy},
      {"aten::view_copy", R::kCopy},
      {"aten::t_copy", R::kCopy},
      {"aten::transpose_copy", R::kCopy},
      {"aten::reflection_pad1d", R::kCopy},
      {"aten::reflection_pad2d", R::kCopy},
      {"aten::reflection_pad3d", R::kCopy},
      {"aten::replication_pad1d", R::kCopy},
      {"aten::replication_pad2d", R::kCopy},
      {"aten::replication_pad3d", R::kCopy},
      {"aten::pixel_shuffle", R::kCopy},
      {"aten::pixel_unshuffle", R::kCopy},
      {"aten::channel_shuffle", R::kCopy},
      {"aten::native_channel_shuffle", R::kCopy},
      {"aten::im2col", R::kCopy},
      // Copying forms of views, and copies into a new layout.
      {"aten::alias_copy", R::kCopy},
      {"aten::diagonal_copy", R::kCopy},
      {"aten::slice_copy", R::kCopy},
      {"aten::split_copy", R::kCopy},
      {"aten::squeeze_copy", R::kCopy},
      {"aten::unbind_copy", R::kCopy},
      {"aten::unsqueeze_copy", R::kCopy},
      {"aten::block_diag", R::kCopy},
      {"aten::diag_embed", R::kCopy},
      {"aten::rot90", R::kCopy},
      {"aten::max_unpool2d", R::kCopy},
      {"aten::max_unpool3d", R::kCopy},
      {"aten::take", R::kCopy},
      {"aten::masked_select", R::kCopy},
      // Collectives that only move data (their bytes: the communication
      // section). Reducing ones (all-reduce, reduce, reduce-scatter) add what
      // they receive: stated exclusions below, not zero.
      {"c10d::broadcast_", R::kCommunication},
      {"c10d::allgather_", R::kCommunication},
      {"c10d::_allgather_base_", R::kCommunication},
      {"c10d::allgather_coalesced_", R::kCommunication},
      {"c10d::allgather_into_tensor_coalesced_", R::kCommunication},
      {"c10d::gather_", R::kCommunication},
      {"c10d::scatter_", R::kCommunication},
      {"c10d::alltoall_", R::kCommunication},
      {"c10d::alltoall_base_", R::kCommunication},
      {"c10d::send", R::kCommunication},
      {"c10d::recv_", R::kCommunication},
      {"c10d::recv_any_source_", R::kCommunication},
      {"c10d::barrier", R::kCommunication},
      {"c10d::monitored_barrier_", R::kCommunication},
      {"_c10d_functional::broadcast", R::kCommunication},
      {"_c10d_functional::broadcast_", R::kCommunication},
      {"_c10d_functional::all_gather_into_tensor", R::kCommunication},
      {"_c10d_functional::all_gather_into_tensor_out", R::kCommunication},
      {"_c10d_functional::all_gather_into_tensor_coalesced", R::kCommunication},
      {"_c10d_functional::all_to_all_single", R::kCommunication},
      {"_c10d_functional::isend", R::kCommunication},
      {"_c10d_functional::irecv", R::kCommunication},
      {"_c10d_functional::wait_tensor", R::kCommunication},
      {"_c10d_functional::_wrap_tensor_autograd", R::kCommunication},
      {"_c10d_functional_autograd::all_gather_into_tensor", R::kCommunication},
      {"_c10d_functional_autograd::all_to_all_single", R::kCommunication},
      {"_dtensor::shard_dim_alltoall", R::kCommunication},
      // (The legacy c10d_functional ops decompose into these.)
      // Views whose schema has no alias annotation: a new tensor on the same
      // storage (torch.matmul applies _unsafe_view after bmm).
      {"aten::_unsafe_view", R::kView},
      {"aten::unsafe_split", R::kView},
      {"aten::unsafe_split_with_sizes", R::kView},
      {"aten::unsafe_chunk", R::kView},
  };
  return *names;
}

}  // namespace

const char* ZeroCostReasonName(ZeroCostReason r) {
  switch (r) {
    case ZeroCostReason::kNone:
      return "none";
    case ZeroCostReason::kView:
      return "view";
    case ZeroCostReason::kMetadata:
      return "metadata";
    case ZeroCostReason::kAllocation:
      return "allocation";
    case ZeroCostReason::kFill:
      return "fill";
    case ZeroCostReason::kCopy:
      return "copy";
    case ZeroCostReason::kCommunication:
      return "communication";
  }
  return "unknown";
}

ZeroCostReason ClassifyZeroCost(const c10::FunctionSchema& schema) {
  const std::string& name = schema.name();
  const auto& names = ZeroCostNames();
  if (auto it = names.find(std::string_view(name)); it != names.end()) {
    // A named view's out= overload (unsafe_split.Tensor_out) copies into its destinations.
    if (it->second == ZeroCostReason::kView && schema.is_mutable()) return ZeroCostReason::kCopy;
    return it->second;
  }
  // Schema views that copy when the input's strides do not allow a view
  // (reshape of a transposed tensor clones): not zero-cost, so their
  // decomposition runs visibly and its clone is charged.
  static const auto* may_copy = new absl::flat_hash_set<std::string_view>{
      "aten::reshape", "aten::reshape_as", "aten::ravel", "aten::flatten", "aten::coalesce"};
  if (may_copy->contains(std::string_view(name))) return ZeroCostReason::kNone;
  const auto& returns = schema.returns();
  if (returns.empty()) return ZeroCostReason::kNone;
  for (const auto& r : returns) {
    const c10::AliasInfo* alias = r.alias_info();
    if (alias == nullptr || alias->isWrite()) return ZeroCostReason::kNone;
  }
  return ZeroCostReason::kView;
}

}  // namespace torchscan
