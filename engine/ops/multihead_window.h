// The multi-head op's sliding window (docs/semantics.md section 5.4): each
// query's keys cut to [start, end), and the calls whose keys begin past key
// 0, which run over the keys their windows cover and no others.
#ifndef ATTNSCORE_OPS_MULTIHEAD_WINDOW_H_
#define ATTNSCORE_OPS_MULTIHEAD_WINDOW_H_

#include <cstdint>
#include <vector>

#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "base/call_scope.h"
#include "ops/dot_product.h"

namespace attnscore::ops {

// The checks of a window: each side -1 (unbounded) or >= 0.
Status CheckWindow(const char* op, const Window& window);

// Query i of N against M keys at p = i + M - N sees keys [start, end): `ends`
// (B, N), each query's length after valid lengths and causal, are cut to
// p + right + 1, and `starts` become p - left (each clamped to [0, M]).
// A row of length 0 (d2l's L = 0) stays [0, 0); a row the window leaves no
// key becomes [s, s) with s in [1, M] (RowLengths::start's encoding).
// Returns whether any row starts past key 0 or has no key: only then does
// the call need the windowed paths below; else `ends` say it all.
bool CutByWindow(const Window& window, int64_t batch, int64_t queries, int64_t keys,
                 std::vector<int64_t>* ends, std::vector<int64_t>* starts);

// The first key that query n's window lets any row see (the same for every
// batch entry: p depends on n alone).
int64_t WindowFirstKey(const Window& window, int64_t n, int64_t queries, int64_t keys);

// One query head's prefill with a window: q (B, N, D), k (B, M, D), v (B,
// M, Dv), out (B, N, Dv), attention (B, N, M) or empty, checked; `ends` and
// `starts` (B, N) from CutByWindow. Blocks of kWindowQueryBlock queries,
// each through the gemm path over only the keys its rows' windows cover,
// each row masked to its own [start, end), for the calls the tile kernels
// do not run (ops/multihead_tiles.h: a cap, terms, sinks, the bf16 mode).
// Leaves rows of length 0 or of no key to FixUncoveredRows.
//
// A block's keys are the union of its rows' windows, so each row scores up
// to kWindowQueryBlock keys outside its own (masked, then zeros): 12% more
// than its 1,024 for a window of 1,024. Smaller blocks make shorter
// matmuls.
constexpr int64_t kWindowQueryBlock = 128;
Status WindowedHead(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                    const ConstTensor& v, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& starts, const ScoreForm& form, const Tensor& out,
                    const Tensor& attention);

// The rows the windowed paths leave to be written whole: a row of length 0
// gets weights 1/M over all M keys and their mean of V (d2l's rule); a row
// the window left no key gets weights 0 and output 0. Every head.
void FixUncoveredRows(const ConstTensor& v, const std::vector<int64_t>& ends,
                      const std::vector<int64_t>& starts, const Tensor& out,
                      const Tensor& attention);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MULTIHEAD_WINDOW_H_
