#include "torchscan_dispatch/core/memory.h"

#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <atomic>
#include <thread>

#include "torchscan_dispatch/core/fallback.h"
#include "torchscan_dispatch/core/recorder.h"

namespace torchscan {

void MemoryLog::Record(const void* ptr, int64_t bytes, c10::DeviceType device, int32_t event) {
  const int32_t index = static_cast<int32_t>(entries.size());
  if (bytes >= 0) {
    entries.push_back({bytes, event, -1, device});
    // An address handed out again while its block looks alive: that block
    // was freed where no report reached us (a thread without the observer).
    auto [it, inserted] = live.try_emplace(ptr, index);
    if (!inserted) {
      ++unseen_frees;
      it->second = index;
    }
    return;
  }
  int32_t from = -1;
  if (auto it = live.find(ptr); it != live.end()) {
    from = it->second;
    entries[from].match = index;
    live.erase(it);
  }
  entries.push_back({bytes, event, from, device});
}

namespace {

namespace prof = torch::profiler::impl;

// PyTorch reads the PROFILER_STATE slot as a profiler state
// (prof::profilerEnabled() and others cast what is there to one), so the
// observer is one, permanently disabled: nothing mistakes it for a running
// profiler. torch.profiler still refuses to start while it is there ("already
// enabled on this thread").
class Observer final : public prof::ProfilerStateBase {
 public:
  Observer() : prof::ProfilerStateBase(prof::ProfilerConfig(prof::ProfilerState::Disabled)) {}

  void reportMemoryUsage(void* ptr, int64_t bytes, size_t /*total_allocated*/, size_t /*total_reserved*/,
                         c10::Device device) override {
    if (!active.load(std::memory_order_acquire)) return;
    // The slot travels with PyTorch's thread-local state (autograd workers):
    // such a thread's blocks are not the scanning thread's calls.
    if (std::this_thread::get_id() != owner) {
      other_threads.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Paused recording (TorchScan's own analysis work, a compile): its
    // blocks are not the workload's. Frees are always logged, so a block
    // allocated before stays matched.
    if (bytes > 0 && ThreadRecordingPaused()) return;
    for (Recorder* r = ThreadTopRecorder(); r != nullptr; r = r->outer) {
      MemoryLog& log = r->memory();
      if (log.enabled && log.unavailable.empty()) log.Record(ptr, bytes, device.type(), r->open_call());
    }
  }
  bool memoryProfilingEnabled() const override { return active.load(std::memory_order_relaxed); }
  prof::ActiveProfilerType profilerType() override { return prof::ActiveProfilerType::NONE; }

  std::atomic<bool> active{true};
  std::atomic<int64_t> other_threads{0};
  const std::thread::id owner = std::this_thread::get_id();
};

}  // namespace

struct MemoryAttribution::State {
  std::shared_ptr<Observer> pushed;  // set when this scan put the observer in
  Observer* observer = nullptr;      // the observer this scan's reports come through
  int64_t other_threads_at_start = 0;
};

MemoryAttribution::MemoryAttribution() = default;
MemoryAttribution::~MemoryAttribution() = default;

void MemoryAttribution::Start(Recorder& r) {
  MemoryLog& log = r.memory();
  log.enabled = true;
  state_ = std::make_unique<State>();
  c10::DebugInfoBase* current = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
  Observer* ours = dynamic_cast<Observer*>(current);
  if (current != nullptr && ours == nullptr) {
    log.unavailable =
        "torch.profiler (or another allocator observer) was running when the scan started, and allocator "
        "reports go to one observer per thread; start the scan outside the profiler";
    state_.reset();
    return;
  }
  if (ours != nullptr && ours->active.load()) {
    state_->observer = ours;  // an enclosing scan's: its reports reach this recorder too
  } else {
    state_->pushed = std::make_shared<Observer>();
    state_->observer = state_->pushed.get();
    c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, state_->pushed);
  }
  state_->other_threads_at_start = state_->observer->other_threads.load();
  log.observer = static_cast<const c10::DebugInfoBase*>(state_->observer);
}

void MemoryAttribution::Stop(Recorder& r) {
  if (!state_) return;
  MemoryLog& log = r.memory();
  Observer* observer = state_->observer;
  log.other_threads = observer->other_threads.load() - state_->other_threads_at_start;
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != log.observer) log.shadowed = true;
  if (state_->pushed) {
    observer->active.store(false, std::memory_order_release);  // reports nothing from here on, wherever it is
    try {
      // Out of the slot when it is still on top; a profiler started inside
      // the scan and still running keeps its place (and ours stays, inert).
      if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() == log.observer) {
        (void)c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
      }
    } catch (const c10::Error&) {
      // Something else is on top of the thread's debug info: leave it alone.
    }
  }
  state_.reset();
}

}  // namespace torchscan
