#include "torchscan_dispatch/core/arena.h"

#include <mutex>

#include "torchscan_dispatch/core/fork_guard.h"

namespace torchscan {
namespace {

// Idle blocks kept for the next scan: 1024 x 64 KiB = 64 MiB at most.
constexpr size_t kMaxIdleBlocks = 1024;

std::mutex& PoolMutex() {
  static std::mutex* const mu = NewGuardedMutex(ForkRank::kArenaPool);  // Note [Locks across fork]
  return *mu;
}
std::vector<unsigned char*>& Idle() {
  static auto* idle = new std::vector<unsigned char*>();
  return *idle;
}

}  // namespace

unsigned char* AcquireBlock() {
  {
    std::lock_guard<std::mutex> lock(PoolMutex());
    if (!Idle().empty()) {
      unsigned char* b = Idle().back();
      Idle().pop_back();
      return b;
    }
  }
  return new unsigned char[kBlockBytes];  // new[] aligns to max_align_t
}

void ReleaseBlock(unsigned char* block) {
  {
    std::lock_guard<std::mutex> lock(PoolMutex());
    if (Idle().size() < kMaxIdleBlocks) {
      Idle().push_back(block);
      return;
    }
  }
  delete[] block;
}

Arena::~Arena() { Clear(); }

void Arena::Clear() {
  for (unsigned char* b : blocks_) ReleaseBlock(b);
  for (unsigned char* b : large_) delete[] b;
  blocks_.clear();
  large_.clear();
  current_ = nullptr;
  used_ = capacity_ = 0;
}

void Arena::Rewind(const Mark& m) {
  while (blocks_.size() > m.blocks) {
    ReleaseBlock(blocks_.back());
    blocks_.pop_back();
  }
  while (large_.size() > m.large) {
    delete[] large_.back();
    large_.pop_back();
  }
  current_ = m.current;
  used_ = m.used;
  capacity_ = m.capacity;
}

void Arena::NewBlock(size_t at_least) {
  if (at_least > kBlockBytes) {
    // A single oversized record: give it its own allocation, keep the
    // current block for what follows.
    large_.push_back(new unsigned char[at_least]);
    current_ = large_.back();
    capacity_ = at_least;
    return;
  }
  blocks_.push_back(AcquireBlock());
  current_ = blocks_.back();
  capacity_ = kBlockBytes;
}

}  // namespace torchscan
