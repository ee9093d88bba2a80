// The score terms: see score_form.h.
#include "ops/score_form.h"

#include <algorithm>
#include <cmath>

namespace attnscore::ops {

void ScoreForm::AddTerms(int64_t b, int64_t g, int64_t i, int64_t first_key, float* x,
                         int64_t count) const {
  const int64_t head = Head(g, i), query = place.query0 + i * place.query_per_row;
  const int64_t batch = place.batch0 + b, key = place.key0 + first_key;
  if (slopes != nullptr) {
    // -slope · |p - j|: the distance exact in float up to 2^24 keys, the
    // product rounded once.
    const float slope = slopes[head * slopes_stride];
    const int64_t p = query + position_shift;
    for (int64_t t = 0; t < count; ++t) {
      x[t] -= slope * static_cast<float>(std::llabs(p - (key + t)));
    }
  }
  if (!bias.empty()) {
    const float* row = bias.data + batch * bias.strides[0] + head * bias.strides[1] +
                       query * bias.strides[2] + key * bias.strides[3];
    for (int64_t t = 0; t < count; ++t) x[t] += row[t * bias.strides[3]];
  }
  if (window_left >= 0) {
    const int64_t before = query + position_shift - window_left - key;  // keys x[0, before)
    for (int64_t t = 0; t < std::min(before, count); ++t) x[t] = -INFINITY;
  }
  if (!mask.empty()) {
    const uint8_t* row = mask.data + batch * mask.strides[0] + head * mask.strides[1] +
                         query * mask.strides[2] + key * mask.strides[3];
    for (int64_t t = 0; t < count; ++t) {
      if (row[t * mask.strides[3]] == 0) x[t] = -INFINITY;
    }
  }
}

}  // namespace attnscore::ops
