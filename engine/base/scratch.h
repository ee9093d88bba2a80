// Per-thread scratch memory: what a call needs besides its outputs.
#ifndef ATTNSCORE_BASE_SCRATCH_H_
#define ATTNSCORE_BASE_SCRATCH_H_

#include <cstddef>

namespace attnscore::internal {

// The buffers one call may hold at the same time, each a slot of its own.
enum class ScratchSlot {
  kRowBuffer,    // one row gathered from strided memory, or a softmax row's exps
  kWorkspace,    // an op's scores and intermediate products
  kRowTask,      // the dot product's row path: one task's scores and weights
  kRowPartials,  // the dot product's row path: each key block's partial result
  kBf16Copies,   // the dot product's bf16 mode: rounded copies of Q, K, V, W
  kCount,
};

// A buffer of at least `count` floats for `slot` on this thread, starting on
// a 64-byte cache line, that lives until the thread ends. It grows, never
// shrinks, so the steady state does not allocate. Throws std::bad_alloc.
float* ThreadScratch(ScratchSlot slot, size_t count);

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_SCRATCH_H_
