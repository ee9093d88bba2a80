// A tile of queries against one batch entry's keys and values: the small
// products of attention without a matmul library's per-call set-up, so that
// each tile runs over its own queries' valid keys. Queries go one to a lane:
// a key's scores against a tile's queries form vectors, so a query's softmax
// (its max and its sum over keys) runs down its lane rather than across a
// row. A query tile is two vectors of queries, its halves, each scored over
// its own longest length; K is read in place, V in place or packed in panels
// of columns. Vectorised by Highway, dispatched at run time.
#ifndef ATTNSCORE_KERNELS_ATTENTION_TILE_H_
#define ATTNSCORE_KERNELS_ATTENTION_TILE_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// The queries of a half tile: the lanes of a vector of floats on the CPU's
// target (16 with AVX-512, 8 with AVX2), at most kMaxQueryTileLanes. A query
// tile holds up to 2 · QueryTileLanes() queries, rows [0, L) its first half
// and [L, 2L) its second.
size_t QueryTileLanes();
inline constexpr size_t kMaxQueryTileLanes = 16;

// Q's rows for a query tile, feature by feature: packed[f · 2L + r] =
// q[r][f · q_column_stride] for r < rows <= 2L and f < depth, and 0 for
// rows <= r < 2L (L = QueryTileLanes()): 2L · depth floats.
void PackQueries(size_t rows, const float* const* q, int64_t q_column_stride, size_t depth,
                 float* packed);

// The scores of a query tile that PackQueries packed: for r in half h
// (lanes [hL, hL + L)) and keys j < widths[h], scores[j · 2L + r] = scale ·
// Σ_f q_r[f] · k_j[f], the sum over f in order from 0 whatever the tile, so
// that a query gets the same bits in any tile, half or lane. widths[1] = 0
// means no second half; else widths[0] <= widths[1]. Key j's `depth`
// features are contiguous at k + j · k_row_stride; keys at or past
// widths[1] (widths[0] for one half) are never read. Lanes of the first half
// past widths[0] are not written. Also row_max[r] for r < 2L: the max of
// row r's scores at its keys starts[r] <= j < valid[r] (-Inf where there
// are none); null `starts` means every lane's keys start at 0.
void ScoreQueryTile(const float* packed_q, size_t depth, const float* k, int64_t k_row_stride,
                    const size_t (&widths)[2], float scale, const int32_t* starts,
                    const int32_t* valid, float* row_max, float* scores);

// One half's softmax but for its normalisation: for its L lanes r from
// `scores` (key j's scores at scores + j · row_step), e = exp(s - row_max[r])
// at keys starts[r] <= j < valid[r] (from 0 where `starts` is null) and 0 at
// the others below `width`, in place, and inv_sum[r] = 1 / Σ_j e, summed over
// j in order (so the same bits in any tile); row r's weights are e ·
// inv_sum[r]; the sums themselves in sums[r] where `sums` is not null. Returns
// bit r set where row r has no softmax: no key, or a NaN or +Inf among its
// scores, or all of them -Inf (the reference gives it uniform weights, or
// NaN). `row_max` may be any finite bound at or above a lane's scores (a
// key block's exps against the max so far): the exps are then of the
// difference from it, and a lane whose scores are all -Inf sums 0.
uint32_t QueryTileExps(const int32_t* starts, const int32_t* valid, const float* row_max,
                       size_t width, size_t row_step, float* scores, float* inv_sum,
                       float* sums = nullptr);

// Rows per MixTile on the CPU's target: 8 with AVX-512, 6 on others; at
// most kMaxMixTileRows.
size_t MixTileRows();
inline constexpr size_t kMaxMixTileRows = 8;

// The weights of up to MixTileRows() rows: row r's weight of key j is
// rows[r][j · step], its output scaled by scales[r] (1 where scales is
// null). Step 0 weighs every key by rows[r][0].
struct TileWeights {
  const float* const* rows;
  size_t step;
  const float* scales;
};

// out[r][c] = scale_r · Σ_{j < width} weight_r[j] · v_j[c] for r < rows <=
// MixTileRows(), c < value_dim; value rows are `value_dim` contiguous floats,
// `v_row_stride` apart. Sums run over j in order from 0: a row whose
// weights are 0 from some key on gets the value of the sum that stops there
// while its values are finite (the same bits, but that a sum of zero may
// come out +0 where it stopped at -0). Returns bit r set where row r's
// output holds a NaN or Inf.
uint32_t MixTile(size_t rows, const TileWeights& weights, size_t width, const float* v,
                 int64_t v_row_stride, size_t value_dim, float* const* out);

// V packed in panels of P = `panel_columns` (>= 1) columns, so that
// MixPackedTile, where P is ValuePanelColumns(), reads each strip of
// columns as one stream rather than a stride through V's rows: panel p
// holds columns [p·P, p·P + P_p), P_p = min(P, value_dim - p·P), of keys 0
// to `keys` - 1, key after key (P_p floats each), and starts at packed +
// p·P·keys. keys · value_dim floats in all.
void PackValues(const float* v, int64_t v_row_stride, int64_t v_column_stride, size_t keys,
                size_t value_dim, size_t panel_columns, float* packed);

// The columns of one MixTile strip on the CPU's target (two vectors): the
// panel width at which MixPackedTile reads each panel once, front to back.
size_t ValuePanelColumns();

// MixTile over V as PackValues packed it (`packed_keys` >= first_key +
// width keys, in panels of `panel_columns`), from key `first_key` on: the
// same sums in the same order, so the same bits and the same flags, for any
// panel width.
uint32_t MixPackedTile(size_t rows, const TileWeights& weights, size_t width, const float* packed,
                       size_t packed_keys, size_t first_key, size_t value_dim, size_t panel_columns,
                       float* const* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_ATTENTION_TILE_H_
