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
  kMatmulInputs, // a matmul's inputs packed densely where oneDNN cannot read them
  kProjections,  // a model's projected inputs (multi-head: Q, K, V and the heads' output)
  kKeyFeatures,  // additive attention: one chunk of keys' features, per thread
  kSortedRows,   // the dot product's gemm path: Q, out and weights with queries sorted by length
  kHeadCopies,   // multi-head attention: one head's Q, K, V and out, dense
  kPackedKeys,   // the dot product's tile path: each entry's K (and V) packed in panels
  kCount,
};

// A slot keeps its buffer between calls up to this size, so the steady state
// of ordinary calls does not allocate. A larger buffer is mapped for the call
// and unmapped by TrimThreadScratch at its end: one huge request does not pin
// memory for the thread's life. Kept at most: 11 slots x 4 MiB per thread.
constexpr size_t kKeptScratchBytes = size_t{4} << 20;

// A buffer of at least `count` floats for `slot` on this thread, starting on
// a 64-byte cache line. It stays valid until the next ThreadScratch for the
// same slot or the next TrimThreadScratch on this thread; its contents are
// unspecified. Throws std::bad_alloc.
float* ThreadScratch(ScratchSlot slot, size_t count);

// Returns this thread's buffers larger than kKeptScratchBytes to the system.
// Called where no scratch pointer is held: at the end of each engine call
// (CallScope) and by each OpenMP worker at the end of a parallel region.
void TrimThreadScratch();

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_SCRATCH_H_
