#include "api/call_scope.h"

#include <omp.h>
#include <xmmintrin.h>

#include <cstdint>
#include <vector>

namespace attnscore {
namespace {
constexpr unsigned kFlushToZero = 1u << 15;
constexpr unsigned kDenormalsAreZero = 1u << 6;
// All six exception mask bits: a caller who unmasked, say, invalid-operation
// traps must not get SIGFPE from the kernels' deliberate Inf * 0 probes.
constexpr unsigned kMaskAllExceptions = 0x1F80u;
// Rounding control (bits 13-14); cleared means round to nearest, which the
// fast exp's rounding by adding 1.5 * 2^23 relies on whatever the caller set.
constexpr unsigned kRoundingBits = 3u << 13;
constexpr int kScratchSlots = 4;
}  // namespace

FlushDenormals::FlushDenormals() : saved_(_mm_getcsr()) {
  _mm_setcsr((saved_ & ~kRoundingBits) | kFlushToZero | kDenormalsAreZero | kMaskAllExceptions);
}

FlushDenormals::~FlushDenormals() { _mm_setcsr(saved_); }

CallScope::CallScope(int threads) : saved_threads_(omp_get_max_threads()) {
  omp_set_num_threads(threads);
}

CallScope::~CallScope() { omp_set_num_threads(saved_threads_); }

float* ThreadScratch(int slot, size_t count) {
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& buffer = buffers[slot];
  // On a cache line: the kernels' rows and the bf16 copies carved from it
  // start on one, and no line is shared with another buffer.
  constexpr size_t kLineFloats = 64 / sizeof(float);
  if (buffer.size() < count + kLineFloats - 1) buffer.resize(count + kLineFloats - 1);
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64) / sizeof(float);
}

}  // namespace attnscore
