// An owned float array that starts on a 64-byte cache line, so that a row of
// 16k floats is whole cache lines and no vector load of it splits a line.
// From kHugePageBytes up it is whole 2 MiB pages on a 2 MiB boundary,
// offered to the kernel's transparent huge pages: fewer page faults when
// first touched and fewer TLB misses when streamed.
// A reserved array (Reserved) is address space only until written: whole
// small pages, each taking memory when first touched and giving it back when
// discarded (Discard), so that memory follows what is in use.
#ifndef ATTNSCORE_BASE_ALIGNED_FLOATS_H_
#define ATTNSCORE_BASE_ALIGNED_FLOATS_H_

#include <cstddef>

namespace attnscore::internal {

class AlignedFloats {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  AlignedFloats() = default;
  // At least `count` floats, all zero. Throws std::bad_alloc.
  explicit AlignedFloats(size_t count);
  // At least `count` floats, all zero, on a page boundary: address space
  // with no memory behind it until a page is written, on pages of
  // PageBytes(), never huge ones. Not counted against the system's
  // overcommit limit, but under strict overcommit (vm.overcommit_memory=2),
  // where all of it is. Throws std::bad_alloc.
  static AlignedFloats Reserved(size_t count);
  // The size of a small page: what Reserved and Discard work in.
  static size_t PageBytes();
  AlignedFloats(AlignedFloats&& other) noexcept;
  AlignedFloats& operator=(AlignedFloats&& other) noexcept;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats();

  float* data() const { return data_; }
  // Gives the memory of the whole pages within [first, first + count) back
  // to the system: they read as zeros again, and take memory again when
  // written. For a Reserved array; a no-op on others.
  void Discard(size_t first, size_t count);
  // The floats held: `count` or more (mapped arrays fill their last page).
  size_t capacity() const { return capacity_; }

 private:
  void Release();

  float* data_ = nullptr;
  size_t capacity_ = 0;
  bool mapped_ = false;
  bool reserved_ = false;
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_ALIGNED_FLOATS_H_
