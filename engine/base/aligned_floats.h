// An owned float array that starts on a 64-byte cache line, so that a row of
// 16k floats is whole cache lines and no vector load of it splits a line.
// From kHugePageBytes up it is whole 2 MiB pages on a 2 MiB boundary,
// offered to the kernel's transparent huge pages: fewer page faults when
// first touched and fewer TLB misses when streamed.
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
  AlignedFloats(AlignedFloats&& other) noexcept;
  AlignedFloats& operator=(AlignedFloats&& other) noexcept;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats();

  float* data() const { return data_; }
  // The floats held: `count` or more (mapped arrays fill their last page).
  size_t capacity() const { return capacity_; }

 private:
  void Release();

  float* data_ = nullptr;
  size_t capacity_ = 0;
  bool mapped_ = false;
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_ALIGNED_FLOATS_H_
