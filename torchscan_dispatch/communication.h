// Communication of a scan (issue 13, distributed jobs): the collectives it
// recorded (c10d, _c10d_functional, c10d_functional, _dtensor), each valued
// as bytes this rank sent and received under a stated algorithm convention
// (formulas/communication.h). A report section of its own: never FLOPs.
//
// The group of a call is the one it ran on: the ProcessGroup argument of a
// c10d op (recorded as its group name, with its size and this rank's rank in
// it taken while the call ran, see RecordCustomClass) or the group name of a
// functional op, resolved through c10d's group registry.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>

#include <nlohmann/json.hpp>

#include "formulas/op_call.h"
#include "torchscan_dispatch/arena.h"
#include "torchscan_dispatch/op_catalog.h"
#include "torchscan_dispatch/scan_state.h"

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
nlohmann::json CommunicationJson(const BlockLog<Event>& events, OpCatalog& catalog, const std::string& scope);

// {"rank", "world_size", "backend", "process_groups": [...]} of the default
// process group when torch.distributed initialized one in this process
// (registered as "0", description "default_pg"); null otherwise.
nlohmann::json DistributedContextJson();

}  // namespace torchscan
