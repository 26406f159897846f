// The process groups the collectives ran on (communication_groups.h), the
// recorder hook that notes them, and the distributed context of a report.
// The hook runs for custom-class arguments only, which only c10d operators
// take.
#include "torchscan_dispatch/analyses/communication_groups.h"

#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "torchscan_dispatch/analyses/communication.h"

namespace torchscan {
namespace communication_internal {
namespace {

constexpr char kProcessGroupClass[] = "__torch__.torch.classes.c10d.ProcessGroup";
constexpr char kReduceOpClass[] = "__torch__.torch.classes.c10d.ReduceOp";

// Groups seen by the recorder while their calls ran, by name: a group the
// program destroys before the report is built is still known. Process-wide
// (groups are), guarded: calls from several threads may record groups.
std::mutex& GroupsMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::string, GroupInfo>& SeenGroups() {
  static auto* groups = new std::map<std::string, GroupInfo>;
  return *groups;
}

GroupInfo InfoOf(const c10d::ProcessGroup& pg) {
  GroupInfo g;
  g.name = pg.getGroupName();
  g.description = pg.getGroupDesc();
  g.backend = pg.getBackendName();
  g.rank = pg.getRank();
  g.size = pg.getSize();
  return g;
}

// The live group registered as `name` in c10d's registry (where
// torch.distributed registers every group it creates; a functional
// collective resolves its group_name there itself).
std::optional<GroupInfo> LiveGroup(const std::string& name) {
  try {
    const c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d::resolve_process_group(name);
    if (pg) return InfoOf(*pg);
  } catch (const c10::Error&) {
    // not registered, or already destroyed
  }
  return std::nullopt;
}

const char* ReduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    case c10d::ReduceOp::MIN:
      return "min";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::BAND:
      return "band";
    case c10d::ReduceOp::BOR:
      return "bor";
    case c10d::ReduceOp::BXOR:
      return "bxor";
    case c10d::ReduceOp::PREMUL_SUM:
      return "premul_sum";
    default:
      return "unknown";
  }
}

ArgMeta ArenaString(Arena& arena, const std::string& s) {
  char* out = arena.Alloc<char>(s.size());
  if (!s.empty()) std::memcpy(out, s.data(), s.size());
  return ArgMeta::String(out, static_cast<uint32_t>(s.size()));
}

}  // namespace

// The group named `name`: the live one first (a name can be reused after its
// group is destroyed), else as the recorder saw it while a call ran (a group
// the program destroyed before the report was built).
std::optional<GroupInfo> FindGroup(const std::string& name) {
  if (auto live = LiveGroup(name)) return live;
  std::lock_guard<std::mutex> lock(GroupsMu());
  auto it = SeenGroups().find(name);
  if (it != SeenGroups().end()) return it->second;
  return std::nullopt;
}

nlohmann::json GroupJson(const GroupInfo& g) {
  return {{"name", g.name}, {"description", g.description}, {"backend", g.backend}, {"rank", g.rank}, {"size", g.size}};
}

}  // namespace communication_internal

using communication_internal::ArenaString;
using communication_internal::GroupInfo;
using communication_internal::GroupJson;
using communication_internal::GroupsMu;
using communication_internal::InfoOf;
using communication_internal::kProcessGroupClass;
using communication_internal::kReduceOpClass;
using communication_internal::LiveGroup;
using communication_internal::ReduceOpName;
using communication_internal::SeenGroups;

ArgMeta RecordCustomClass(Arena& arena, const c10::IValue& v) {
  if (!v.isCustomClass()) return ArgMeta::Other();
  const auto& type = v.toObjectRef().type();
  const auto qualified = type->name() ? type->name()->qualifiedName() : std::string();
  if (qualified == kProcessGroupClass) {
    const auto pg = v.toCustomClass<c10d::ProcessGroup>();
    GroupInfo g = InfoOf(*pg);
    std::string name = g.name;
    {
      std::lock_guard<std::mutex> lock(GroupsMu());
      SeenGroups()[name] = std::move(g);
    }
    return ArenaString(arena, name);
  }
  if (qualified == kReduceOpClass) {
    const auto op = v.toCustomClass<c10d::ReduceOp>();
    return ArenaString(arena, ReduceOpName(op->op_));
  }
  return ArgMeta::Other();
}

nlohmann::json DistributedContextJson() {
  // torch.distributed names its default group "0" (distributed_c10d.py,
  // _process_group_name with a fresh group count) and registers it.
  std::optional<GroupInfo> world = LiveGroup("0");
  if (!world || world->description != "default_pg") return nullptr;
  // c10d's registry cannot be listed: the groups are the default one and
  // those the scans' collectives used that are still alive.
  std::map<std::string, GroupInfo> live{{world->name, *world}};
  std::vector<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(GroupsMu());
    for (const auto& [name, g] : SeenGroups()) seen.push_back(name);
  }
  for (const std::string& name : seen) {
    if (auto g = LiveGroup(name)) live[name] = *g;
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [name, g] : live) groups.push_back(GroupJson(g));
  return {{"rank", world->rank},
          {"world_size", world->size},
          {"backend", world->backend},
          {"process_groups", groups},
          {"source", "c10d default group (registered as \"0\")"}};
}

}  // namespace torchscan
