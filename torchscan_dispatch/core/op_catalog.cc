#include "torchscan_dispatch/core/op_catalog.h"

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "torchscan_dispatch/core/fork_guard.h"

namespace torchscan {

// Note [Operator facts across scans]
// Every scan's catalog starts empty. What Get learns from an operator's
// definition (its names, its schema's facts, its formula rows and traits)
// is the same for every scan, and learning it again made up about a sixth of
// the time a crawl took to write its layer rows on a small decoder: it is
// kept for the process (DefinitionFacts) and copied into each catalog.
// PyTorch tells a registration listener when a definition comes or goes
// (not when kernels do): every kept fact is dropped then, so an operator
// defined again, under the same name or at the same address, is read
// afresh. has_math_kernel, which a kernel registration changes, is asked by
// each catalog, as the computed tables are checked (Note [Computed tables
// across scans]).
namespace {

// Never destroyed: the dispatcher calls the listener until the process ends.
std::mutex* const shared_facts_mu = NewGuardedMutex(ForkRank::kOperatorTables);  // Note [Locks across fork]
auto* const shared_facts = new std::unordered_map<c10::OperatorHandle, OpInfo>();
std::atomic<uint64_t> definitions_changed{0};  // bumped by every definition registered or removed

class ForgetFactsOnDefinitions final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override { Forget(); }
  void onOperatorDeregistered(const c10::OperatorHandle&) override { Forget(); }

 private:
  static void Forget() {
    std::lock_guard<std::mutex> lock(*shared_facts_mu);
    definitions_changed.fetch_add(1, std::memory_order_relaxed);
    shared_facts->clear();
  }
};

// Facts kept only while the listener hears every definition: from the
// first lookup on (its registration walks the operators defined so far).
void ListenToDefinitions() {
  static std::once_flag once;
  static c10::RegistrationHandleRAII* listening = nullptr;  // never removed: it lives as long as the process
  std::call_once(once, [] {
    listening = new c10::RegistrationHandleRAII(
        c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<ForgetFactsOnDefinitions>()));
  });
}

OpInfo ReadDefinition(const c10::OperatorHandle& op) {
  OpInfo info;
  const auto& name = op.operator_name();
  info.name = name.name;
  info.overload = name.overload_name;
  info.packet = absl::StrReplaceAll(name.name, {{"::", "."}});
  if (op.hasSchema()) {
    const c10::FunctionSchema& schema = op.schema();
    info.zero_cost = ClassifyZeroCost(schema);
    // out= arguments are keyword-only and trailing in every ATen schema.
    uint32_t operands = static_cast<uint32_t>(schema.arguments().size());
    while (operands > 0 && schema.arguments()[operands - 1].is_out()) --operands;
    info.operands = operands;
    info.out_form = operands < schema.arguments().size();
    info.returns_alias = !schema.returns().empty();
    for (const auto& r : schema.returns()) {
      if (r.alias_info() == nullptr || r.alias_info()->isWrite()) info.returns_alias = false;
    }
  }
  if (!OutsideFormulaRows(name)) {
    info.builtin = FindOperatorFormula(info.name);
    info.module = FindModuleFormula(info.name);
  }
  info.traits = TraitsOf(info.name);
  return info;
}

// The operator's definition facts (has_math_kernel not set).
OpInfo DefinitionFacts(const c10::OperatorHandle& op) {
  ListenToDefinitions();
  uint64_t seen = 0;
  {
    std::lock_guard<std::mutex> lock(*shared_facts_mu);
    auto it = shared_facts->find(op);
    if (it != shared_facts->end()) return it->second;
    seen = definitions_changed.load(std::memory_order_relaxed);
  }
  OpInfo info = ReadDefinition(op);  // outside the lock: the listener may need it meanwhile
  std::lock_guard<std::mutex> lock(*shared_facts_mu);
  // Not kept when a definition came or went while it was read: it may be of one that is gone.
  if (definitions_changed.load(std::memory_order_relaxed) == seen) shared_facts->try_emplace(op, info);
  return info;
}

}  // namespace

const OpInfo& OpCatalog::Get(const c10::OperatorHandle& op) {
  auto it = infos_.find(op);
  if (it != infos_.end()) return it->second;
  OpInfo info = DefinitionFacts(op);
  info.has_math_kernel = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  return infos_.emplace(op, std::move(info)).first->second;
}

OpCall FormulaCall(const OpInfo& info, absl::Span<const ArgMeta> args, absl::Span<const ArgMeta> outputs) {
  OpCall call{info.name, info.overload, args.first(std::min<size_t>(args.size(), info.operands)), outputs};
  call.returns_alias = info.returns_alias;
  call.out_form = info.out_form;
  return call;
}

// Note [Computed tables across scans]
// WinningKernel reads an operator's computed dispatch table, which PyTorch
// only gives as text (dumpComputedTable: 15-35 us an operator; dumped again
// by every scan, about a fifth of what a scan adds to a small LSTM's
// forward). The text is kept for the
// process and used again while the operator's registrations are what they
// were: which runtime and alias keys have a kernel, which of those kernels
// are fallthroughs, and which runtime keys have a backend fallback. Those
// decide every line's key and kind ("[kernel]", "[math kernel]",
// "[autograd kernel]", "[backend fallback]", fallthroughs skipped), which is
// all WinningKernel's callers read, except for operators whose kernel's
// source file is read (a Python kernel's ".py:"): those are dumped each time.
// A kernel replaced at a key that already had one changes only the
// "registered at" part of its line. The line a key set reaches depends on
// the text alone, so it is kept with the text (Table::winners) and a later
// scan finds it there.

namespace {

// The registrations a computed table follows from, as bits.
std::vector<uint64_t> RegistrationPrint(const c10::OperatorHandle& op) {
  std::vector<uint64_t> bits;
  uint64_t word = 0;
  int used = 0;
  auto put = [&](bool b) {
    word |= static_cast<uint64_t>(b) << used;
    if (++used == 64) {
      bits.push_back(word);
      word = 0;
      used = 0;
    }
  };
  auto kernel = [&](c10::DispatchKey k) {
    const bool has = op.hasKernelForDispatchKey(k);
    put(has);
    put(has && op.isKernelFallthroughKernel(k));
  };
  c10::Dispatcher& dispatcher = c10::Dispatcher::singleton();
  for (c10::DispatchKey k : c10::DispatchKeySet(c10::DispatchKeySet::FULL)) {
    kernel(k);
    put(dispatcher.hasBackendFallbackForDispatchKey(k));
  }
  for (auto k = static_cast<uint16_t>(c10::DispatchKey::StartOfAliasKeys);
       k <= static_cast<uint16_t>(c10::DispatchKey::EndOfAliasKeys); ++k) {
    kernel(static_cast<c10::DispatchKey>(k));
  }
  bits.push_back(word);
  return bits;
}

// Never destroyed: a report written while the process exits may still ask.
std::mutex* const shared_tables_mu = NewGuardedMutex(ForkRank::kOperatorTables);  // Note [Locks across fork]
auto* const shared_tables = new std::unordered_map<c10::OperatorHandle, std::shared_ptr<OpCatalog::Table>>();

// Operators with Python kernels whose children are their work (RanDecomposition).
bool ReadsKernelSource(absl::string_view name) {
  return name == "fsdp::all_gather_copy_in" || name == "fsdp::split_with_sizes_copy" || name == "fsdp::chunk_cat";
}

}  // namespace

std::shared_ptr<OpCatalog::Table> OpCatalog::ComputedTable(const c10::OperatorHandle& op) {
  if (ReadsKernelSource(Get(op).name)) return std::make_shared<Table>(Table{{}, op.dumpComputedTable(), {}});
  std::vector<uint64_t> print = RegistrationPrint(op);
  {
    std::lock_guard<std::mutex> lock(*shared_tables_mu);
    auto it = shared_tables->find(op);
    if (it != shared_tables->end() && it->second->print == print) return it->second;
  }
  // Outside the lock: other operators need not wait.
  auto table = std::make_shared<Table>(Table{std::move(print), op.dumpComputedTable(), {}});
  std::lock_guard<std::mutex> lock(*shared_tables_mu);
  (*shared_tables)[op] = table;
  return table;
}

std::pair<c10::DispatchKey, absl::string_view> OpCatalog::WinningKernel(const c10::OperatorHandle& op,
                                                                        c10::DispatchKeySet keys) {
  auto [cached, fresh] = winners_[op].try_emplace(keys.raw_repr());
  if (!fresh) return cached->second;
  auto it = tables_.find(op);
  if (it == tables_.end()) it = tables_.emplace(op, ComputedTable(op)).first;
  Table& kept = *it->second;
  const std::string& table = kept.text;
  {
    // Another scan read this table for these keys already (the line is a
    // pure function of the text and the keys).
    std::lock_guard<std::mutex> lock(*shared_tables_mu);
    auto w = kept.winners.find(keys.raw_repr());
    if (w != kept.winners.end()) {
      const auto& [key, at, length] = w->second;
      return cached->second = {key, absl::string_view(table.data() + at, length)};
    }
  }
  cached->second = {c10::DispatchKey::Undefined, {}};
  for (c10::DispatchKeySet rest = keys; !rest.empty();) {
    const c10::DispatchKey k = rest.highestPriorityTypeId();
    rest = rest.remove(k);
    if (k == c10::DispatchKey::Undefined) break;
    // Lines read "<Key>: registered at <file>:<line> [<kind>]".
    const std::string prefix = absl::StrCat(c10::toString(k), ": ");
    size_t pos = absl::StartsWith(table, prefix) ? 0 : table.find("\n" + prefix);
    if (pos == std::string::npos) continue;  // no entry: falls through to the next key
    const size_t end = table.find('\n', pos + 1);
    const absl::string_view line(table.data() + pos, (end == std::string::npos ? table.size() : end) - pos);
    if (absl::StrContains(line, "fallthrough") || absl::StrContains(line, "[backend fallback]")) continue;
    cached->second = {k, line};
    break;
  }
  const auto& [key, line] = cached->second;
  std::lock_guard<std::mutex> lock(*shared_tables_mu);
  kept.winners.try_emplace(keys.raw_repr(), key, line.empty() ? 0 : line.data() - table.data(), line.size());
  return cached->second;
}

bool OpCatalog::RanDecomposition(const c10::OperatorHandle& op, c10::DispatchKeySet keys) {
  const auto [key, line] = WinningKernel(op, keys);
  // An autocast kernel casts its inputs and calls the operator again below
  // autocast: like a decomposition, its children are the whole of its work.
  if (key != c10::DispatchKey::Undefined && c10::autocast_dispatch_keyset.has(key)) return true;
  // FSDP2's copy operators have Python kernels that do all their work
  // through PyTorch operators, each recorded as their child: their children
  // are the whole of it. Named, not inferred from a Python kernel (which may
  // compute outside PyTorch), and only while the winning kernel is still the
  // Python one (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py:
  // all_gather_copy_in calls empty, split and _foreach_copy_;
  // split_with_sizes_copy calls torch.split_with_sizes_copy; chunk_cat
  // calls torch._chunk_cat).
  if (ReadsKernelSource(Get(op).name) && absl::StrContains(line, ".py:")) return true;
  return Get(op).has_math_kernel && absl::StrContains(line, "[math kernel]");
}

bool OpCatalog::RanAutogradKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys) {
  const auto [key, line] = WinningKernel(op, keys);
  // Generated kernels read "[autograd kernel]"; ones registered by hand "[kernel]".
  return key != c10::DispatchKey::Undefined && c10::DispatchKeySet(key).has_any(c10::autograd_dispatch_keyset) &&
         (absl::StrContains(line, "[autograd kernel]") || absl::StrContains(line, "[kernel]"));
}

namespace {
// initial-exec like the engine's other TLS variables (all_threads.cc).
using OwnerMap = absl::flat_hash_map<c10::OperatorHandle, bool, std::hash<c10::OperatorHandle>>;
thread_local OwnerMap* tls_owners __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local OpCatalog* tls_catalog __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace

bool AddsNoFlopsOfItsOwn(const c10::OperatorHandle& op, c10::DispatchKeySet keys) {
  if (tls_catalog == nullptr) tls_catalog = new OpCatalog();  // one per thread that needs it
  return tls_catalog->Get(op).zero_cost != ZeroCostReason::kNone || tls_catalog->RanDecomposition(op, keys);
}

bool RunsAttentionOrSoftmax(const c10::OperatorHandle& op) {
  // The traits OpCatalog::Get caches, without a catalog: asked once per call
  // signature, on any thread.
  const OpTraits t = TraitsOf(op.operator_name().name);
  return t.Has(TokenTrait::kAttention) || t.Has(TokenTrait::kSoftmax);
}

namespace {

// Whether an autograd kernel may compute something for this tensor: it has
// autograd metadata, and either a gradient is to be recorded for it (grad
// mode on and it requires grad) or it carries a forward-mode tangent. A view
// keeps metadata to track its base even when nothing requires grad (the
// transposed weight aten::linear passes to addmm): that alone is inert.
// Forward-mode AD has one level (PyTorch refuses nested ones), level 0.
// Grad mode is read only for a tensor with autograd metadata (a thread-local
// read per call otherwise, for the common tensors that have none).
bool AutogradLive(const at::Tensor& t) {
  if (!t.defined()) return false;
  const c10::AutogradMetaInterface* meta = t.unsafeGetTensorImpl()->autograd_meta();
  if (meta == nullptr) return false;
  return (meta->requires_grad() && c10::GradMode::is_enabled()) || meta->fw_grad(0, t).defined();
}

bool AutogradLive(const c10::IValue& v) {
  if (v.isTensor()) return AutogradLive(v.toTensor());
  if (!v.isList()) return false;
  for (const c10::IValue& e : v.toListRef()) {  // Tensor[] and Tensor?[] alike
    if (AutogradLive(e)) return true;
  }
  return false;
}

}  // namespace

// Note [Owned children]
// A call whose formula and module cost cover its whole subtree in both views
// (aten::conv2d over aten::convolution, a view over as_strided) may run its
// kernel's calls below the mode key: they would add nothing to any report,
// and not recording them makes the scan cheaper (ScanOptions::
// record_owned_children = false). Views that show those inner calls (the
// trace, the memory view) and caller formulas, which may decline a call so
// that its children count, need them recorded; the Python shim records them
// for such scans (torchscan/flops.py). One exception is inside the
// mechanism: the calls an autograd kernel makes itself (the clone an in-place
// operator saves for backward, a tangent's products) are work the formula
// does not cover, and the views value them (MadeByAutogradKernel in
// analyses/operator_view.cc). An autograd kernel computes only for tensors
// that need a gradient recorded or carry a tangent (AutogradLive); the
// kernels below it make their calls with autograd switched off, and those
// the formula covers.
namespace {
bool OperatorOwnsSubtree(const c10::OperatorHandle& op) {
  if (tls_owners == nullptr) tls_owners = new OwnerMap();  // one per thread
  auto it = tls_owners->find(op);
  if (it == tls_owners->end()) {
    const std::string name = op.operator_name().name;
    const bool zero = op.hasSchema() && ClassifyZeroCost(op.schema()) != ZeroCostReason::kNone;
    const bool rows = !OutsideFormulaRows(op.operator_name());
    const bool owns = (zero || (rows && FindOperatorFormula(name) != nullptr)) &&
                      (zero || (rows && FindModuleFormula(name) != nullptr));
    it = tls_owners->emplace(op, owns).first;
  }
  return it->second;
}
}  // namespace

bool OwnsSubtreeInBothViews(const c10::OperatorHandle& op, c10::DispatchKeySet keys, absl::Span<const c10::IValue> args,
                            int8_t* op_owner) {
  if (op_owner == nullptr) {
    if (!OperatorOwnsSubtree(op)) return false;
  } else {
    if (*op_owner < 0) *op_owner = OperatorOwnsSubtree(op) ? 1 : 0;
    if (*op_owner == 0) return false;
  }
  // See Note [Owned children]: an autograd kernel may make calls of its own.
  if (!keys.has_any(c10::autograd_dispatch_keyset)) return true;
  if (std::none_of(args.begin(), args.end(), [](const c10::IValue& v) { return AutogradLive(v); })) return true;
  if (tls_catalog == nullptr) tls_catalog = new OpCatalog();  // one per thread that needs it
  return !tls_catalog->RanAutogradKernel(op, keys);
}

}  // namespace torchscan
