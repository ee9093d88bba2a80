// The softmax carried across key blocks: see tile_key_blocks.h.
#include "ops/tile_key_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnscore::ops::dot_product {

KeyBlock::KeyBlock(const int32_t* tile_valid, int64_t count, int64_t zeros,
                   const size_t (&tile_widths)[2], int64_t first_key)
    : from(first_key), valid(own_), first_row(count) {
  const auto within = [&](int64_t length) {
    return std::clamp<int64_t>(length - from, 0, kTileKeyBlock);
  };
  for (int64_t r = count - 1; r >= zeros; --r) {
    own_[r] = static_cast<int32_t>(within(tile_valid[r]));
    if (own_[r] > 0) first_row = r;
  }
  for (int half = 0; half < 2; ++half) {
    const auto width = static_cast<int64_t>(tile_widths[half]);
    widths[half] = width == 0 ? 0 : static_cast<size_t>(within(width));
  }
}

void RunningSoftmax::Reset(int64_t rows) {
  rows_ = rows;
  folded_ = 0;
  std::fill_n(max_, kMaxRows, -std::numeric_limits<float>::infinity());
  std::fill_n(shift_, kMaxRows, 0.0f);
  std::fill_n(rescale_, kMaxRows, 1.0f);
  std::fill_n(sum_, kMaxRows, 0.0f);
}

const float* RunningSoftmax::Shift(const float* block_max) {
  for (int64_t r = 0; r < rows_; ++r) {
    // A NaN block max (a NaN score) keeps the max so far; the block's sum
    // is NaN and flags the row.
    const float next = block_max[r] > max_[r] ? block_max[r] : max_[r];
    // exp(-Inf - m') is 0: a row's first finite max scales its sum of 0.
    rescale_[r] = next == max_[r] ? 1.0f : std::exp(max_[r] - next);
    max_[r] = next;
    shift_[r] = std::isinf(next) && next < 0 ? 0.0f : next;
  }
  return shift_;
}

void RunningSoftmax::AddSums(uint32_t rows, const float* block_sums) {
  for (int64_t r = 0; r < rows_; ++r) {
    if ((rows >> r & 1) != 0) sum_[r] = sum_[r] * rescale_[r] + block_sums[r];
  }
}

void RunningSoftmax::Fold(uint32_t rows, float* const* block, int64_t columns, float* const* out) {
  for (int64_t r = 0; r < rows_; ++r) {
    if ((rows >> r & 1) == 0) continue;
    if ((folded_ >> r & 1) == 0) {
      std::copy_n(block[r], columns, out[r]);
      folded_ |= uint32_t{1} << r;
      continue;
    }
    const float rescale = rescale_[r];
    for (int64_t c = 0; c < columns; ++c) out[r][c] = out[r][c] * rescale + block[r][c];
  }
}

uint32_t RunningSoftmax::Finish(uint32_t rows, int64_t columns, float* const* out) const {
  uint32_t none = 0;
  for (int64_t r = 0; r < rows_; ++r) {
    if ((rows >> r & 1) == 0) continue;
    if (std::isinf(max_[r]) && max_[r] < 0) {
      none |= uint32_t{1} << r;
      continue;
    }
    const float inv_sum = 1.0f / sum_[r];
    for (int64_t c = 0; c < columns; ++c) out[r][c] *= inv_sum;
  }
  return none;
}

}  // namespace attnscore::ops::dot_product
