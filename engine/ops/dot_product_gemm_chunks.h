// The gemm path's pieces of work (dot_product_gemm.cc): batch entries
// grouped by their matmul widths, and groups cut into chunks whose scores
// stay in cache. Private to the dot product's paths.
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_GEMM_CHUNKS_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_GEMM_CHUNKS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/valid_lens.h"
#include "matmul/matmul.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops::dot_product {

// A chunk shape's two products.
struct Plans {
  std::shared_ptr<const matmul::Plan> scores, mix;
};

// Consecutive batch entries that need the same matmul widths, so one batched
// oneDNN call serves them all. (Widening entries to share calls was faster
// for decode, 116 -> 76-79 us on (8, 1, 1024), but computes keys past an
// entry's own lengths, which the contract rules out: a NaN there leaks.)
//
// An entry whose queries' lengths differ enough (per-query lengths, the
// causal lengths 1..N among them) is cut instead into blocks of
// kQueryBlock queries, a group each, whose widths are the block's own: the
// work then follows the lengths, not N times the longest.
struct Group {
  int64_t first = 0, count = 0;
  int64_t first_query = 0, queries = 0;  // the queries of each entry it covers
  // Key columns of Q Kᵀ: the longest valid length among the group's queries.
  // Keys past every query's length are never computed.
  int64_t score_width = 0;
  // Key columns of W V: score_width, or all M when a query has length 0,
  // since the reference gives such a query uniform weights over all M keys.
  int64_t mix_width = 0;
  int64_t row = 0;  // floats between score rows in scratch
  // Plans by chunk shape (entries, rows); a group has at most two shapes.
  std::vector<std::pair<std::pair<int64_t, int64_t>, Plans>> plans;
};

// A piece of a group small enough for its scores to stay in cache.
struct Chunk {
  int64_t first_batch, entries, first_query, rows;
};

// The call's entries in groups, in order (each entry in one group, or cut
// into blocks of queries, a group each).
std::vector<Group> GroupBatches(const internal::RowLengths& lens, int64_t batch, int64_t depth,
                                int64_t value_dim);

// Calls fn(chunk) for pieces of `g` whose scores take about kChunkBytes:
// whole batch entries while they fit, else blocks of queries (whole 16-row
// multiples keep oneDNN's kernels on full tiles). 2 MiB measured fastest on
// the long shape (1, 1024, 4096): smaller blocks make oneDNN's calls too
// short, larger ones spill the scores out of L2 before W V reads them.
template <class Fn>
void ForEachChunk(const Group& g, Fn fn) {
  const int64_t queries = g.queries;
  constexpr int64_t kChunkBytes = int64_t{2} << 20;
  const int64_t row_bytes = 4 * std::max<int64_t>(g.row, 1);
  // But a group of several entries gets about kGroupChunks chunks even when
  // it would fit in one: enough for threads to take whole ones (see
  // DotProductAttention). The cut must not depend on the thread count, or
  // the bits could.
  constexpr int64_t kGroupChunks = 8;
  const int64_t entries =
      std::clamp<int64_t>(kChunkBytes / (queries * row_bytes), 1, CeilDiv(g.count, kGroupChunks));
  int64_t rows = queries;
  if (queries * row_bytes > kChunkBytes) {
    rows = std::min(queries, std::max<int64_t>(16, kChunkBytes / row_bytes / 16 * 16));
  }
  for (int64_t b = 0; b < g.count; b += entries) {
    for (int64_t i = 0; i < queries; i += rows) {
      fn(Chunk{g.first + b, std::min(entries, g.count - b), g.first_query + i,
               std::min(rows, queries - i)});
    }
  }
}

}  // namespace attnscore::ops::dot_product

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_GEMM_CHUNKS_H_
