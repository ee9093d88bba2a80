#include "base/scratch.h"

#include <sys/mman.h>

#include <new>

namespace attnscore::internal {
namespace {

// One slot's buffer: from operator new up to kKeptScratchBytes, mapped
// beyond (page-aligned, and unmapping returns it to the system at once,
// whatever the allocator would have kept).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Release(); }

  float* Get(size_t count) {
    if (count <= capacity_ && data_ != nullptr) return data_;
    Release();
    if (count > kMaxFloats) throw std::bad_alloc();
    const size_t bytes = (count == 0 ? 1 : count) * sizeof(float);
    if (bytes > kKeptScratchBytes) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      data_ = static_cast<float*>(p);
      mapped_ = true;
    } else {
      data_ = static_cast<float*>(::operator new (bytes, std::align_val_t{64}));
    }
    capacity_ = bytes / sizeof(float);
    return data_;
  }

  void TrimIfLarge() {
    if (mapped_) Release();
  }

 private:
  static constexpr size_t kMaxFloats = ~size_t{0} / sizeof(float) / 2;

  void Release() {
    if (data_ == nullptr) return;
    if (mapped_) {
      ::munmap(data_, capacity_ * sizeof(float));
    } else {
      ::operator delete (data_, std::align_val_t{64});
    }
    data_ = nullptr;
    capacity_ = 0;
    mapped_ = false;
  }

  float* data_ = nullptr;
  size_t capacity_ = 0;
  bool mapped_ = false;
};

thread_local Buffer buffers[static_cast<size_t>(ScratchSlot::kCount)];

}  // namespace

float* ThreadScratch(ScratchSlot slot, size_t count) {
  return buffers[static_cast<size_t>(slot)].Get(count);
}

void TrimThreadScratch() {
  for (Buffer& buffer : buffers) buffer.TrimIfLarge();
}

}  // namespace attnscore::internal
