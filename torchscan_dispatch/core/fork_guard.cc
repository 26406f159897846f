#include "torchscan_dispatch/core/fork_guard.h"

#include <pthread.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace torchscan {
namespace {

struct Guarded {
  std::mutex registry;                             // taken first by the handler, so no registration races a fork
  std::vector<std::pair<int, std::mutex*>> locks;  // sorted by rank
};

Guarded& TheGuarded() {
  static auto* guarded = new Guarded;  // never destroyed: a fork may come during exit
  return *guarded;
}

void Prepare() {
  Guarded& g = TheGuarded();
  g.registry.lock();
  for (auto& [rank, mu] : g.locks) mu->lock();
}

void Release() {
  Guarded& g = TheGuarded();
  for (auto it = g.locks.rbegin(); it != g.locks.rend(); ++it) it->second->unlock();
  g.registry.unlock();
}

}  // namespace

void GuardAcrossFork(std::mutex* mu, ForkRank rank) {
  static const int installed = pthread_atfork(&Prepare, &Release, &Release);
  (void)installed;
  Guarded& g = TheGuarded();
  std::lock_guard<std::mutex> lock(g.registry);
  for (const auto& entry : g.locks) {
    if (entry.second == mu) return;
  }
  const std::pair<int, std::mutex*> entry{static_cast<int>(rank), mu};
  g.locks.insert(std::upper_bound(g.locks.begin(), g.locks.end(), entry,
                                  [](const auto& a, const auto& b) { return a.first < b.first; }),
                 entry);
}

std::mutex* NewGuardedMutex(ForkRank rank) {
  auto* mu = new std::mutex;
  GuardAcrossFork(mu, rank);
  return mu;
}

}  // namespace torchscan
