// A tile of a few query rows against one batch entry's keys and values: the
// small products of attention without a matmul library's per-call set-up, so
// that each tile runs over its own rows' valid keys. K is packed once per
// entry into panels; V is read in place. Vectorised by Highway, dispatched at
// run time.
#ifndef ATTNSCORE_KERNELS_ATTENTION_TILE_H_
#define ATTNSCORE_KERNELS_ATTENTION_TILE_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// Rows per tile: 6 rows by two vectors of keys or columns are 12
// accumulators, which with two loads and a broadcast fill AVX2's 16
// registers.
inline constexpr size_t kTileRows = 6;

// Key counts are padded to this many for packing and scoring: a panel is 16
// keys, and AVX-512 scores two panels at a time.
inline constexpr size_t kTileKeyPad = 32;

inline size_t PaddedTileKeys(size_t keys) {
  return (keys + kTileKeyPad - 1) / kTileKeyPad * kTileKeyPad;
}

// Floats PackKeys writes for `keys` keys of `depth` features.
inline size_t PackedKeysFloats(size_t keys, size_t depth) { return PaddedTileKeys(keys) * depth; }

// Packs K's first `keys` rows (`depth` floats each, `k_row_stride` apart,
// their elements `k_column_stride` apart) in panels of 16 keys: panel p
// holds, feature by feature, the 16 keys' values of that feature; keys past
// `keys`, up to PaddedTileKeys, are 0.
void PackKeys(const float* k, int64_t k_row_stride, int64_t k_column_stride, size_t keys,
              size_t depth, float* packed);

// scores[r][j] = scale · Σ_d q[r][d] · k_j[d] for r < rows <= kTileRows and
// j < width rounded up to a vector of keys (a padded key scores 0; at most
// PaddedTileKeys(width) are written), K as PackKeys packed it (with at
// least `width` keys). A score's sum runs over d in order from 0,
// whatever the tile, so a row gets the same bits in any tile.
void ScoreTile(size_t rows, const float* const* q, size_t depth, const float* packed, size_t width,
               float scale, float* const* scores);

// out[r][c] = Σ_{j < width} weights[r][j] · v_j[c] for r < rows <=
// kTileRows, c < value_dim; value rows are `value_dim` contiguous floats,
// `v_row_stride` apart. Sums run over j in order from 0: a row whose
// weights are 0 from some key on gets the value of the sum that stops there
// while its values are finite (the same bits, but that a sum of zero may
// come out +0 where it stopped at -0). Returns bit r set where row r's
// output holds a NaN or Inf.
uint32_t MixTile(size_t rows, const float* const* weights, size_t width, const float* v,
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

// MixTile over V as PackValues packed it (`packed_keys` >= width keys, in
// panels of `panel_columns`): the same sums in the same order, so the same
// bits and the same flags, for any panel width.
uint32_t MixPackedTile(size_t rows, const float* const* weights, size_t width, const float* packed,
                       size_t packed_keys, size_t value_dim, size_t panel_columns,
                       float* const* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_ATTENTION_TILE_H_
