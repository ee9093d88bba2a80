// Run-time dispatch of ExpOfDifference over arrays.
#include "kernels/fast_exp.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/fast_exp.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/fast_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

void ExpArray(const float* x, size_t n, float* y) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(ExpOfDifference(d, hn::LoadU(d, x + i), zero), d, y + i);
  }
  // The remainder one lane at a time, through the same code.
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) {
    hn::StoreU(ExpOfDifference(d1, hn::LoadU(d1, x + i), hn::Zero(d1)), d1, y + i);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(ExpArray);

void ExpArray(const float* x, size_t n, float* y) { ATTNSCORE_DISPATCH(ExpArray)(x, n, y); }

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
