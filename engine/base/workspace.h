// The memory an engine lends each call besides its outputs, and the pool it
// keeps it in between calls.
#ifndef ATTNSCORE_BASE_WORKSPACE_H_
#define ATTNSCORE_BASE_WORKSPACE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "attnscore/cancel.h"
#include "base/aligned_floats.h"
#include "base/thread_team.h"

namespace attnscore::internal {

// The float buffers one thread of a call may hold at the same time, each a
// slot of its own.
enum class ScratchSlot {
  kRowBuffer,     // one row gathered from strided memory, or a softmax row's exps
  kWorkspace,     // an op's scores and intermediate products
  kRowTask,       // the dot product's row path: one task's scores and weights
  kRowPartials,   // the dot product's row path: each key block's partial result
  kBf16Copies,    // the dot product's bf16 mode: rounded copies of Q, K, V, W
  kMatmulInputs,  // a matmul's inputs packed densely where oneDNN cannot read them
  kProjections,   // a model's projected inputs (multi-head: Q, K, V and the heads' output)
  kKeyFeatures,   // additive attention: one chunk of keys' features, per thread
  kSortedRows,    // the dot product's gemm path: Q, out and weights with queries sorted by length
  kHeadCopies,    // multi-head attention: one head's Q, K, V and out, dense
  kPackedKeys,    // the dot product's tile path: each entry's K (and V) packed in panels
  kCount,
};

// The integer buffers of a call (its calling thread's).
enum class IndexSlot {
  kRowLengths,     // the resolved valid lengths: each row's, then each entry's widths
  kCacheLengths,   // a KvCache's per-query lengths for one Attend
  kOrder,          // the dot product's paths: queries or entries in an order of their own
  kSortedLengths,  // the sorted gemm path: each row's length in sorted order
  kBounds,         // the tile path: each thread's first entry
  kPackStates,     // the tile path: each entry's packing state (atomic ints)
  kEntryWork,      // the tile path: the work of the entries before each (Reals)
  kCount,
};

// A buffer keeps its memory between calls up to this size, so the steady
// state of ordinary calls does not allocate. A larger one is mapped for
// the call and returned when the call ends: one huge request does not pin
// memory for the engine's life. Kept at most: 11 slots x 4 MiB per thread.
constexpr size_t kKeptScratchBytes = size_t{4} << 20;
// Except that larger buffers which two calls in a row asked for stay, up to
// this many bytes per workspace: a call repeated at one size (d2l's module
// at 1,024 tokens projects into 16 MiB) reuses its pages rather than mapping
// and faulting them in again, which cost it up to 20 ms a call on a VM.
constexpr size_t kKeptRepeatedBytes = size_t{64} << 20;

// One call's memory: for each thread of the call's team (thread 0 is the
// calling thread) a float buffer per ScratchSlot, and the calling thread's
// integer buffers. Lent to one call at a time (WorkspacePool), so nothing in
// it is shared by concurrent calls.
class Workspace {
 public:
  // Buffers for `threads` threads; `team` (may be null: every region runs
  // on the caller) is the engine's, whose threads index them.
  explicit Workspace(int threads, ThreadTeam* team = nullptr);

  int threads() const { return threads_; }
  ThreadTeam* team() const { return team_; }

  // The token the call checks between rows (attnscore/cancel.h), or null:
  // set by the call's CallScope for its length.
  void set_cancel_token(const CancelToken* token) { cancel_token_ = token; }
  const CancelToken* cancel_token() const { return cancel_token_; }

  // A buffer of at least `count` floats for `slot` and the thread asking:
  // a worker of the team, else the calling thread (thread 0).
  // On a 64-byte cache line; valid until the next Floats for the same slot
  // and thread, or the end of the call; contents unspecified. Throws
  // std::bad_alloc.
  float* Floats(ScratchSlot slot, size_t count);
  // At least `count` 64-bit words for `slot`, the calling thread's (the
  // call's bookkeeping: read by its team, written before the team starts).
  int64_t* Words(IndexSlot slot, size_t count);
  // The same, as doubles.
  double* Reals(IndexSlot slot, size_t count);

  // What a layer above keeps per thread of the call's team (the matmul
  // adapter: its oneDNN memory objects and scratchpads, which cost more to
  // make than a small product takes to run), in a type this layer does not
  // know.
  struct ThreadCache {
    virtual ~ThreadCache() = default;
    virtual size_t HeldBytes() const = 0;
  };
  // The asking thread's (as for Floats); empty until the layer fills it.
  std::unique_ptr<ThreadCache>& Cache();

  // Ends a call: returns buffers larger than kKeptScratchBytes but those of
  // them this call and the one before asked for at that size, up to
  // kKeptRepeatedBytes.
  void Trim();
  // Bytes held now.
  size_t HeldBytes() const;

 private:
  int threads_;
  ThreadTeam* team_;
  const CancelToken* cancel_token_ = nullptr;
  bool oversized_ = false;  // an integer buffer grew past kKeptScratchBytes
  // False only while no buffer of floats_ is larger than kKeptScratchBytes
  // and no bit of asked_large_ is set: Trim then has nothing to walk.
  std::atomic<bool> large_{false};
  size_t ThreadIndex() const;

  std::vector<AlignedFloats> floats_;                 // threads_ x ScratchSlot::kCount
  // Per buffer of floats_, whether this call (bit 0) and the one before
  // (bit 1) asked it for more than kKeptScratchBytes; each written by its
  // own thread only.
  std::vector<unsigned char> asked_large_;
  std::vector<std::unique_ptr<ThreadCache>> caches_;  // threads_
  std::vector<std::vector<int64_t>> words_;
  std::vector<std::vector<double>> reals_;
};

// An engine's workspaces: one per call running at the same time, kept for
// the next calls. Thread-safe.
class WorkspacePool {
 public:
  WorkspacePool(int threads, ThreadTeam* team) : threads_(threads), team_(team) {}
  ~WorkspacePool();
  WorkspacePool(const WorkspacePool&) = delete;
  WorkspacePool& operator=(const WorkspacePool&) = delete;

  // A workspace for one call (a kept one, or a new one).
  // Throws std::bad_alloc.
  std::unique_ptr<Workspace> Take();
  // Takes it back when the call ends, trimmed.
  void Give(std::unique_ptr<Workspace> workspace);

  // The bytes every workspace not lent out holds.
  size_t HeldBytes();

 private:
  const int threads_;
  ThreadTeam* const team_;
  // The last workspace given back, taken first: a call that runs while no
  // other does needs no lock (a toy call takes about 0.3 µs, a lock pair
  // 40 ns of it). Owned by the pool while here.
  std::atomic<Workspace*> spare_{nullptr};
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Workspace>> free_;
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_WORKSPACE_H_
