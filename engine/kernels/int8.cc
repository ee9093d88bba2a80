// The int8 codes of a KvCache (int8.h). Ranges and quotients are worked out
// in double, so that no finite input overflows (max − min of two floats can
// pass float's range) and a code is the nearest one to the stored scale.
#include "kernels/int8.h"

#include <algorithm>
#include <cmath>

namespace attnscore::kernels {

void CodeKeyGroup(const float* keys, int64_t row_stride, size_t rows, size_t depth, uint8_t* codes,
                  int64_t code_stride, float* params) {
  float* lo = params;
  float* step = params + depth;
  for (size_t d = 0; d < depth; ++d) {
    float least = keys[d], greatest = keys[d];
    for (size_t t = 1; t < rows; ++t) {
      const float x = keys[static_cast<int64_t>(t) * row_stride + static_cast<int64_t>(d)];
      least = std::min(least, x);
      greatest = std::max(greatest, x);
    }
    lo[d] = least;
    step[d] = static_cast<float>((static_cast<double>(greatest) - least) / 255.0);
    for (size_t t = 0; t < rows; ++t) {
      const double x = keys[static_cast<int64_t>(t) * row_stride + static_cast<int64_t>(d)];
      const double code = step[d] > 0.0f ? std::nearbyint((x - least) / step[d]) : 0.0;
      codes[static_cast<int64_t>(t) * code_stride + static_cast<int64_t>(d)] =
          static_cast<uint8_t>(std::clamp(code, 0.0, 255.0));
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
  for (size_t c = 0; c < n; ++c) {
    const double x = values[static_cast<int64_t>(c) * step];
    const double code = *scale > 0.0f ? std::nearbyint(x / *scale) : 0.0;
    codes[c] = static_cast<int8_t>(std::clamp(code, -127.0, 127.0));
  }
}

}  // namespace attnscore::kernels
