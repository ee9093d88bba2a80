#include "base/scratch.h"

#include <cstdint>
#include <vector>

namespace attnscore::internal {

float* ThreadScratch(ScratchSlot slot, size_t count) {
  thread_local std::vector<float> buffers[static_cast<size_t>(ScratchSlot::kCount)];
  std::vector<float>& buffer = buffers[static_cast<size_t>(slot)];
  // On a cache line: the kernels' rows and the bf16 copies carved from it
  // start on one, and no line is shared with another buffer.
  constexpr size_t kLineFloats = 64 / sizeof(float);
  if (buffer.size() < count + kLineFloats - 1) buffer.resize(count + kLineFloats - 1);
  const auto address = reinterpret_cast<uintptr_t>(buffer.data());
  return buffer.data() + ((64 - address % 64) % 64) / sizeof(float);
}

}  // namespace attnscore::internal
