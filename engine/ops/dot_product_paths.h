// The ways the dot-product attention runs (docs/semantics.md section 2),
// private to the op and the ops built on it: ops/dot_product.cc checks a
// call, resolves its lengths and picks one; ops/multihead.cc runs the row
// path over a group of query heads.
//
// The row path (dot_product_rows.cc, rows whole; dot_product_row_blocks.cc,
// keys in blocks; the blocks' size and the threads in
// dot_product_row_plan.cc): a few queries per batch entry, each query row
// through the row kernels, its keys split into blocks when rows are too few
// to share among threads, merged in a fixed order.
// The tile path (dot_product_tiles.cc): every other fp32 call whose keys
// and values are not too large. Each entry's queries sorted by length, a
// tile of them at a time through the tile kernels, one query per vector
// lane: scores, softmax and W V over each half tile's own longest length, so
// the work follows the lengths and no call pays a matmul's set-up.
// The gemm path (dot_product_gemm.cc): bf16 calls, and fp32 ones too large
// for the tile path. Batch entries grouped by their widths, oneDNN matmuls
// for Q Kᵀ and W V, the masked softmax in between, chunk by chunk so the
// scores stay in cache. Before it (dot_product_sorted.cc), an entry whose
// per-query lengths are out of order has its queries sorted by length, so
// that its blocks of queries are cut by width.
//
// On the tile and gemm paths W V runs over more keys than a short query's
// own (its tile's, or its group's, widest); a row that values past its own
// width made NaN or Inf is redone over its own keys. On every path a
// query's output depends on its own valid keys and values alone, whatever
// the other queries of its entry see.
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_PATHS_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_PATHS_H_

#include <cstdint>
#include <vector>

#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "base/call_scope.h"
#include "base/parallel.h"
#include "base/valid_lens.h"
#include "ops/dot_product.h"

namespace attnscore::ops::dot_product {

inline constexpr const char* kOp = "DotProductAttention";

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Up to this many queries per entry, and with contiguous rows, each query row
// runs on its own through the row kernels: matrix-vector products, where
// oneDNN's matmul costs more in set-up than in arithmetic. Each row also uses
// exactly its own valid length. Measured on (8, N, 1024), random lengths:
// N = 1 46 us against oneDNN's 102, N = 2 72 against 123, N = 4 even (137).
constexpr int64_t kRowPathMaxQueries = 3;

inline bool UseRowPath(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                       const ConstTensor& out) {
  return q.dims[1] <= kRowPathMaxQueries && q.strides[2] == 1 && k.strides[2] == 1 &&
         v.strides[2] == 1 && out.strides[2] == 1;
}

// The threads worth waking for the row path: a second thread pays only
// where the call's rows take about kMinSharedRowNanos on one thread. Waking
// it, sharing the tasks and joining cost 1-3 µs here, and on a Zen 5 each
// thread ran its tasks of keys in L2 about 1.45x slower while the other ran
// too. A chunk of r rows over n keys of D + Dv = F features takes about
// n (F / 128) (3.5 + 1.5 r) ns on one thread (fp32; bf16 and int8 caches
// within 25%). Measured 2 threads against 1 with D = Dv = 64: one row over
// 1,024 keys 0.68x, over 2,048 1.14-1.4x; a KvCache's 8 query heads over 2
// KV heads, 512 keys 0.85x, 1,024 1.3x. RowPathNanos is that estimate for
// `entries` entries of `groups` groups of `group_rows` rows each, a
// group's rows sharing their keys.
constexpr double kMinSharedRowNanos = 10e3;
double RowPathNanos(int64_t entries, int64_t groups, int64_t group_rows, int64_t keys,
                    int64_t features);
int RowPathThreads(int threads, int64_t entries, int64_t groups, int64_t group_rows, int64_t keys,
                   int64_t features);

// Tasks of the row path: up to kernels::kMaxSharedRows rows that share
// their keys (an entry's queries, a group's query heads) go together, a
// chunk, reading each K and V row once for all of them. Where whole rows
// would make fewer than kRowTasks tasks (counted as the fewest chunks an
// entry's rows make, whatever shares keys), the keys are cut into blocks,
// each a task of its own, so that threads share even one long row; the
// blocks are merged in a fixed order. Keys are cut only where the rows, in
// their fewest chunks, have work for a second thread (RowPathNanos at least
// kMinSharedRowNanos), into blocks of at least about kMinRowKeyBlock keys:
// each block costs its own kernel calls, reductions and merge on any
// thread count, about 0.1 µs (256-key blocks made (8, 1, 1024) 10-15%
// slower on one thread; one row of 1,024 keys in 4 blocks took 3.4-3.7 µs,
// whole 2.9-3.0; one of 2,048 keys took 10.3 µs in 8 blocks of 256, 9.9 in
// 4 of 512, 9.3 whole, on a Zen 5). Where an entry
// has more rows than a chunk, cut blocks hold at most kSharedKeyBlockBytes
// of K and V rows, so that each chunk after the first finds them in L2:
// their keys are read from memory once, not once per chunk. (Before, a GQA
// group's four heads were cut so too: KvCache decode of 2,048 keys in whole
// rows took 0.87-0.93x the time on one thread, alternated, on a Zen 3.)
constexpr int64_t kRowTasks = 8;
constexpr int64_t kMinRowKeyBlock = 512;
constexpr int64_t kSharedKeyBlockBytes = int64_t{128} << 10;

// How the row path's tasks go to its threads: where every row of the
// `batch` entries sees all the keys, its tasks cost the same, and each
// thread takes a share of its own (kRuns: on 2 threads, one row's decode
// of 2,048 keys in 8 blocks took 4.35 µs against 5.03 from one counter);
// else one at a time from one counter, as the rows' lengths, and so their
// tasks' costs, differ.
internal::Balance RowPathBalance(const internal::RowLengths& lens, int64_t batch);

// The key block for `entries` batch entries of `entry_rows` rows each (an
// entry's queries, or its query heads), over `keys` keys of D + Dv =
// `features` floats. It depends on these alone, not on how rows share keys
// nor on the layout, so every thread count, layout and grouping of the
// heads gives the same bits; a block of `keys` or more means each row whole.
int64_t RowKeyBlock(int64_t entries, int64_t entry_rows, int64_t keys, int64_t features);

// The paths take checked arguments, the call's resolved lengths and the form
// of its scores (ScoreForm: the factor, 1/sqrt(D) for the op, and the soft
// cap); an empty `attention_weights` is not written.
Status RowPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
               const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
               int64_t key_block, const Tensor& out, const Tensor& attention_weights);
Status GemmPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                const Tensor& out, const Tensor& attention_weights);
// The row path over G groups of rows per entry, each group with K and V of
// its own (a K/V head and its query heads): q (B, G, R, D), k (B, G, M, D),
// v (B, G, M, Dv), out (B, G, R, Dv), attention_weights (B, G, R, M) or
// empty; `lens` has (B, R) rows, each group's row i taking row i's length.
// Rows and K, V rows contiguous. Each row gets the bits RowPath gives it
// alone; RowPath is the case G = 1. K and V are floats, bfloat16 words
// (Bf16KeyView and TensorView<const uint16_t>: a bf16 KvCache's) or int8
// codes with their scales (Int8KeyView, Int8ValueView: an int8 KvCache's),
// read by the row kernels' own forms; for a cache's keys, key_block is a
// multiple of kernels::kCachedKeyGroup.
template <class KeyView, class ValueView>
Status GroupedRowPath(const internal::CallContext& call, const ConstTensor& q, const KeyView& k,
                      const ValueView& v, const internal::RowLengths& lens, const ScoreForm& form,
                      int64_t key_block, const Tensor& out, const Tensor& attention_weights);
// A bf16 KvCache's keys (B, G, M, D) as words by strides (strides[2] = D:
// a group of kernels::kCachedKeyGroup positions takes their words, laid out
// as kernels::Bf16Keys says).
struct Bf16KeyView : TensorView<const uint16_t> {};
// An int8 KvCache's keys (B, G, M, D) as codes by strides (strides[2] = D:
// a group of kernels::kCachedKeyGroup positions takes their bytes, laid out
// as kernels::Int8Keys says), and entry b's group g's params (from its
// position 0 on) at params + b · params_strides[0] + g · params_strides[1].
struct Int8KeyView : TensorView<const uint8_t> {
  const float* params = nullptr;
  int64_t params_strides[2] = {};
};
// Its values (B, G, M, Dv) as codes by strides, and entry b's group g's
// per-position scales (kernels::Int8Values) at scales + b · scales_strides[0]
// + g · scales_strides[1].
struct Int8ValueView : TensorView<const int8_t> {
  const float* scales = nullptr;
  int64_t scales_strides[2] = {};
};
// The gemm path on queries sorted by length within each entry where that
// saves work: Q gathered, out and the weights scattered back, row by row.
// It sorts only when the sorted blocks' FLOPs are below kSortWhenBelow of
// the blocks in the caller's order. Sorting saves less time than FLOPs: the
// narrow blocks run in smaller matmuls, and the copies cost a few percent.
// Measured alternately against no sorting: (4, 128, 128), random per-query
// lengths, 0.88 of the FLOPs, took 1.04x the time; (1, 1024, 4096), 0.6x.
constexpr double kSortWhenBelow = 0.8;
Status SortedGemmPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                      const Tensor& out, const Tensor& attention_weights);

// The tile path (dot_product_tiles.cc): each entry's queries sorted by
// length and taken two vectors' lanes at a time through the tile kernels
// (kernels/attention_tile.h), scores, softmax and W V in one pass per tile
// over each half tile's own longest length: no oneDNN call, so small
// problems pay no set-up, and the work follows the lengths. Past
// kTileKeyBlock keys (tile_key_blocks.h) a tile goes over its keys a block
// at a time. For fp32 calls whose entries' K (and V, where it is packed)
// take at most kTilePathMaxPackedFloats, a thread's kept scratch; past
// kTileKeyBlock keys, whose copied K (where strided) and packed V take at
// most kTilePathMaxLongPackedFloats, and whose weights are not asked for
// (`weights`): a block's weights are not yet the row's. Its scores stay in
// registers, uncapped: form.softcap must be 0.
constexpr int64_t kTilePathMaxPackedFloats = int64_t{1} << 20;
// 64 MiB: packing V costs about two reads of it, against at least 8,192
// keys' scores and W V for a query (causal prefill of 16,384 keys, D 64:
// 4 MiB packed against 34 GFLOP).
constexpr int64_t kTilePathMaxLongPackedFloats = int64_t{1} << 24;
// The tile path's calls under this many FLOPs (counting every query over
// its entry's longest length) stay on one thread. The causal prefill of 64
// tokens, D 64 (1 MFLOP so counted, 4.5 µs), took 5.5 µs on 2 threads; of
// 128 tokens (4.2 MFLOP), 11.5 against 13.9.
constexpr double kMinSharedTileFlops = 2e6;
bool UseTilePath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                 const ConstTensor& v, bool weights);
Status TilePath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                const Tensor& out, const Tensor& attention_weights);

// order[r] = the query of entry b that goes r-th, shortest first, ties in
// the caller's order, for r < N = lens.queries(). Lengths that already
// rise keep their order; else, up to kCountingSortMaxKeys keys, lengths are
// counted (in 8 KiB of stack); above, sorted as 64-bit keys that hold a
// length and a query index: lens.keys() < 2^31 and N < 2^32.
constexpr int64_t kCountingSortMaxKeys = 1024;
void OrderByLength(const internal::RowLengths& lens, int64_t b, int64_t* order);

// Whether `threads` (>= 2) contiguous ranges of whole entries, each cut at
// the entry boundary nearest its even share of the work, hold at most
// kEntryRangeSlack more than that share (an entry's work: the sum of its
// rows' lengths, a row of length 0 mixing all M keys); if so, their bounds
// in bounds[0, threads]: entries from 0 to B, each range at least one
// entry. `before` holds batch + 1 doubles of scratch. The tile path then
// gives each thread one range.
constexpr double kEntryRangeSlack = 0.05;
bool EvenEntryRanges(const internal::RowLengths& lens, int64_t batch, int threads, double* before,
                     int64_t* bounds);

// Copies the `cols` elements of a row from `src` (elements `src_step`
// apart) to `dst` (`dst_step` apart).
void CopyRow(const float* src, int64_t src_step, float* dst, int64_t dst_step, int64_t cols);

// The FLOPs the gemm path's products spend on `batch` entries with these
// lengths: each block of queries over its own widths.
double GemmFlops(const internal::RowLengths& lens, int64_t batch, int64_t depth, int64_t value_dim);

}  // namespace attnscore::ops::dot_product

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_PATHS_H_
