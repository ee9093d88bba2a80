// The int8 codes of a KvCache (int8.h). Ranges and quotients are worked out
// in double, so that no finite input overflows (max − min of two floats can
// pass float's range) and a code is the nearest one to the stored scale
// (a value's quotient is x times the scale's inverse, which may differ from
// x / scale in its last bit: it picks another code only a hair from a tie).
#include "kernels/int8.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention_row.h"

namespace attnscore::kernels {
namespace {

// The nearest integer to y, ties to even, for |y| < 2^51: adding 1.5 · 2^52
// leaves no fraction bits, so the sum is rounded to an integer as every
// double sum is (to nearest, ties to even), and subtracting it back is
// exact. The same as std::nearbyint, in two adds a compiler can vectorise.
inline double Nearest(double y) {
  constexpr double kShift = 6755399441055744.0;  // 1.5 · 2^52
  return (y + kShift) - kShift;
}

}  // namespace

void CodeKeyGroup(const float* keys, int64_t row_stride, size_t rows, size_t depth, uint8_t* codes,
                  float* params) {
  float* lo = params;
  float* step = params + depth;
  // Rows outer, channels inner: each pass over a row reads it whole.
  std::copy(keys, keys + depth, lo);
  std::copy(keys, keys + depth, step);  // the greatest, until the step replaces it
  for (size_t t = 1; t < rows; ++t) {
    const float* row = keys + static_cast<int64_t>(t) * row_stride;
    for (size_t d = 0; d < depth; ++d) {
      lo[d] = std::min(lo[d], row[d]);
      step[d] = std::max(step[d], row[d]);
    }
  }
  for (size_t d = 0; d < depth; ++d) {
    step[d] = static_cast<float>((static_cast<double>(step[d]) - lo[d]) / 255.0);
  }
  for (size_t t = 0; t < rows; ++t) {
    const float* row = keys + static_cast<int64_t>(t) * row_stride;
    for (size_t d = 0; d < depth; ++d) {
      const double y = step[d] > 0.0f ? (static_cast<double>(row[d]) - lo[d]) / step[d] : 0.0;
      codes[d * kCachedKeyGroup + t] = static_cast<uint8_t>(std::min(Nearest(y), 255.0));
    }
  }
}

void CodeValueRow(const float* values, int64_t step, size_t n, int8_t* codes, float* scale) {
  double largest = 0.0;
  for (size_t c = 0; c < n; ++c) {
    largest =
        std::max(largest, std::abs(static_cast<double>(values[static_cast<int64_t>(c) * step])));
  }
  *scale = static_cast<float>(largest / 127.0);
  const double inverse = *scale > 0.0f ? 1.0 / *scale : 0.0;
  for (size_t c = 0; c < n; ++c) {
    const double y = static_cast<double>(values[static_cast<int64_t>(c) * step]) * inverse;
    codes[c] = static_cast<int8_t>(std::clamp(Nearest(y), -127.0, 127.0));
  }
}

}  // namespace attnscore::kernels
