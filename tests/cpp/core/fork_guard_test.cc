// Note [Locks across fork]: a lock another thread holds when fork() is
// called is free in the child, because fork waits for it.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "torchscan_dispatch/core/fork_guard.h"

namespace torchscan {
namespace {

// Forks while another thread holds `mu` for `hold`; returns the child's
// exit code (0: it took `mu` at once) and whether fork returned only after
// the holder let go.
std::pair<int, bool> ForkWhileHeld(std::mutex& mu, std::chrono::milliseconds hold) {
  std::atomic<bool> held{false}, released{false};
  std::thread holder([&] {
    std::lock_guard<std::mutex> lock(mu);
    held = true;
    std::this_thread::sleep_for(hold);
    released = true;
  });
  while (!held) std::this_thread::yield();
  const pid_t pid = fork();
  if (pid == 0) _exit(mu.try_lock() ? 0 : 1);  // the child has one thread: nobody else can release it
  const bool waited = released.load();
  holder.join();
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, waited};
}

TEST(ForkGuard, AGuardedLockIsFreeInTheChild) {
  static auto* mu = new std::mutex;
  GuardAcrossFork(mu, ForkRank::kArenaPool);
  GuardAcrossFork(mu, ForkRank::kArenaPool);  // registered once: a second registration is ignored
  const auto [code, waited] = ForkWhileHeld(*mu, std::chrono::milliseconds(100));
  EXPECT_EQ(code, 0);
  EXPECT_TRUE(waited);  // fork waited for the holder
  // And in the parent, the lock is free after the fork.
  ASSERT_TRUE(mu->try_lock());
  mu->unlock();
}

TEST(ForkGuard, AnUnguardedLockStaysHeldInTheChild) {
  // What the guard prevents: the child inherits the lock held.
  static auto* mu = new std::mutex;
  const auto [code, waited] = ForkWhileHeld(*mu, std::chrono::milliseconds(100));
  EXPECT_EQ(code, 1);
  EXPECT_FALSE(waited);
}

TEST(ForkGuard, LocksOfSeveralRanksAreAllFree) {
  static auto* outer = new std::mutex;
  static auto* inner = new std::mutex;
  GuardAcrossFork(inner, ForkRank::kOperatorTables);
  GuardAcrossFork(outer, ForkRank::kHandles);
  // A thread nesting them in rank order while the fork comes.
  std::atomic<bool> running{true};
  std::thread nester([&] {
    while (running) {
      std::lock_guard<std::mutex> a(*outer);
      std::lock_guard<std::mutex> b(*inner);
    }
  });
  for (int i = 0; i < 50; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      const bool free = outer->try_lock() && inner->try_lock();
      _exit(free ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "fork " << i;
  }
  running = false;
  nester.join();
}

}  // namespace
}  // namespace torchscan
