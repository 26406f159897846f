// Caller formulas whose values come after Stop (Session::DeferOperatorFormula):
// the calls they apply to as JSON for the Python shim, and its answers.
#include "torchscan_dispatch/session/state.h"

namespace torchscan {

namespace {

nlohmann::json TensorJson(const TensorMeta& t) {
  if (!t.defined) return nullptr;
  nlohmann::json j = {{"dtype", reports::DtypeName(t.dtype)}, {"device", reports::DeviceName(t.device)}};
  if (t.nested) {
    j["shape"] = nullptr;
  } else {
    j["shape"] = std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
  }
  return {{"__tensor__", j}};
}

nlohmann::json ArgJson(const ArgMeta& a) {
  switch (a.kind) {
    case ArgKind::kNone:
      return nullptr;
    case ArgKind::kTensor:
      return TensorJson(a.tensor());
    case ArgKind::kInt:
      return a.to_int();
    case ArgKind::kDouble:
      return a.to_double();
    case ArgKind::kBool:
      return a.to_bool();
    case ArgKind::kIntList:
      return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case ArgKind::kBoolList: {
      nlohmann::json l = nlohmann::json::array();
      for (int64_t b : a.ints()) l.push_back(b != 0);
      return l;
    }
    case ArgKind::kDoubleList:
      return std::vector<double>(a.doubles().begin(), a.doubles().end());
    case ArgKind::kTensorList: {
      nlohmann::json l = nlohmann::json::array();
      for (const auto& t : a.tensors()) l.push_back(TensorJson(t));
      return l;
    }
    case ArgKind::kString:
      return std::string(a.str());
    case ArgKind::kOther:
      return {{"__other__", true}};
  }
  return nullptr;
}

}  // namespace

StatusOr<std::string> Session::DeferredCallsJson() {
  return Public([&]() -> absl::StatusOr<std::string> {
    State& s = *state_;
    if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
    const auto& events = s.Calls().set->events();
    const OperatorPlan& plan = s.Calls().Plan(s.catalog, s.overrides);
    nlohmann::json calls = nlohmann::json::array();
    for (size_t i = 0; i < events.size(); ++i) {
      if (plan.covered[i] || plan.kind[i] != CallKind::kDeferred || events[i].raised()) continue;
      const Event& e = events[i];
      const OpInfo& info = s.catalog.Get(e.op());
      nlohmann::json args = nlohmann::json::array(), kwargs = nlohmann::json::object();
      const auto& schema_args = e.op().schema().arguments();
      for (size_t a = 0; a < e.args().size() && a < schema_args.size(); ++a) {
        if (schema_args[a].kwarg_only()) {
          kwargs[schema_args[a].name()] = ArgJson(e.args()[a]);
        } else {
          args.push_back(ArgJson(e.args()[a]));
        }
      }
      nlohmann::json out;
      if (e.outputs().size() == 1) {
        out = ArgJson(e.outputs()[0]);
      } else {
        out = nlohmann::json::array();
        for (const auto& o : e.outputs()) out.push_back(ArgJson(o));
      }
      calls.push_back({{"index", i},
                       {"op", info.packet},
                       {"overload", info.overload},
                       {"args", args},
                       {"kwargs", kwargs},
                       {"out", out}});
    }
    return calls.dump();
  }());
}

Status Session::SetDeferredResultsJson(std::string_view json) {
  return Public([&]() -> absl::Status {
    State& s = *state_;
    if (s.phase != Phase::kStopped) return absl::FailedPreconditionError("torchscan: stop the scan first");
    nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return absl::InvalidArgumentError("torchscan: deferred results must be a JSON object");
    for (const auto& [key, value] : j.items()) {
      int32_t index = 0;
      // Counts up to 2^128 - 1 travel exactly as decimal strings (nlohmann
      // holds integers up to 2^64 - 1 only); non-negative JSON integers work too.
      std::optional<Count> count;
      if (value.is_number_unsigned()) count = Count(value.get<uint64_t>());
      if (value.is_string()) count = ParseCount(value.get<std::string>());
      if (!absl::SimpleAtoi(key, &index) || !count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "torchscan: deferred result \"", key,
            "\" must map a call index to a non-negative integer count up to 2^128 - 1 (a number or decimal string)"));
      }
      s.overrides.deferred_values[index] = *count;
    }
    return absl::OkStatus();
  }());
}
}  // namespace torchscan
