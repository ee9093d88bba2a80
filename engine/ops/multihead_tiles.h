// The multi-head op's prefill through the tile kernels, every query head of
// every entry in one parallel loop (multihead_tiles.cc): no barrier between
// heads, and the work follows each query's keys [start, end), with a
// sliding window's or without.
#ifndef ATTNSCORE_OPS_MULTIHEAD_TILES_H_
#define ATTNSCORE_OPS_MULTIHEAD_TILES_H_

#include <cstdint>
#include <vector>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "base/call_scope.h"
#include "ops/score_form.h"

namespace attnscore::ops {

// Q (B, N, Hq, D), K (B, M, Hkv, D), V (B, M, Hkv, Dv), out (B, N, Hq, Dv),
// attention (B, Hq, N, M) or empty, checked; `ends` and `starts` (B, N)
// from CutByWindow, `cut` its result. The op calls it with a window that
// cuts keys, or on 2 threads or more where a head's dot product would take
// the tile path, so the thread count changes no bit. For fp32 calls whose
// scores are the factor alone (ScoreForm::ScaleOnly), K's and out's rows
// contiguous, no query of length 0, and each query's keys beginning and
// ending no earlier than the query's before (causal masks, windows,
// per-entry lengths): K/V heads a group at a time, each group's V packed,
// then the tiles of 2L consecutive queries (kernels::QueryTileLanes()) of
// its query heads taken by the threads one at a time, each over the keys
// its queries see together (a key block at a time where they cross a
// multiple of kTileKeyBlock: only with a window and without the weights),
// each query masked to its own. A query the
// window leaves no key is not written (FixUncoveredRows). Each query's bits
// are those of the dot product's tile path. Returns false, having written
// nothing, where it does not run the call; else runs it and sets *status
// (a thread without scratch, or a cancelled call, may leave earlier
// groups' rows written, as the tile path may).
//
// Causal prefill (1, 1024, 1024) x 16 heads of 64 on 2 threads, alternated
// on a Zen 5: 5.8-6.4 ms, against 6.6-10.3 ms a head at a time (each head
// its own copies, its own packing while the other thread waits, and a
// barrier); 1.86-1.96x its 1-thread time (BM_MultiHeadTwoThreads). Causal
// prefill of 16,384 tokens with window (1,024, 0): 86-89% of the fp32
// matmul's GFLOP/s per visible pair, against 61-64% in WindowedHead's
// blocks; of 32,768 tokens with window (16,384, 0), in key blocks: 211-214
// GFLOP/s against the matmul's 239 (88-89%), where WindowedHead's blocks
// gave 151-152.
bool MultiHeadTiles(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                    const ConstTensor& v, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& starts, bool cut, const ScoreForm& form,
                    const Tensor& out, const Tensor& attention, Status* status);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MULTIHEAD_TILES_H_
