// The tile path's rows over their keys a block at a time, past
// kTileKeyBlock keys (dot_product_tiles.cc): each block's scores, exps and
// W V while its scores stay in L2, the softmax carried from block to block.
// With m the max so far and s the sum so far of exp(x - m), a block whose
// rows' max is m_b and whose exps against m' = max(m, m_b) sum to s_b and
// mix to o_b leaves m', s · exp(m - m') + s_b and o · exp(m - m') + o_b;
// the output is o / s after the last block. Every block starts at a
// multiple of kTileKeyBlock, so a row's sums depend only on its own keys,
// whatever its tile; a row whose keys all lie in one block gets the bits of
// the single pass. The multi-head op's windowed tiles (multihead_tiles.cc)
// go by the same blocks.
#ifndef ATTNSCORE_OPS_TILE_KEY_BLOCKS_H_
#define ATTNSCORE_OPS_TILE_KEY_BLOCKS_H_

#include <cstdint>

#include "kernels/attention_tile.h"

namespace attnscore::ops::dot_product {

// Keys a query tile scores at once: its scores take 1 MiB with AVX-512's 32
// rows (512 KiB with AVX2's 16). On a Zen 5, a single pass over causal
// prefill of one head ran at 92-98% of the fp32 matmul up to 8,192 keys,
// whose scores take as much; 92% at 16,384 (2 MiB); past that, calls took
// the matmul path, at 46-67% from 32,768 keys.
inline constexpr int64_t kTileKeyBlock = 8192;

// Keys [from, from + kTileKeyBlock) of a query tile whose rows [zeros,
// count) have lengths valid[r] from key 0, rising (rows before `zeros` have
// none), and whose halves' widths are `widths` (ScoreQueryTile's): each
// row's length in the block, each half's width there and the first row
// with a key there, all counted from `from`.
class KeyBlock {
 public:
  // All the keys of a tile no wider than kTileKeyBlock: its own lengths.
  KeyBlock(const int32_t* tile_valid, int64_t zeros, const size_t (&tile_widths)[2])
      : valid(tile_valid), widths{tile_widths[0], tile_widths[1]}, first_row(zeros) {}
  KeyBlock(const int32_t* tile_valid, int64_t count, int64_t zeros, const size_t (&tile_widths)[2],
           int64_t first_key);
  KeyBlock(const KeyBlock&) = delete;
  KeyBlock& operator=(const KeyBlock&) = delete;

  const int64_t from = 0;
  const int32_t* const valid;  // 0 for lanes past the tile's rows
  size_t widths[2] = {};
  int64_t first_row = 0;

 private:
  int32_t own_[2 * kernels::kMaxQueryTileLanes] = {};
};

// Bits [first, count) of a row mask (count <= 32).
inline uint32_t RowsFrom(int64_t first, int64_t count) {
  const uint64_t below_count = (uint64_t{1} << count) - 1, below_first = (uint64_t{1} << first) - 1;
  return static_cast<uint32_t>(below_count & ~below_first);
}

// The softmax of a query tile's rows carried across key blocks. `rows`
// masks (bit r for row r) name the rows with keys in the block.
class RunningSoftmax {
 public:
  static constexpr int64_t kMaxRows = 2 * kernels::kMaxQueryTileLanes;

  // For rows [0, rows), rows <= kMaxRows: nothing seen yet.
  void Reset(int64_t rows);

  // Folds in each row's max over the block (-Inf where it has no key there)
  // and returns, per row, the max its block's exps subtract: the max so far,
  // or 0 while that is -Inf (no finite score yet: the block's exps are 0, or
  // NaN from a NaN score, which the exps flag).
  const float* Shift(const float* block_max);
  // Adds the block's sums of exps to the sums so far, scaled to the new max.
  void AddSums(uint32_t rows, const float* block_sums);
  // out[r] = out[r] · exp(m - m') + block[r] over `columns` floats, or
  // block[r] in the row's first block.
  void Fold(uint32_t rows, float* const* block, int64_t columns, float* const* out);
  // out[r] · 1 / s after the last block. Returns bit r set where row r has
  // no softmax for want of a finite score (its max -Inf); its output is
  // then left as it is.
  uint32_t Finish(uint32_t rows, int64_t columns, float* const* out) const;

 private:
  int64_t rows_ = 0;
  uint32_t folded_ = 0;  // the rows with an output so far
  alignas(64) float max_[kMaxRows];
  alignas(64) float shift_[kMaxRows];
  alignas(64) float rescale_[kMaxRows];
  alignas(64) float sum_[kMaxRows];
};

}  // namespace attnscore::ops::dot_product

#endif  // ATTNSCORE_OPS_TILE_KEY_BLOCKS_H_
