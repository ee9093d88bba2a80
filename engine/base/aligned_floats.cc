#include "base/aligned_floats.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

namespace attnscore::internal {
namespace {

constexpr size_t kLineBytes = 64;
constexpr size_t kMaxFloats = ~size_t{0} / sizeof(float) / 2;

}  // namespace

AlignedFloats::AlignedFloats(size_t count) {
  if (count > kMaxFloats) throw std::bad_alloc();
  const size_t bytes = (count == 0 ? 1 : count) * sizeof(float);
  if (bytes < kHugePageBytes) {
    data_ = static_cast<float*>(::operator new (bytes, std::align_val_t{kLineBytes}));
    std::memset(data_, 0, bytes);
    capacity_ = bytes / sizeof(float);
    return;
  }
  // One page more than the whole pages `bytes` takes, then the parts before
  // the first 2 MiB boundary and after the array returned. Anonymous pages
  // are zero.
  const size_t mapped = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = ::mmap(nullptr, mapped + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  char* const base = static_cast<char*>(p);
  const size_t head =
      (kHugePageBytes - reinterpret_cast<uintptr_t>(base) % kHugePageBytes) % kHugePageBytes;
  if (head > 0) ::munmap(base, head);
  ::munmap(base + head + mapped, kHugePageBytes - head);
  ::madvise(base + head, mapped, MADV_HUGEPAGE);  // advice: ignored where unsupported
  data_ = reinterpret_cast<float*>(base + head);
  capacity_ = mapped / sizeof(float);
  mapped_ = true;
}

AlignedFloats::AlignedFloats(AlignedFloats&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

AlignedFloats& AlignedFloats::operator=(AlignedFloats&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

AlignedFloats::~AlignedFloats() { Release(); }

void AlignedFloats::Release() {
  if (data_ == nullptr) return;
  if (mapped_) {
    ::munmap(data_, capacity_ * sizeof(float));
  } else {
    ::operator delete (data_, std::align_val_t{kLineBytes});
  }
  data_ = nullptr;
  capacity_ = 0;
  mapped_ = false;
}

}  // namespace attnscore::internal
