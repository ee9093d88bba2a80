#include "base/scratch.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace attnscore::internal {
namespace {

// One slot's buffer: from operator new up to kKeptScratchBytes, mapped
// beyond (unmapping returns it to the system at once, whatever the allocator
// would have kept). A mapping is whole 2 MiB pages on a 2 MiB boundary,
// offered to the kernel's transparent huge pages: a 16 MiB buffer then
// costs 8 page faults instead of 4096. Mapped anew for each call, a multi-
// head decoder step's projections (16 MiB) spent a fifth of its time in
// those faults.
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
      Map(bytes);
    } else {
      data_ = static_cast<float*>(::operator new (bytes, std::align_val_t{64}));
      capacity_ = bytes / sizeof(float);
    }
    return data_;
  }

  void TrimIfLarge() {
    if (mapped_) Release();
  }

 private:
  static constexpr size_t kMaxFloats = ~size_t{0} / sizeof(float) / 2;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // Maps whole huge pages for `bytes`: one page more than that, then returns
  // the parts before the first 2 MiB boundary and after the buffer.
  void Map(size_t bytes) {
    const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::mmap(nullptr, mapped + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    char* const base = static_cast<char*>(p);
    const size_t head = (kHugePage - reinterpret_cast<uintptr_t>(base) % kHugePage) % kHugePage;
    if (head > 0) ::munmap(base, head);
    ::munmap(base + head + mapped, kHugePage - head);
    ::madvise(base + head, mapped, MADV_HUGEPAGE);  // advice: ignored where unsupported
    data_ = reinterpret_cast<float*>(base + head);
    capacity_ = mapped / sizeof(float);
    mapped_ = true;
  }

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
