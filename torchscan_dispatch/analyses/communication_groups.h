// The process groups of the communication analysis: what the recorder saw
// of each group while its calls ran, and the live groups in c10d's
// registry. communication.cc values the collectives; this is what they ran
// on. Not part of the analysis's API (communication.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace torchscan::communication_internal {

struct GroupInfo {
  std::string name, description, backend;
  int64_t rank = -1, size = -1;
};

// The group named `name`: the live one first (a name can be reused after its
// group is destroyed), else as the recorder saw it while a call ran (a group
// the program destroyed before the report was built).
std::optional<GroupInfo> FindGroup(const std::string& name);

// {"name", "description", "backend", "rank", "size"}.
nlohmann::json GroupJson(const GroupInfo& g);

}  // namespace torchscan::communication_internal
