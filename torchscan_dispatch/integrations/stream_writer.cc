#include "torchscan_dispatch/integrations/stream_writer.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <unistd.h>

#include "torchscan_dispatch/core/fork_guard.h"

namespace torchscan {
namespace {

// One per process, never destroyed: its thread waits on it until the
// process ends (a thread per crawl would cost tens of microseconds, and its
// first allocations more).
struct StreamWriter {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::function<void()>> tasks;
  const pid_t pid = getpid();

  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        ready.wait(lock, [this] { return !tasks.empty(); });
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
    }
  }
};

std::atomic<StreamWriter*> current{nullptr};

std::mutex& StartMutex() {
  static std::mutex* const mu = NewGuardedMutex(ForkRank::kStreamWriterStart);  // Note [Locks across fork]
  return *mu;
}

StreamWriter& Writer() {
  std::lock_guard<std::mutex> lock(StartMutex());
  StreamWriter* w = current.load();
  // In a forked child the parent's thread is gone: the child starts its own
  // (the parent's writer is left as the fork copied it, unused). A task the
  // parent's thread was running for another thread's crawl is not the
  // child's: that thread's frames, and the session, are not freed there.
  if (w == nullptr || w->pid != getpid()) {
    w = new StreamWriter();
    std::thread([w] { w->Loop(); }).detach();
    current.store(w);
  }
  return *w;
}

}  // namespace

void RunOnStreamWriter(std::function<void()> task) {
  StreamWriter& w = Writer();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.tasks.push_back(std::move(task));
  }
  w.ready.notify_one();
}

}  // namespace torchscan
