#include "base/aligned_floats.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
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

AlignedFloats AlignedFloats::Reserved(size_t count) {
  if (count > kMaxFloats) throw std::bad_alloc();
  const size_t page = PageBytes();
  const size_t bytes = ((count == 0 ? 1 : count) * sizeof(float) + page - 1) / page * page;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // A huge page would take 2 MiB for the first float written in it, and
  // Discard could not give back less than it.
  ::madvise(p, bytes, MADV_NOHUGEPAGE);  // advice: ignored where unsupported
  AlignedFloats reserved;
  reserved.data_ = static_cast<float*>(p);
  reserved.capacity_ = bytes / sizeof(float);
  reserved.mapped_ = true;
  reserved.reserved_ = true;
  return reserved;
}

size_t AlignedFloats::PageBytes() { return static_cast<size_t>(::sysconf(_SC_PAGESIZE)); }

void AlignedFloats::Discard(size_t first, size_t count) {
  if (!reserved_ || first >= capacity_) return;
  const size_t page_floats = PageBytes() / sizeof(float);
  const size_t end = first + std::min(count, capacity_ - first);
  // Whole pages only: [first, end) rounded inwards to page boundaries.
  const size_t begin = (first + page_floats - 1) / page_floats * page_floats;
  const size_t stop = end / page_floats * page_floats;
  if (begin >= stop) return;
  ::madvise(data_ + begin, (stop - begin) * sizeof(float), MADV_DONTNEED);
}

AlignedFloats::AlignedFloats(AlignedFloats&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)),
      mapped_(std::exchange(other.mapped_, false)),
      reserved_(std::exchange(other.reserved_, false)) {}

AlignedFloats& AlignedFloats::operator=(AlignedFloats&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    reserved_ = std::exchange(other.reserved_, false);
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
  reserved_ = false;
}

}  // namespace attnscore::internal
