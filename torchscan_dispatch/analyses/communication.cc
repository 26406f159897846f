// One analysis over the recorded calls: the collectives, valued in bytes per
// rank (see communication.h). Runs when a report is built, never on the hot
// path. The groups they ran on: communication_groups.cc.
#include "torchscan_dispatch/analyses/communication.h"

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/communication.h"
#include "reports/metric.h"
#include "torchscan_dispatch/analyses/communication_groups.h"

namespace torchscan {
namespace {

using communication_internal::FindGroup;
using communication_internal::GroupInfo;
using communication_internal::GroupJson;

// ------------------------------------------------------------ the collectives

enum class Kind : uint8_t {
  kAllReduce,
  kAllGather,      // full = the gathered (output) size
  kReduceScatter,  // full = the input size
  kBroadcast,
  kReduce,
  kScatter,  // slice = one rank's part
  kGather,
  kAllToAll,
  kSend,
  kRecv,
  kBarrier,
  kUnsupported,
};

// How a collective's operands are laid out in its schema (argument indices;
// -1 when absent).
struct Spec {
  Kind kind;
  int data;        // the tensor (list) whose bytes define the size
  int group;       // ProcessGroup (recorded as its name) or group_name
  int group_size;  // an int group_size argument (functional ops), cross-checked
  int root;        // root / src / dst rank (group rank)
  // How `data` relates to the size the formula wants: its bytes as is, or
  // times the group size (a shard list / an input shard of an all-gather).
  bool times_group = false;
  int out = -1;                         // all-to-all: the output tensor(s)
  int splits_out = -1, splits_in = -1;  // all-to-all split sizes (dim 0)
};

const std::map<std::string, Spec, std::less<>>& Specs() {
  static const auto* specs = new std::map<std::string, Spec, std::less<>>{
      // c10d: the ops ProcessGroup's methods dispatch to (torch/csrc/distributed/c10d/Ops.cpp).
      {"c10d::allreduce_", {Kind::kAllReduce, 0, 1, -1, -1}},
      {"c10d::allreduce_coalesced_", {Kind::kAllReduce, 0, 1, -1, -1}},
      {"c10d::allgather_", {Kind::kAllGather, 1, 2, -1, -1, true}},
      {"c10d::_allgather_base_", {Kind::kAllGather, 0, 2, -1, -1}},
      {"c10d::allgather_coalesced_", {Kind::kAllGather, 1, 2, -1, -1, true}},
      {"c10d::allgather_into_tensor_coalesced_", {Kind::kAllGather, 0, 2, -1, -1}},
      {"c10d::reduce_scatter_", {Kind::kReduceScatter, 0, 2, -1, -1, true}},
      {"c10d::_reduce_scatter_base_", {Kind::kReduceScatter, 1, 2, -1, -1}},
      {"c10d::reduce_scatter_tensor_coalesced_", {Kind::kReduceScatter, 1, 2, -1, -1}},
      {"c10d::broadcast_", {Kind::kBroadcast, 0, 1, -1, 2}},
      {"c10d::reduce_", {Kind::kReduce, 0, 1, -1, 3}},
      {"c10d::gather_", {Kind::kGather, 1, 2, -1, 3}},
      {"c10d::scatter_", {Kind::kScatter, 0, 2, -1, 3}},
      {"c10d::alltoall_", {Kind::kAllToAll, 1, 2, -1, -1, false, 0}},
      {"c10d::alltoall_base_", {Kind::kAllToAll, 1, 2, -1, -1, false, 0, 3, 4}},
      {"c10d::send", {Kind::kSend, 0, 1, -1, 2}},
      {"c10d::recv_", {Kind::kRecv, 0, 1, -1, 2}},
      {"c10d::recv_any_source_", {Kind::kRecv, 0, 1, -1, -1}},
      {"c10d::barrier", {Kind::kBarrier, -1, 1, -1, -1}},
      {"c10d::monitored_barrier_", {Kind::kBarrier, -1, 1, -1, -1}},
      // Functional collectives (torch/csrc/distributed/c10d/Functional.cpp): a group name.
      {"_c10d_functional::all_reduce", {Kind::kAllReduce, 0, 2, -1, -1}},
      {"_c10d_functional::all_reduce_", {Kind::kAllReduce, 0, 2, -1, -1}},
      {"_c10d_functional::all_reduce_coalesced", {Kind::kAllReduce, 0, 2, -1, -1}},
      {"_c10d_functional::all_reduce_coalesced_", {Kind::kAllReduce, 0, 2, -1, -1}},
      {"_c10d_functional::all_gather_into_tensor", {Kind::kAllGather, 0, 2, 1, -1, true}},
      {"_c10d_functional::all_gather_into_tensor_out", {Kind::kAllGather, 0, 2, 1, -1, true}},
      {"_c10d_functional::all_gather_into_tensor_coalesced", {Kind::kAllGather, 0, 2, 1, -1, true}},
      {"_c10d_functional::reduce_scatter_tensor", {Kind::kReduceScatter, 0, 3, 2, -1}},
      {"_c10d_functional::reduce_scatter_tensor_out", {Kind::kReduceScatter, 0, 3, 2, -1}},
      {"_c10d_functional::reduce_scatter_tensor_coalesced", {Kind::kReduceScatter, 0, 3, 2, -1}},
      {"_c10d_functional::broadcast", {Kind::kBroadcast, 0, 2, -1, 1}},
      {"_c10d_functional::broadcast_", {Kind::kBroadcast, 0, 2, -1, 1}},
      {"_c10d_functional::all_to_all_single", {Kind::kAllToAll, 0, 3, -1, -1, false, -2, 1, 2}},
      {"_c10d_functional::isend", {Kind::kSend, 0, 3, -1, 1}},
      {"_c10d_functional::irecv", {Kind::kRecv, 0, 3, -1, 1}},
      {"_c10d_functional_autograd::all_gather_into_tensor", {Kind::kAllGather, 0, 2, 1, -1, true}},
      {"_c10d_functional_autograd::reduce_scatter_tensor", {Kind::kReduceScatter, 0, 3, 2, -1}},
      {"_c10d_functional_autograd::all_to_all_single", {Kind::kAllToAll, 0, 3, -1, -1, false, -2, 1, 2}},
      // The legacy functional ops name no group, only its size.
      {"c10d_functional::all_reduce", {Kind::kAllReduce, 0, -1, 4, -1}},
      {"c10d_functional::all_reduce_coalesced", {Kind::kAllReduce, 0, -1, 4, -1}},
      {"c10d_functional::all_gather_into_tensor", {Kind::kAllGather, 0, -1, 3, -1, true}},
      {"c10d_functional::all_gather_into_tensor_coalesced", {Kind::kAllGather, 0, -1, 3, -1, true}},
      {"c10d_functional::reduce_scatter_tensor", {Kind::kReduceScatter, 0, -1, 4, -1}},
      {"c10d_functional::reduce_scatter_tensor_coalesced", {Kind::kReduceScatter, 0, -1, 4, -1}},
      {"c10d_functional::isend", {Kind::kSend, 0, 3, -1, 1}},
      {"c10d_functional::irecv", {Kind::kRecv, 0, 3, -1, 1}},
      // DTensor's redistribution: an all-to-all of equal slices.
      {"_dtensor::shard_dim_alltoall", {Kind::kAllToAll, 0, 3, -1, -1, false, -3}},
  };
  return *specs;
}

// Bookkeeping ops in the communication namespaces: no data moves.
bool Bookkeeping(std::string_view name) {
  return name == "_c10d_functional::wait_tensor" || name == "c10d_functional::wait_tensor" ||
         name == "_c10d_functional::_wrap_tensor_autograd" || name == "c10d::check_for_nan" ||
         name == "_dtensor::mesh_get_process_group";
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kReduce:
      return "reduce";
    case Kind::kScatter:
      return "scatter";
    case Kind::kGather:
      return "gather";
    case Kind::kAllToAll:
      return "all_to_all";
    case Kind::kSend:
      return "send";
    case Kind::kRecv:
      return "recv";
    case Kind::kBarrier:
      return "barrier";
    case Kind::kUnsupported:
      break;
  }
  return "unsupported";
}

// The conventions a report states, by name.
const std::map<std::string, std::string>& Conventions() {
  static const auto* c = new std::map<std::string, std::string>{
      {"ring_all_reduce",
       "ring all-reduce of S bytes on n ranks (reduce-scatter then all-gather, 2(n-1) steps of S/n): "
       "each rank sends and receives ceil(2(n-1)/n x S)"},
      {"ring_all_gather", "ring all-gather into F bytes (n shards): each rank sends and receives ceil((n-1)/n x F)"},
      {"ring_reduce_scatter",
       "ring reduce-scatter of an F-byte input (n shards): each rank sends and receives ceil((n-1)/n x F)"},
      {"direct_broadcast",
       "the root sends the S-byte buffer to each other rank: root sends (n-1) x S, others receive S"},
      {"direct_reduce",
       "each non-root rank sends its S-byte buffer to the root: non-roots send S, the root receives (n-1) x S"},
      {"direct_scatter", "the root sends each other rank its slice: root sends (n-1) slices, others receive one"},
      {"direct_gather", "each non-root rank sends its slice to the root: the root receives (n-1) slices"},
      {"pairwise_all_to_all",
       "each rank sends every input slice but its own and receives every output slice but its own"},
      {"point_to_point", "send: the tensor's bytes sent; recv: the tensor's bytes received"},
      {"barrier", "no payload: 0 bytes (synchronisation messages are not counted)"},
  };
  return *c;
}

struct Valued {
  bool available = false;
  std::string reason;  // when unavailable
  std::string convention;
  Count tensor_bytes = 0;
  comm::Bytes bytes{0, 0};
  std::optional<GroupInfo> group;
  std::string reduce_op;
};

// Bytes of the tensors an argument holds (one tensor or a list); nullopt when
// one has no concrete rectangular strided shape.
std::optional<Count> ArgBytes(const ArgMeta& a) {
  auto one = [](const TensorMeta& t) -> std::optional<Count> {
    if (!t.defined) return Count(0);
    if (t.nested || !t.strided) return std::nullopt;
    return Count(t.numel()) * Count(static_cast<int64_t>(c10::elementSize(t.dtype)));
  };
  if (a.is_tensor()) return one(a.tensor());
  if (a.kind == ArgKind::kTensorList) {
    Count sum = 0;
    for (const TensorMeta& t : a.tensors()) {
      auto b = one(t);
      if (!b) return std::nullopt;
      sum += *b;
    }
    return sum;
  }
  return std::nullopt;
}

std::optional<Count> ElementBytes(const ArgMeta& a, size_t i) {
  if (a.kind != ArgKind::kTensorList || i >= a.tensors().size()) return std::nullopt;
  const TensorMeta& t = a.tensors()[i];
  if (!t.defined || t.nested || !t.strided) return std::nullopt;
  return Count(t.numel()) * Count(static_cast<int64_t>(c10::elementSize(t.dtype)));
}

// The slice of `a` (one tensor, split on dim 0) addressed to `rank`: equal
// slices when `splits` is empty or None, else splits[rank] rows.
std::optional<Count> OwnSlice(const ArgMeta& a, const ArgMeta* splits, int64_t rank, int64_t n) {
  if (!a.is_tensor()) return std::nullopt;
  const TensorMeta& t = a.tensor();
  auto bytes = ArgBytes(a);
  if (!bytes || t.ndim == 0) return std::nullopt;
  const int64_t rows = t.size(0);
  if (splits != nullptr && splits->kind == ArgKind::kIntList && !splits->ints().empty()) {
    if (static_cast<int64_t>(splits->ints().size()) != n || rank < 0 || rank >= n || rows == 0) return std::nullopt;
    return *bytes / Count(rows) * Count(splits->ints()[rank]);
  }
  if (n <= 0 || rows % n != 0) return std::nullopt;
  return *bytes / Count(n);
}

Valued Value(const Event& e, const OpInfo& info, const Spec& spec, const BlockLog<Event>& events, size_t index) {
  Valued v;
  auto arg = [&](int i) -> const ArgMeta& {
    return i >= 0 && i < static_cast<int>(e.args().size()) ? e.args()[i] : OpCall::kNoneArg;
  };
  if (e.raised()) {
    v.reason = "the call raised: what it moved is unknown";
    return v;
  }
  if (spec.kind == Kind::kUnsupported) {
    v.reason = "TorchScan has no byte convention for this collective";
    return v;
  }
  // The group: recorded name (c10d ProcessGroup or functional group_name).
  int64_t n = -1;
  if (spec.group >= 0 && arg(spec.group).kind == ArgKind::kString) {
    const std::string name(arg(spec.group).str());
    v.group = FindGroup(name);
    if (!v.group) {
      // A functional op's c10d child (when recorded) carries the group object.
      for (size_t j = index + 1; j < events.size() && !v.group; ++j) {
        int32_t p = events[j].parent;
        while (p > static_cast<int32_t>(index)) p = events[p].parent;
        if (p != static_cast<int32_t>(index)) break;  // left the subtree
        for (const ArgMeta& a : events[j].args()) {
          if (a.kind == ArgKind::kString) {
            if (auto g = FindGroup(std::string(a.str())); g && g->name == std::string(a.str())) v.group = g;
          }
        }
      }
    }
    if (!v.group) {
      v.reason =
          absl::StrCat("its process group \"", name,
                       "\" is not registered with c10d (or was destroyed before the report): its size is unknown");
      return v;
    }
    n = v.group->size;
  }
  if (spec.group_size >= 0 && arg(spec.group_size).kind == ArgKind::kInt) {
    const int64_t stated = arg(spec.group_size).to_int();
    if (n >= 0 && stated != n) {
      v.reason = absl::StrCat("its group_size argument (", stated, ") differs from its group's size (", n, ")");
      return v;
    }
    n = stated;
  }
  if (n <= 0) {
    v.reason = "the size of its process group was not recorded";
    return v;
  }
  const int64_t rank = v.group ? v.group->rank : -1;
  std::optional<Count> data = spec.data >= 0 ? ArgBytes(arg(spec.data)) : std::optional<Count>(Count(0));
  if (!data) {
    v.reason = "its tensors have no concrete dense shape (nested, symbolic or sparse): their bytes are unknown";
    return v;
  }
  if (spec.kind == Kind::kAllReduce && e.args().size() > 3 && info.name == "c10d::allreduce_" && !arg(3).is_none()) {
    v.reason = "a sparse all-reduce (sparse_indices given): its payload depends on the indices' values";
    return v;
  }
  const Count size = spec.times_group ? *data * Count(n) : *data;
  v.tensor_bytes = size;
  auto need_rank = [&]() {
    if (rank >= 0 && rank < n) return true;
    v.reason = "this rank's position in its group was not recorded (a group named by size only)";
    return false;
  };
  auto root = [&]() -> std::optional<int64_t> {
    if (spec.root >= 0 && arg(spec.root).kind == ArgKind::kInt) return arg(spec.root).to_int();
    return std::nullopt;
  };
  switch (spec.kind) {
    case Kind::kAllReduce:
      v.convention = "ring_all_reduce";
      v.bytes = comm::RingAllReduce(size, n);
      break;
    case Kind::kAllGather:
      v.convention = "ring_all_gather";
      v.bytes = comm::RingAllGather(size, n);
      break;
    case Kind::kReduceScatter:
      v.convention = "ring_reduce_scatter";
      v.bytes = comm::RingReduceScatter(size, n);
      break;
    case Kind::kBroadcast:
    case Kind::kReduce:
    case Kind::kScatter:
    case Kind::kGather: {
      const auto r = root();
      if (!need_rank()) return v;
      if (!r) {
        v.reason = "its root rank was not recorded";
        return v;
      }
      const bool is_root = *r == rank;
      if (spec.kind == Kind::kBroadcast) {
        v.convention = "direct_broadcast";
        v.bytes = comm::DirectBroadcast(size, n, is_root);
      } else if (spec.kind == Kind::kReduce) {
        v.convention = "direct_reduce";
        v.bytes = comm::DirectReduce(size, n, is_root);
      } else if (spec.kind == Kind::kScatter) {
        // scatter_'s outputs are this rank's slice.
        v.convention = "direct_scatter";
        v.bytes = comm::DirectScatter(size, n, is_root);
      } else {
        v.convention = "direct_gather";  // gather_'s inputs are this rank's slice
        v.bytes = comm::DirectGather(size, n, is_root);
      }
      break;
    }
    case Kind::kAllToAll: {
      if (!need_rank()) return v;
      v.convention = "pairwise_all_to_all";
      std::optional<Count> in_own, out_bytes, out_own;
      if (spec.out == 0 && arg(spec.data).kind == ArgKind::kTensorList) {
        // c10d::alltoall_: one tensor per peer.
        in_own = ElementBytes(arg(spec.data), rank);
        out_bytes = ArgBytes(arg(0));
        out_own = ElementBytes(arg(0), rank);
      } else if (spec.out == 0) {
        // c10d::alltoall_base_: one tensor each way, split on dim 0.
        in_own = OwnSlice(arg(spec.data), &arg(spec.splits_in), rank, n);
        out_bytes = ArgBytes(arg(0));
        out_own = OwnSlice(arg(0), &arg(spec.splits_out), rank, n);
      } else if (spec.out == -2) {
        // Functional all_to_all_single: the output is the return.
        in_own = OwnSlice(arg(spec.data), &arg(spec.splits_in), rank, n);
        out_bytes = e.outputs().empty() ? std::nullopt : ArgBytes(e.outputs()[0]);
        out_own = e.outputs().empty() ? std::nullopt : OwnSlice(e.outputs()[0], &arg(spec.splits_out), rank, n);
      } else {
        // shard_dim_alltoall: n equal slices each way (on shard_dim / gather_dim),
        // the output as large as the input.
        if (size / Count(n) * Count(n) != size) {
          v.reason = "its input does not split into equal slices over the group";
          return v;
        }
        in_own = size / Count(n);
        out_bytes = size;
        out_own = size / Count(n);
      }
      if (!in_own || !out_bytes || !out_own) {
        v.reason = "its split sizes do not describe its tensors (or a tensor's shape is unknown)";
        return v;
      }
      v.bytes = comm::PairwiseAllToAll(size, *in_own, *out_bytes, *out_own);
      v.tensor_bytes = size;
      break;
    }
    case Kind::kSend:
      v.convention = "point_to_point";
      v.bytes = {size, 0};
      break;
    case Kind::kRecv:
      v.convention = "point_to_point";
      v.bytes = {0, size};
      break;
    case Kind::kBarrier:
      v.convention = "barrier";
      v.bytes = {0, 0};
      v.tensor_bytes = 0;
      break;
    case Kind::kUnsupported:
      return v;  // refused above
  }
  if (!v.bytes.sent.exact() || !v.bytes.received.exact()) {
    v.reason = "its byte count passes 2^128 - 1";
    return v;
  }
  v.available = true;
  return v;
}

}  // namespace

bool IsCommunicationOp(const std::string& name) {
  if (Bookkeeping(name)) return false;
  return absl::StartsWith(name, "c10d::") || absl::StartsWith(name, "_c10d_functional") ||
         absl::StartsWith(name, "c10d_functional::") || absl::StartsWith(name, "_dtensor::") ||
         absl::StartsWith(name, "symm_mem::");
}

void CommunicationSums::Add(const CommunicationSums& o) {
  for (const auto& call : o.calls) calls.push_back(call);
  for (const auto& [packet, row] : o.op_sums) {
    OpSums& mine = op_sums[packet];
    mine.calls += row.calls;
    mine.unavailable += row.unavailable;
    mine.sent += row.sent;
    mine.received += row.received;
  }
  for (const auto& [name, g] : o.groups) {
    auto [it, inserted] = groups.try_emplace(name, g);
    if (!inserted) it->second["calls"] = it->second["calls"].get<int64_t>() + g["calls"].get<int64_t>();
  }
  for (const auto& [name, uses] : o.used_conventions) used_conventions[name] += uses;
  sent += o.sent;
  received += o.received;
  complete = complete && o.complete;
  for (const auto& [packet, u] : o.unavailable) {
    auto [it, inserted] = unavailable.try_emplace(packet, u);
    if (!inserted) it->second.first += u.first;
  }
}

nlohmann::json CommunicationJson(const BlockLog<Event>& events, OpCatalog& catalog, const std::string& scope,
                                 const CommunicationSums* before) {
  CommunicationSums sums = before ? *before : CommunicationSums();
  AccumulateCommunication(events, catalog, 0, sums);
  return FinishCommunication(std::move(sums), scope);
}

void AccumulateCommunication(const BlockLog<Event>& events, OpCatalog& catalog, int64_t first_index,
                             CommunicationSums& sums) {
  using json = nlohmann::json;
  json& calls = sums.calls;
  auto& op_sums = sums.op_sums;
  auto& groups = sums.groups;
  auto& used_conventions = sums.used_conventions;
  Count& sent = sums.sent;
  Count& received = sums.received;
  bool& complete = sums.complete;
  auto& unavailable = sums.unavailable;
  // Which calls are collectives, and which have one among their descendants
  // (children follow their parents, so one reverse pass sees them first).
  std::vector<char> is_comm(events.size(), 0);
  absl::flat_hash_map<const CallSig*, char> comm;  // once per signature
  const CallSig* last = nullptr;                   // a loop repeats the last event's signature
  char last_comm = 0;
  bool any = false;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].sig != last) {
      auto [it, fresh] = comm.try_emplace(events[i].sig, 0);
      if (fresh) it->second = IsCommunicationOp(catalog.Get(events[i].op()).name);
      last = events[i].sig;
      last_comm = it->second;
    }
    is_comm[i] = last_comm;
    any = any || last_comm;
  }
  if (!any) return;  // no collective: nothing below adds to the sums
  std::vector<char> comm_below(events.size(), 0), counted(events.size(), 0);
  for (size_t i = events.size(); i-- > 0;) {
    const int32_t p = events[i].parent;
    if (p >= 0 && (is_comm[i] || comm_below[i])) comm_below[p] = 1;
  }
  for (size_t i = 0; i < events.size(); ++i) {
    if (!is_comm[i]) continue;
    const Event& e = events[i];
    const OpInfo& info = catalog.Get(e.op());
    // A legacy c10d_functional op decomposes into the functional ones, which
    // name the group: they are counted, not it.
    if (comm_below[i] && absl::StartsWith(info.name, "c10d_functional::")) continue;
    // A collective made by another one (a functional op's c10d call) is part
    // of its parent's transfer, not a second one.
    bool nested = false;
    for (int32_t p = e.parent; p >= 0 && !nested; p = events[p].parent) nested = counted[p] != 0;
    if (nested) continue;
    counted[i] = 1;
    auto it = Specs().find(info.name);
    const Spec unsupported{Kind::kUnsupported, -1, -1, -1, -1};
    const Spec& spec = it == Specs().end() ? unsupported : it->second;
    const Valued v = Value(e, info, spec, events, i);
    json call = {{"index", first_index + static_cast<int64_t>(i)},
                 {"op", info.packet},
                 {"overload", info.overload},
                 {"collective", KindName(spec.kind)}};
    call["group"] = v.group ? GroupJson(*v.group) : json();
    // The reduction, when the recorder stored a ReduceOp (c10d) or the op names it (functional).
    for (const ArgMeta& a : e.args()) {
      if (a.kind != ArgKind::kString) continue;
      const std::string s(a.str());
      static const char* const kOps[] = {"sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum"};
      for (const char* op : kOps) {
        if (s == op) call["reduce_op"] = s;
      }
    }
    CommunicationSums::OpSums& row = op_sums[info.packet];
    ++row.calls;
    if (v.available) {
      call["status"] = "complete";
      call["tensor_bytes"] = reports::CountJson(v.tensor_bytes);
      call["bytes_sent"] = reports::CountJson(v.bytes.sent);
      call["bytes_received"] = reports::CountJson(v.bytes.received);
      call["convention"] = v.convention;
      ++used_conventions[v.convention];
      sent += v.bytes.sent;
      received += v.bytes.received;
      row.sent += v.bytes.sent;
      row.received += v.bytes.received;
    } else {
      complete = false;
      call["status"] = "unavailable";
      call["tensor_bytes"] = v.tensor_bytes == 0 ? json() : reports::CountJson(v.tensor_bytes);
      call["bytes_sent"] = nullptr;
      call["bytes_received"] = nullptr;
      call["convention"] = nullptr;
      call["reason"] = v.reason;
      ++row.unavailable;
      auto& u = unavailable[info.packet];
      if (u.first++ == 0) u.second = v.reason;
    }
    if (v.group) {
      json& g = groups[v.group->name];
      if (g.is_null()) {
        g = GroupJson(*v.group);
        g["calls"] = 0;
      }
      g["calls"] = g["calls"].get<int64_t>() + 1;
    }
    calls.push_back(std::move(call));
  }
}

nlohmann::json FinishCommunication(CommunicationSums sums, const std::string& scope) {
  using json = nlohmann::json;
  json calls = std::move(sums.calls);
  const auto& op_sums = sums.op_sums;
  auto& groups = sums.groups;
  const auto& used_conventions = sums.used_conventions;
  const Count sent = sums.sent, received = sums.received;
  const bool complete = sums.complete;
  const auto& unavailable = sums.unavailable;
  const bool exact = sent.exact() && received.exact();
  const MetricStatus status = complete && exact ? MetricStatus::kComplete : MetricStatus::kPartial;
  json out;
  out["kind"] = "torchscan_communication";
  out["totals"] = {
      {"bytes_sent", reports::MetricJson({status, sent, "bytes", scope, "collective_conventions"})},
      {"bytes_received", reports::MetricJson({status, received, "bytes", scope, "collective_conventions"})},
      {"collective_calls", calls.size()},
  };
  out["calls"] = std::move(calls);
  out["by_operator"] = json::object();
  for (const auto& [packet, row] : op_sums) {
    // CountJson: exact past 2^64 - 1, null once a sum passed 2^128 - 1.
    out["by_operator"][packet] = {{"calls", row.calls},
                                  {"bytes_sent", reports::CountJson(row.sent)},
                                  {"bytes_received", reports::CountJson(row.received)},
                                  {"unavailable_calls", row.unavailable}};
  }
  out["groups"] = json::array();
  for (auto& [name, g] : groups) out["groups"].push_back(std::move(g));
  out["conventions"] = json::object();
  for (const auto& [name, uses] : used_conventions) out["conventions"][name] = Conventions().at(name);
  out["diagnostics"] = json::array();
  for (const auto& [packet, u] : unavailable) {
    for (const char* metric : {"bytes_sent", "bytes_received"}) {
      out["diagnostics"].push_back(reports::DiagnosticJson(
          {"unavailable_collective", "warning", metric,
           absl::StrCat(packet, " ran ", u.first, " time(s) and its bytes are not known: ", u.second, "; ", metric,
                        " is a lower bound"),
           packet, std::nullopt, u.first}));
    }
  }
  out["meaning"] =
      "bytes this rank sent and received in the collectives it called, each valued by the named convention "
      "(payload only: no headers, retries or intra-host copies); not FLOPs, and not measured traffic";
  return out;
}

}  // namespace torchscan
