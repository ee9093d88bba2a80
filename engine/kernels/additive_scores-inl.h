// Per-target bodies of the additive score kernels (additive_scores.h);
// included once per Highway target by additive_scores.cc.
//
// The fast tanh. With A = exp(2a) and B = exp(2b),
//   tanh(a + b) = 1 - 2 / (1 + A·B),
// so once every projected query and key element has been turned into its
// factor (N·H + M·H exponentials), each (query, key, hidden) triple costs one
// FMA for 1 + A·B, an approximate reciprocal with one Newton step (three
// ops), and the FMA that accumulates w_v[h] / (1 + A·B); the score is then
// Σ w_v − 2·Σ w_v / (1 + A·B). No exponential, no division and no rounding of
// a + b per triple. Factors are exp(2·clamp(x, ±22)), so A·B stays within
// [e^-88, e^88] and never overflows; the clamp only changes a result when a
// clamped element meets one of the other side beyond ±12, which the op checks
// for (kTanhFactorExactBound) before choosing this path.
//
// Accuracy: |fast − tanh(a + b)| <= 6e-7 absolute, asserted by
// tests/additive_test.cc on each target over every 5th float in [2^-8, 22]
// and its negative, every 997th below, values beyond ±22 up to ±Inf, and
// 4M random pairs (a, b). Measured maxima: 1.8e-7 on AVX-512 and scalar,
// 3.3e-7 on AVX2, 4.2e-7 on SSE4 (a 12-bit reciprocal estimate and no FMA).
// Sources: Highway's Exp (1 ulp per factor), the product and the FMA (1/2
// ulp each), the reciprocal (one Newton step on a 2^-14 estimate on
// AVX-512, 1.5·2^-12 on SSE4/AVX2), and 1 − 2r, which turns a relative
// error of r into an absolute one. A NaN projection gives a NaN score.
#if defined(ATTNSCORE_KERNELS_ADDITIVE_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_ADDITIVE_SCORES_INL_H_
#undef ATTNSCORE_KERNELS_ADDITIVE_SCORES_INL_H_
#else
#define ATTNSCORE_KERNELS_ADDITIVE_SCORES_INL_H_
#endif

#include <cmath>
#include <cstddef>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/additive_scores.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// 1 / x from the hardware's estimate and one Newton step: r·(2 − x·r).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Reciprocal(D d, V x) {
  const V estimate = hn::ApproximateReciprocal(x);
  const V error = hn::NegMulAdd(x, estimate, hn::Set(d, 1.0f));  // 1 − x·r
  return hn::MulAdd(estimate, error, estimate);
}

// exp(2·clamp(x, ±kTanhFactorClamp)); NaN stays NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V TanhFactor(D d, V x) {
  const V limit = hn::Set(d, kernels::kTanhFactorClamp);
  const V clamped = hn::Min(hn::Max(x, hn::Neg(limit)), limit);
  const V factor = hn::Exp(d, hn::Add(clamped, clamped));
  return hn::IfThenElse(hn::IsNaN(x), x, factor);
}

// Four running maxima over alternate vectors: one would wait on each Max's
// latency, reading about 44 GB/s from L2 on a Zen 3 against 75 with four.
float MaxAbs(const float* HWY_RESTRICT x, size_t count) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto m0 = hn::Zero(d), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 4 * lanes <= count; i += 4 * lanes) {
    m0 = hn::Max(m0, hn::Abs(hn::LoadU(d, x + i)));
    m1 = hn::Max(m1, hn::Abs(hn::LoadU(d, x + i + lanes)));
    m2 = hn::Max(m2, hn::Abs(hn::LoadU(d, x + i + 2 * lanes)));
    m3 = hn::Max(m3, hn::Abs(hn::LoadU(d, x + i + 3 * lanes)));
  }
  for (; i + lanes <= count; i += lanes) m0 = hn::Max(m0, hn::Abs(hn::LoadU(d, x + i)));
  const auto largest = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  float result = hn::GetLane(hn::MaxOfLanes(d, largest));
  for (; i < count; ++i) result = std::fmax(result, std::fabs(x[i]));
  return result;
}

void ToTanhFactors(float* HWY_RESTRICT x, size_t count) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) hn::StoreU(TanhFactor(d, hn::LoadU(d, x + i)), d, x + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < count; ++i) hn::StoreU(TanhFactor(d1, hn::LoadU(d1, x + i)), d1, x + i);
}

// Key vectors per tile: with AVX-512's 32 registers a 4×4 tile keeps 16
// accumulators, 4 key vectors and the broadcasts in registers; the 16
// registers of SSE4/AVX2 fit 4×2.
constexpr size_t kTileKeyVectors = HWY_MAX_BYTES >= 64 ? 4 : 2;

// One tile: kRows query rows × kCols key vectors, accumulated over all
// `hidden` features. Each loaded key vector serves kRows queries and each
// broadcast query element kCols key vectors.
template <size_t kRows, size_t kCols, bool kFast, class D>
HWY_INLINE void ScoreTile(D d, const float* const* HWY_RESTRICT q_rows,
                          const float* HWY_RESTRICT k_cols, size_t k_stride, size_t hidden,
                          const float* HWY_RESTRICT w_v, float w_sum,
                          float* const* HWY_RESTRICT out_rows, size_t column) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const V one = hn::Set(d, 1.0f);
  V acc[kRows][kCols];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t c = 0; c < kCols; ++c) acc[r][c] = hn::Zero(d);
  }
  for (size_t h = 0; h < hidden; ++h) {
    const V w = hn::Set(d, w_v[h]);
    const float* k_row = k_cols + h * k_stride;
    V keys[kCols];
    for (size_t c = 0; c < kCols; ++c) keys[c] = hn::LoadU(d, k_row + c * lanes);
    for (size_t r = 0; r < kRows; ++r) {
      const V query = hn::Set(d, q_rows[r][h]);
      for (size_t c = 0; c < kCols; ++c) {
        if constexpr (kFast) {
          const V denominator = hn::MulAdd(query, keys[c], one);
          acc[r][c] = hn::MulAdd(w, Reciprocal(d, denominator), acc[r][c]);
        } else {
          acc[r][c] = hn::MulAdd(w, hn::Tanh(d, hn::Add(query, keys[c])), acc[r][c]);
        }
      }
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t c = 0; c < kCols; ++c) {
      // Fast: Σ w·(1 − 2/(1 + A·B)) = Σ w − 2·acc.
      const V score = kFast ? hn::NegMulAdd(hn::Set(d, 2.0f), acc[r][c], hn::Set(d, w_sum))
                            : acc[r][c];
      hn::StoreU(score, d, out_rows[r] + column + c * lanes);
    }
  }
}

template <size_t kRows, bool kFast>
HWY_INLINE void ScoreRows(const float* const* q_rows, const float* k_cols, size_t k_stride,
                          size_t hidden, const float* w_v, float w_sum, size_t width,
                          float* const* out_rows) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t padded = (width + lanes - 1) / lanes * lanes;
  const size_t tile = kTileKeyVectors * lanes;
  size_t j = 0;
  for (; j + tile <= padded; j += tile) {
    ScoreTile<kRows, kTileKeyVectors, kFast>(d, q_rows, k_cols + j, k_stride, hidden, w_v,
                                             w_sum, out_rows, j);
  }
  for (; j < padded; j += lanes) {
    ScoreTile<kRows, 1, kFast>(d, q_rows, k_cols + j, k_stride, hidden, w_v, w_sum, out_rows,
                               j);
  }
}

template <bool kFast>
HWY_INLINE void ScoreBlock(const float* const* q_rows, size_t rows, const float* k_cols,
                           size_t k_stride, size_t hidden, const float* w_v, float w_sum,
                           size_t width, float* const* out_rows) {
  switch (rows) {
    case 1: return ScoreRows<1, kFast>(q_rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
    case 2: return ScoreRows<2, kFast>(q_rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
    case 3: return ScoreRows<3, kFast>(q_rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
    default: return ScoreRows<4, kFast>(q_rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
  }
}

void AdditiveScoreBlock(kernels::TanhMode mode, const float* const* q_rows, size_t rows,
                        const float* k_cols, size_t k_stride, size_t hidden, const float* w_v,
                        float w_sum, size_t width, float* const* out_rows) {
  if (mode == kernels::TanhMode::kExpProduct) {
    ScoreBlock<true>(q_rows, rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
  } else {
    ScoreBlock<false>(q_rows, rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
  }
}

void HighwayTanhArray(const float* HWY_RESTRICT x, size_t count, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) hn::StoreU(hn::Tanh(d, hn::LoadU(d, x + i)), d, out + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < count; ++i) hn::StoreU(hn::Tanh(d1, hn::LoadU(d1, x + i)), d1, out + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // include guard
