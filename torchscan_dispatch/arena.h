// A bump allocator in fixed blocks: addresses never move, so recorded spans
// stay valid for the life of a scan; no per-call heap allocation once a block
// is warm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace torchscan {

class Arena {
 public:
  static constexpr size_t kBlockBytes = 256 * 1024;

  template <class T>
  T* Alloc(size_t n) {
    static_assert(std::is_trivially_destructible_v<T>, "arena memory is never destroyed");
    const size_t bytes = n * sizeof(T);
    size_t offset = (used_ + alignof(T) - 1) & ~(alignof(T) - 1);
    if (blocks_.empty() || offset + bytes > capacity_) {
      NewBlock(bytes + alignof(T));
      offset = (used_ + alignof(T) - 1) & ~(alignof(T) - 1);
    }
    used_ = offset + bytes;
    return reinterpret_cast<T*>(blocks_.back().get() + offset);
  }

  size_t bytes_reserved() const { return reserved_; }

 private:
  void NewBlock(size_t at_least) {
    capacity_ = at_least > kBlockBytes ? at_least : kBlockBytes;
    blocks_.emplace_back(new unsigned char[capacity_]);  // new[] aligns to max_align_t
    used_ = 0;
    reserved_ += capacity_;
  }

  std::vector<std::unique_ptr<unsigned char[]>> blocks_;
  size_t used_ = 0;
  size_t capacity_ = 0;
  size_t reserved_ = 0;
};

}  // namespace torchscan
