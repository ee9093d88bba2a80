#include "base/scratch.h"

#include "base/aligned_floats.h"

namespace attnscore::internal {
namespace {

// One slot's buffer (AlignedFloats: whole huge pages from 2 MiB up), kept
// between calls up to kKeptScratchBytes and mapped anew for each call
// beyond. Mapped in 4 KiB pages for each call, a multi-head decoder step's
// projections (16 MiB) spent a fifth of its time in page faults.
class Buffer {
 public:
  float* Get(size_t count) {
    if (count > floats_.capacity() || floats_.data() == nullptr) {
      floats_ = AlignedFloats();  // the old array released before the new one is made
      floats_ = AlignedFloats(count);
    }
    return floats_.data();
  }

  void TrimIfLarge() {
    if (floats_.capacity() * sizeof(float) > kKeptScratchBytes) floats_ = AlignedFloats();
  }

 private:
  AlignedFloats floats_;
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
