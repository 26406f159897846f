#include "torchscan_dispatch/core/all_threads.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <pthread.h>

#include "absl/strings/str_cat.h"

namespace torchscan {
namespace {

std::mutex& ActiveMutex() {
  static std::mutex mu;
  return mu;
}
AllThreadsScan*& Active() {  // guarded by ActiveMutex()
  static AllThreadsScan* active = nullptr;
  return active;
}
uint64_t& LastGeneration() {  // guarded by ActiveMutex()
  static uint64_t last = 0;
  return last;
}

// Switches the mode key on in this thread, remembering that the scan did.
void SwitchKeyOn(ThreadLink& link) {
  if (c10::impl::tls_is_dispatch_key_included(kModeKey)) return;
  c10::impl::tls_set_dispatch_key_included(kModeKey, true);
  link.set_key = true;
}

// The first observed operator of a thread that joins in the callback.
struct FirstCall : at::ObserverContext {
  FirstCall(std::shared_ptr<ThreadLog> l, int32_t i, size_t r) : log(std::move(l)), index(i), returns(r) {}
  std::shared_ptr<ThreadLog> log;
  int32_t index;
  size_t returns;  // values the schema returns
};

std::unique_ptr<at::ObserverContext> OnOperatorStart(const at::RecordFunction& fn) {
  const uint64_t generation = AllThreadsGeneration().load(std::memory_order_acquire);
  if (generation == 0) return nullptr;
  // With the key on, the fallback sees this call (and joins the thread).
  if (c10::impl::tls_is_dispatch_key_included(kModeKey)) return nullptr;
  // The key is off: a thread that has not joined yet, or one whose key a
  // guard restored (ThreadLocalStateGuard in a pool, a scan of its own
  // stopping). Switch it on and record this call here.
  const auto name = fn.operator_name();
  if (!name) return nullptr;
  const auto op = c10::Dispatcher::singleton().findOp(*name);
  if (!op) return nullptr;
  std::shared_ptr<ThreadLog> log = AllThreadsLog();  // joins
  ThreadLink* link = ThisThreadLink();
  if (!log || !link) return nullptr;
  SwitchKeyOn(*link);  // already joined: a guard had switched it off
  const auto& schema = op->schema();
  // A boxed call's inputs are its caller's whole stack: the arguments are
  // the last ones.
  const auto all_inputs = fn.inputs();
  const size_t n = std::min(RecordedArguments(schema), all_inputs.size());
  const auto inputs = all_inputs.slice(all_inputs.size() - n, n);
  // The key set this call was dispatched with: its tensors' keys and this
  // thread's TLS, as they were before the key was switched on.
  c10::DispatchKeySet keys;
  auto add = [&keys](const c10::IValue& v) {
    if (v.isTensor()) keys = keys | v.toTensor().key_set();
  };
  for (const auto& v : inputs) {
    if (v.isList()) {
      for (const auto& item : v.toListRef()) add(item);
    } else {
      add(v);
    }
  }
  const auto local = c10::impl::tls_local_dispatch_key_set();
  keys = ((keys | local.included_) - local.excluded_).remove(kModeKey);
  log->Lock();
  int32_t index = -1;
  if (!log->sealed) index = log->recorder.Begin(*op, keys & kAfterMode, absl::MakeConstSpan(inputs.data(), n));
  log->Unlock();
  if (index < 0) return nullptr;
  return std::make_unique<FirstCall>(std::move(log), index, RecordedReturns(schema));
}

void OnOperatorEnd(const at::RecordFunction& fn, at::ObserverContext* context) {
  auto* call = static_cast<FirstCall*>(context);
  if (call == nullptr) return;
  const auto& outputs = fn.outputs();
  call->log->Lock();
  if (!call->log->sealed) {
    // Fewer outputs than the operator returns: its kernel raised. A boxed
    // call's outputs are its caller's stack: the results are the last ones.
    if (outputs.size() < call->returns) {
      call->log->recorder.Abort(call->index);
    } else {
      call->log->recorder.End(call->index,
                              absl::MakeConstSpan(outputs.data() + outputs.size() - call->returns, call->returns));
    }
  }
  call->log->Unlock();
}

std::unique_ptr<at::ObserverContext> OnTorchScriptStart(const at::RecordFunction&) {
  AllThreadsLog();  // a worker joins before its forward's first operator
  ForEachThreadRecorder([](Recorder& r) {
    if (r.torchscript_scopes) r.EnterTorchScriptFunction();
  });
  return nullptr;
}

void OnTorchScriptEnd(const at::RecordFunction&, at::ObserverContext*) {
  ForEachThreadRecorder([](Recorder& r) {
    if (r.torchscript_scopes) r.LeaveTorchScriptFunction();
  });
}

}  // namespace

std::atomic<uint64_t>& AllThreadsGeneration() {
  static std::atomic<uint64_t> generation{0};
  return generation;
}

namespace {
// The link lives on the heap, reached through a trivially destructible
// thread_local pointer, so code running after the thread's TLS destructors
// (atexit handlers on the main thread) finds nullptr instead of a dead object.
// initial-exec like tls_top (scan_state.cc): the engine's TLS variables share
// one access model.
thread_local ThreadLink* tls_link __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local bool tls_link_gone __attribute__((tls_model("initial-exec"))) = false;
struct LinkReaper {
  ~LinkReaper() {
    delete tls_link;
    tls_link = nullptr;
    tls_link_gone = true;
  }
};
thread_local LinkReaper tls_reaper __attribute__((tls_model("initial-exec")));
}  // namespace

ThreadLink* ThisThreadLink() {
  if (C10_LIKELY(tls_link != nullptr)) return tls_link;
  if (tls_link_gone) return nullptr;
  (void)&tls_reaper;  // constructs the reaper: the link is freed at thread exit
  tls_link = new ThreadLink();
  return tls_link;
}

absl::Status AllThreadsScan::Start() {
  std::lock_guard<std::mutex> lock(ActiveMutex());
  if (Active() != nullptr) {
    return absl::FailedPreconditionError(
        "torchscan: another all-threads scan is active in this process; stop it first (one at a time)");
  }
  generation_ = ++LastGeneration();
  Active() = this;
  if (join_on_first_call_) {
    callback_ = at::addGlobalCallback(at::RecordFunctionCallback(&OnOperatorStart, &OnOperatorEnd)
                                          .needsInputs(true)
                                          .needsOutputs(true)
                                          .scopes({at::RecordScope::FUNCTION}));
  }
  if (torchscript_scopes_) AcquireTorchScriptCallback();
  AllThreadsGeneration().store(generation_, std::memory_order_release);
  return absl::OkStatus();
}

void AllThreadsScan::Stop() {
  {
    std::lock_guard<std::mutex> lock(ActiveMutex());
    if (Active() != this) return;
    if (timestamps_) stopped_ns_ = SteadyNowNs();
    AllThreadsGeneration().store(0, std::memory_order_release);
    Active() = nullptr;
  }
  if (callback_ != 0) at::removeCallback(callback_);
  if (torchscript_scopes_) ReleaseTorchScriptCallback();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& log : logs_) {
    log->Lock();
    log->sealed = true;
    log->Unlock();
  }
}

std::vector<std::shared_ptr<ThreadLog>> AllThreadsScan::Logs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return logs_;
}

std::shared_ptr<ThreadLog> AllThreadsScan::Join(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation != generation_ || AllThreadsGeneration().load(std::memory_order_acquire) != generation) {
    return nullptr;
  }
  auto log = std::make_shared<ThreadLog>();
  log->number = static_cast<int64_t>(logs_.size()) + 1;
  log->recorder.torchscript_scopes = torchscript_scopes_;
  log->recorder.record_owned_children = record_owned_children_;
  log->recorder.torchscript_requests = torchscript_requests_;
  log->recorder.timestamps = timestamps_;
  log->recorder.aggregate_layers = aggregate_layers;
  if (make_folder) {
    log->recorder.folder = make_folder(log->number);
    log->recorder.fold_every = fold_every;
  }
  char name[64] = {0};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) == 0) log->name = name;
  ThreadLink* link = ThisThreadLink();
  if (link == nullptr) return nullptr;  // the thread is exiting
  logs_.push_back(log);
  link->generation = generation;
  link->log = log;
  link->set_key = false;
  SwitchKeyOn(*link);
  return log;
}

std::shared_ptr<ThreadLog> AllThreadsLog() {
  const uint64_t generation = AllThreadsGeneration().load(std::memory_order_acquire);
  if (generation == 0) return nullptr;
  ThreadLink* link = ThisThreadLink();
  if (link == nullptr) return nullptr;
  if (link->generation == generation) return link->log;
  std::lock_guard<std::mutex> lock(ActiveMutex());
  AllThreadsScan* active = Active();
  return active ? active->Join(generation) : nullptr;
}

bool LeaveFinishedAllThreadsScan() {
  ThreadLink* link = ThisThreadLink();
  if (link == nullptr || link->generation == 0 ||
      link->generation == AllThreadsGeneration().load(std::memory_order_acquire)) {
    return false;
  }
  // A scan of this thread is active and needs the key: leave it for later.
  if (ThreadTopRecorder() != nullptr) return false;
  const bool had_key = link->set_key;
  if (had_key) c10::impl::tls_set_dispatch_key_included(kModeKey, false);
  *link = ThreadLink();
  return had_key;
}

void ForEachThreadRecorder(absl::FunctionRef<void(Recorder&)> f) {
  for (Recorder* r = ThreadTopRecorder(); r != nullptr; r = r->outer) f(*r);
  const uint64_t generation = AllThreadsGeneration().load(std::memory_order_acquire);
  ThreadLink* link = ThisThreadLink();
  if (generation == 0 || link == nullptr || link->generation != generation) return;
  std::shared_ptr<ThreadLog> log = link->log;
  log->Lock();
  if (!log->sealed) f(log->recorder);
  log->Unlock();
}

namespace {
std::mutex& TorchScriptMutex() {
  static std::mutex mu;
  return mu;
}
int torchscript_users = 0;  // guarded by TorchScriptMutex()
uint64_t torchscript_callback = 0;
}  // namespace

void AcquireTorchScriptCallback() {
  std::lock_guard<std::mutex> lock(TorchScriptMutex());
  if (torchscript_users++ == 0) {
    torchscript_callback = at::addGlobalCallback(at::RecordFunctionCallback(&OnTorchScriptStart, &OnTorchScriptEnd)
                                                     .scopes({at::RecordScope::TORCHSCRIPT_FUNCTION}));
  }
}

void ReleaseTorchScriptCallback() {
  std::lock_guard<std::mutex> lock(TorchScriptMutex());
  if (--torchscript_users == 0) at::removeCallback(torchscript_callback);
}

}  // namespace torchscan
