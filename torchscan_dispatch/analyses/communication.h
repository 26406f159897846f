// Communication of a scan (distributed jobs): the collectives it
// recorded (c10d, _c10d_functional, c10d_functional, _dtensor), each valued
// as bytes this rank sent and received under a stated algorithm convention
// (formulas/communication.h). A report section of its own: never FLOPs.
//
// The group of a call is the one it ran on: the ProcessGroup argument of a
// c10d op (recorded as its group name, with its size and this rank's rank in
// it taken while the call ran, see RecordCustomClass) or the group name of a
// functional op, resolved through c10d's group registry.
#pragma once

#include <map>
#include <string>
#include <utility>

#include <ATen/core/ivalue.h>

#include <string>

#include <nlohmann/json.hpp>

#include "formulas/op_call.h"
#include "torchscan_dispatch/core/arena.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

// Recorder hook for a custom-class argument (the recorder keeps no object):
// a c10d ProcessGroup becomes kString holding its group name (its size, rank
// and backend are noted for the report), a c10d ReduceOp kString holding the
// reduction's name; anything else kOther.
ArgMeta RecordCustomClass(Arena& arena, const c10::IValue& v);

// True for operators that move data between processes (the namespaces
// above); wait_tensor and other bookkeeping ops of those namespaces are not.
bool IsCommunicationOp(const std::string& name);

// {"kind": "torchscan_communication", "totals": {"bytes_sent", "bytes_received"}
// (MetricResults, unit bytes), "calls": [...], "by_operator", "groups",
// "conventions", "diagnostics"} for the collectives among `events`; `scope`
// is the totals' scope (ScanOptions::scope).
// Starts from `before` (a streaming scan's folded collectives) when given.
struct CommunicationSums;
nlohmann::json CommunicationJson(const BlockLog<Event>& events, OpCatalog& catalog, const std::string& scope,
                                 const CommunicationSums* before = nullptr);

// The same in parts: sums that add up over disjoint sets of whole call trees
// (streaming.h), then the section. `first_index`: the index the first of
// `events` has among the scan's calls ("index" of a call).
struct CommunicationSums {
  struct OpSums {
    int64_t calls = 0, unavailable = 0;
    Count sent = 0, received = 0;
  };
  nlohmann::json calls = nlohmann::json::array();
  std::map<std::string, OpSums> op_sums;  // by operator packet
  std::map<std::string, nlohmann::json> groups;
  std::map<std::string, int> used_conventions;
  Count sent = 0, received = 0;
  bool complete = true;
  std::map<std::string, std::pair<int64_t, std::string>> unavailable;  // packet -> (calls, first reason)
  void Add(const CommunicationSums& other);                            // `other`'s calls came after these
};
void AccumulateCommunication(const BlockLog<Event>& events, OpCatalog& catalog, int64_t first_index,
                             CommunicationSums& sums);
nlohmann::json FinishCommunication(CommunicationSums sums, const std::string& scope);

// {"rank", "world_size", "backend", "process_groups": [...]} of the default
// process group when torch.distributed initialized one in this process
// (registered as "0", description "default_pg"); null otherwise.
nlohmann::json DistributedContextJson();

}  // namespace torchscan
