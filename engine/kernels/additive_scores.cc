// Run-time dispatch of the additive score kernels (additive_scores-inl.h).
#include "kernels/additive_scores.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/additive_scores.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/additive_scores-inl.h"
#include "kernels/dispatch.h"

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(MaxAbs);
HWY_EXPORT(ToTanhFactors);
HWY_EXPORT(AdditiveScoreBlock);
HWY_EXPORT(HighwayTanhArray);

float MaxAbs(const float* x, size_t count) { return ATTNSCORE_DISPATCH(MaxAbs)(x, count); }

void ToTanhFactors(float* x, size_t count) { ATTNSCORE_DISPATCH(ToTanhFactors)(x, count); }

void AdditiveScoreBlock(TanhMode mode, const float* const* q_rows, size_t rows,
                        const float* k_cols, size_t k_stride, size_t hidden, const float* w_v,
                        float w_sum, size_t width, float* const* out_rows) {
  ATTNSCORE_DISPATCH(AdditiveScoreBlock)
  (mode, q_rows, rows, k_cols, k_stride, hidden, w_v, w_sum, width, out_rows);
}

void HighwayTanhArray(const float* x, size_t count, float* out) {
  ATTNSCORE_DISPATCH(HighwayTanhArray)(x, count, out);
}

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
