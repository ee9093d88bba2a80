// The soft cap (soft_cap.h): per-target bodies and run-time dispatch.
#include "kernels/soft_cap.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/soft_cap.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"

// Per target, after highway.h: Highway's Tanh.
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// cap · tanh(x / cap) of one vector. Highway's Tanh takes finite input:
// x / cap is clamped to ±64 first (tanh(64) is 1 in float), so ±Inf gives
// ±cap; Min and Max may drop a NaN, so a NaN x is passed through.
template <class D>
HWY_INLINE hn::Vec<D> Capped(D d, hn::Vec<D> x, hn::Vec<D> cap) {
  const hn::Vec<D> limit = hn::Set(d, 64.0f);
  const hn::Vec<D> ratio = hn::Min(hn::Max(hn::Div(x, cap), hn::Neg(limit)), limit);
  return hn::Mul(cap, hn::IfThenElse(hn::IsNaN(x), x, hn::Tanh(d, ratio)));
}

void SoftCapBody(float* HWY_RESTRICT x, size_t n, float cap) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto caps = hn::Set(d, cap);
  size_t j = 0;
  for (; j + lanes <= n; j += lanes) hn::StoreU(Capped(d, hn::LoadU(d, x + j), caps), d, x + j);
  const hn::CappedTag<float, 1> d1;
  for (; j < n; ++j) hn::StoreU(Capped(d1, hn::LoadU(d1, x + j), hn::Set(d1, cap)), d1, x + j);
}

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(SoftCapBody);

void SoftCap(float* x, size_t n, float cap) { ATTNSCORE_DISPATCH(SoftCapBody)(x, n, cap); }

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
