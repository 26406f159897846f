// Process-wide locks held across fork() (Note [Locks across fork]).
#pragma once

#include <mutex>

namespace torchscan {

// Note [Locks across fork]
// A forked child has only the thread that forked. A lock another thread
// held at that moment would stay held in the child for good, and the
// child's first crawl would wait on it forever (a thread crawling while
// another forks holds the session handles' lock at every module call). So
// before a fork, pthread_atfork's handler takes each lock registered here,
// by rank (the order in which the code nests them: the session handles,
// then the stream writer's start, then the arena pool and the operator
// tables); parent and child release them after it, the data they guard
// whole.
enum class ForkRank { kHandles = 0, kStreamWriterStart = 1, kArenaPool = 2, kOperatorTables = 3 };

// Registers `mu` (which lives as long as the process) once; thread-safe.
void GuardAcrossFork(std::mutex* mu, ForkRank rank);

// A new lock, never destroyed (a fork may come during exit), registered.
std::mutex* NewGuardedMutex(ForkRank rank);

}  // namespace torchscan
