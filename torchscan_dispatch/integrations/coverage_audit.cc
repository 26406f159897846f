#include "torchscan_dispatch/integrations/coverage_audit.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "formulas/misc.h"
#include "formulas/module_costs.h"
#include "formulas/registry.h"
#include "torchscan_built_against.h"
#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/op_catalog.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {
namespace {

// Tags a release may not define (2.11 has no inplace or out): a name is
// compared only where at::Tag has it, so one list serves every release.
#define TS_TAG(x)                                                     \
  template <typename T, typename = void>                              \
  struct Has_##x : std::false_type {};                                \
  template <typename T>                                               \
  struct Has_##x<T, std::void_t<decltype(T::x)>> : std::true_type {}; \
  template <typename T>                                               \
  bool Is_##x(T t) {                                                  \
    if constexpr (Has_##x<T>::value) {                                \
      return t == T::x;                                               \
    } else {                                                          \
      return false;                                                   \
    }                                                                 \
  }
// One tag per line, by hand: clang-format does not settle on one layout of this list.
// clang-format off
#define TS_TAGS(X) \
  X(core) \
  X(cudagraph_unsafe) \
  X(data_dependent_output) \
  X(dynamic_output_shape) \
  X(flexible_layout) \
  X(generated) \
  X(inplace) \
  X(inplace_view) \
  X(maybe_aliasing_or_mutating) \
  X(needs_contiguous_strides) \
  X(needs_exact_strides) \
  X(needs_fixed_stride_order) \
  X(nondeterministic_bitwise) \
  X(nondeterministic_seeded) \
  X(out) \
  X(out_variant) \
  X(pointwise) \
  X(pt2_compliant_tag) \
  X(reduction) \
  X(view_copy)
// clang-format on
TS_TAGS(TS_TAG)
#undef TS_TAG

const char* TagName(at::Tag t) {
#define TS_TAG(x) \
  if (Is_##x(t)) return #x;
  TS_TAGS(TS_TAG)
#undef TS_TAG
  return "unknown";
}
#undef TS_TAGS

bool IsCollective(const std::string& name) {
  return absl::StartsWith(name, "c10d::") || absl::StartsWith(name, "_c10d_functional") ||
         absl::StartsWith(name, "c10d_functional::") || absl::StartsWith(name, "_dtensor::") ||
         absl::StartsWith(name, "symm_mem::");
}

const char* ZeroCostRule(ZeroCostReason r) {
  switch (r) {
    case ZeroCostReason::kView:
      return "view: every return aliases an input without writing it (schema rule)";
    case ZeroCostReason::kMetadata:
      return "metadata: reads or sets tensor metadata only (name rule)";
    case ZeroCostReason::kAllocation:
      return "allocation: uninitialised memory (name rule)";
    case ZeroCostReason::kFill:
      return "fill: writes constants (name rule)";
    case ZeroCostReason::kCopy:
      return "copy: moves or gathers values without arithmetic (name rule)";
    case ZeroCostReason::kCommunication:
      return "communication: moves data between processes without arithmetic (name rule); bytes in the "
             "communication section";
    case ZeroCostReason::kNone:
      break;
  }
  return "";
}

// The key set a call on dense CPU tensors forwards with below the mode key:
// the tensor's keys (backend, autograd, inplace-or-view) and the always
// included ones, less the default exclusions (autocast).
c10::DispatchKeySet DenseCpuCallKeys() {
  const c10::DispatchKeySet tensor = c10::DispatchKeySet(c10::DispatchKey::CPU) |
                                     c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::CPUBit);
  return ((tensor | c10::default_included_set) - c10::default_excluded_set) & kAfterMode;
}

// What a scan's operator view does with a call of `op` on dense CPU tensors,
// decided as PlanOperatorView and Gaps decide it (formula > zero-cost >
// decomposition > opaque, opaque being a stated exclusion or uncounted), from
// the same catalog: the diagnostic or entry a scan reports for it.
const char* AtRun(const c10::OperatorHandle& op, OpCatalog& catalog) {
  const OpInfo& info = catalog.Get(op);
  if (info.builtin) return info.builtin->flops == misc::RandomSampling ? "random_sampling" : "formula";
  if (info.zero_cost != ZeroCostReason::kNone) return "ignored";
  if (catalog.RanDecomposition(op, DenseCpuCallKeys())) return "decomposition";
  return StatedExclusion(info.name) ? "excluded_operator" : "uncounted_operator";
}

nlohmann::json Classify(const c10::OperatorHandle& op, OpCatalog& catalog) {
  const auto& name = op.operator_name();
  nlohmann::json j;
  j["name"] = name.name;
  j["overload"] = name.overload_name;
  j["schema"] = op.hasSchema() ? c10::toString(op.schema()) : "";
  nlohmann::json tags = nlohmann::json::array();
  for (const at::Tag t : op.getTags()) tags.push_back(TagName(t));
  j["tags"] = tags;
  j["composite_implicit"] = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  const OpInfo& info = catalog.Get(op);  // the formula rows that apply to this overload
  const OperatorFormula* formula = info.builtin;
  const ModuleFormula* module = info.module;
  j["operator_formula"] = formula ? nlohmann::json(FormulaSourceName(formula->source)) : nlohmann::json();
  j["module_formula"] = module != nullptr;
  const std::string run = AtRun(op, catalog);
  j["at_run"] = run;
  std::string cls, reason;
  if (run == "random_sampling") {
    cls = "random";
    reason = "random sampling: a visible exclusion of torchscan_flops_v1 (random_sampling, partial at run time)";
  } else if (run == "formula") {
    cls = "operator_formula";
    reason = absl::StrCat("operator view: ", FormulaSourceName(formula->source), " formula",
                          module ? "; module view formula" : "");
  } else if (IsCollective(name.name) && run != "decomposition") {
    cls = "collective";
    reason = run == "ignored"             ? "communication: moves data between processes, no arithmetic (zero "
                                            "FLOPs; bytes in the communication section)"
             : run == "excluded_operator" ? StatedExclusion(name.name)
                                          : "communication with no byte or FLOP rule (uncounted_operator at run time)";
  } else if (module) {
    cls = "module_formula";
    reason = absl::StrCat("module view formula only; operator view: ", run);
  } else if (run == "ignored") {
    cls = "zero_cost";
    reason = ZeroCostRule(info.zero_cost);
  } else if (run == "decomposition") {
    cls = "composite";
    reason = info.has_math_kernel
                 ? "runs its CompositeImplicitAutograd decomposition on CPU tensors: covered when its decomposition is"
                 : "runs a Python kernel made of PyTorch calls (named in op_catalog.cc) on CPU tensors: covered "
                   "when those calls are";
  } else if (run == "excluded_operator") {
    cls = "excluded";
    reason = StatedExclusion(name.name);
  } else {
    cls = "unsupported";
    reason = "no formula, not zero-cost, no decomposition on CPU tensors: uncounted_operator (partial) at run time";
  }
  j["class"] = cls;
  j["reason"] = reason;
  // The two views' classes differ where one values the operator by a formula
  // and the other does not: say why.
  if (formula != nullptr && module == nullptr && run == "formula") {
    const char* gap = ModuleViewGap(name.name);
    j["views_differ"] = absl::StrCat("operator view formula, no module-view formula: ", gap ? gap : "no stated reason");
  } else if (module != nullptr && formula == nullptr) {
    j["views_differ"] = absl::StrCat("module-view formula; operator view: ", run,
                                     run == "decomposition" ? " (the native convention counts its children)" : "");
  }
  return j;
}

}  // namespace

std::string FormulaTableJson() {
  nlohmann::json j;
  j["operator_formulas"] = nlohmann::json::array();
  for (const auto& f : BuiltinOperatorFormulas()) {
    j["operator_formulas"].push_back({{"op", std::string(f.op)}, {"source", FormulaSourceName(f.source)}});
  }
  j["module_formulas"] = nlohmann::json::array();
  for (const auto& f : BuiltinModuleFormulas()) j["module_formulas"].push_back(std::string(f.op));
  j["exclusions"] = nlohmann::json::array();
  for (const auto& e : StatedExclusions()) j["exclusions"].push_back({{"op", std::string(e.op)}, {"reason", e.reason}});
  return j.dump();
}

std::string CoverageAuditJson() {
  auto& dispatcher = c10::Dispatcher::singleton();
  nlohmann::json audit;
  audit["schema_version"] = 1;
  audit["torch_version"] = TORCHSCAN_BUILT_TORCH_VERSION;
  nlohmann::json footing;
  footing["mode_key"] = c10::toString(kModeKey);
  const absl::Status installed = EnsureFallbackInstalled();
  footing["fallback_registered"] = installed.ok();
  footing["fallback_problem"] = installed.ok() ? "" : std::string(installed.message());
  footing["fallback_on_mode_key"] = dispatcher.hasBackendFallbackForDispatchKey(kModeKey);
  audit["footing"] = footing;
  nlohmann::json ops = nlohmann::json::object();
  OpCatalog catalog;
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    auto handle = dispatcher.findOp(name);
    if (!handle || !handle->hasSchema()) continue;
    if (absl::StartsWith(name.name, "torchscan::")) continue;  // our own markers, not PyTorch's operators
    const std::string key = name.overload_name.empty() ? name.name : absl::StrCat(name.name, ".", name.overload_name);
    ops[key] = Classify(*handle, catalog);
  }
  audit["operators"] = ops;
  return audit.dump();
}

}  // namespace torchscan
