// Memory for recorded metadata: fixed-size blocks from a process-wide pool,
// handed out by a bump allocator. Addresses never move (recorded pointers
// stay valid for the life of a scan), nothing is copied as a scan grows, and
// blocks are reused by the next scan instead of being faulted in afresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace torchscan {

inline constexpr size_t kBlockBytes = 64 * 1024;

// Process-wide pool of kBlockBytes blocks (mutex-protected; touched once per
// block, not per call). Keeps at most a bounded number of idle blocks.
unsigned char* AcquireBlock();
void ReleaseBlock(unsigned char* block);

class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();
  void Clear();  // gives every block back: nothing allocated before stays valid

  // Rewinding: what was allocated after GetMark() is given back by Rewind().
  struct Mark {
    size_t blocks = 0, large = 0;
    unsigned char* current = nullptr;
    size_t used = 0, capacity = 0;
  };
  Mark GetMark() const { return {blocks_.size(), large_.size(), current_, used_, capacity_}; }
  void Rewind(const Mark& m);

  // Grows the last allocation `p` (of `had` elements) to `n` in place when
  // it is the last one made and its block has room; false otherwise.
  template <class T>
  bool Grow(T* p, size_t had, size_t n) {
    unsigned char* end = reinterpret_cast<unsigned char*>(p + had);
    if (p == nullptr || end != current_ + used_ || used_ + (n - had) * sizeof(T) > capacity_) return false;
    used_ += (n - had) * sizeof(T);
    return true;
  }

  template <class T>
  T* Alloc(size_t n) {
    static_assert(std::is_trivially_destructible_v<T>, "arena memory is never destroyed");
    static_assert(alignof(T) <= alignof(std::max_align_t));
    size_t offset = (used_ + alignof(T) - 1) & ~(alignof(T) - 1);
    const size_t bytes = n * sizeof(T);
    if (offset + bytes > capacity_) {
      NewBlock(bytes);
      offset = 0;
    }
    used_ = offset + bytes;
    return reinterpret_cast<T*>(current_ + offset);
  }

 private:
  void NewBlock(size_t at_least);

  std::vector<unsigned char*> blocks_;  // pooled blocks
  std::vector<unsigned char*> large_;   // one-off allocations above kBlockBytes
  unsigned char* current_ = nullptr;
  size_t used_ = 0;
  size_t capacity_ = 0;
};

// An append-only sequence with stable element addresses, stored in pooled
// blocks (no reallocation copies as it grows).
template <class T>
class BlockLog {
  static constexpr size_t kPerBlock = kBlockBytes / sizeof(T);

 public:
  BlockLog() = default;
  BlockLog(const BlockLog&) = delete;
  BlockLog& operator=(const BlockLog&) = delete;
  ~BlockLog() { Clear(); }
  void Clear() {
    for (size_t i = 0; i < size_; ++i) (*this)[i].~T();
    for (unsigned char* b : blocks_) ReleaseBlock(b);
    blocks_.clear();
    size_ = 0;
  }

  template <class... A>
  T& Emplace(A&&... args) {
    if (size_ == blocks_.size() * kPerBlock) blocks_.push_back(AcquireBlock());
    T* slot = reinterpret_cast<T*>(blocks_.back()) + size_ % kPerBlock;
    ++size_;
    return *new (slot) T(std::forward<A>(args)...);
  }
  T& operator[](size_t i) { return reinterpret_cast<T*>(blocks_[i / kPerBlock])[i % kPerBlock]; }
  const T& operator[](size_t i) const { return reinterpret_cast<const T*>(blocks_[i / kPerBlock])[i % kPerBlock]; }
  size_t size() const { return size_; }

 private:
  std::vector<unsigned char*> blocks_;
  size_t size_ = 0;
};

}  // namespace torchscan
