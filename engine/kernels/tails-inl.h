// Loads and stores of a row's last partial vector that touch no memory past
// the row; per-target, included from other -inl.h files.
#if defined(ATTNSCORE_KERNELS_TAILS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_TAILS_INL_H_
#undef ATTNSCORE_KERNELS_TAILS_INL_H_
#else
#define ATTNSCORE_KERNELS_TAILS_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// AVX2 and AVX-512 have masked loads and stores that neither fault nor
// write outside the mask; other targets go through a small aligned buffer.
// (Filling the buffer element by element and loading it whole also stalls
// on store forwarding: the buffer is the fallback, not the rule.)
#undef ATTNSCORE_NATIVE_MASKED_TAILS  // set anew for each target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define ATTNSCORE_NATIVE_MASKED_TAILS 1
#else
#define ATTNSCORE_NATIVE_MASKED_TAILS 0
#endif

// x[0, count) in the first lanes, `pad` in the others; count < Lanes(d).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V LoadTail(D d, const float* HWY_RESTRICT x, size_t count, float pad) {
#if ATTNSCORE_NATIVE_MASKED_TAILS
  const auto mask = hn::FirstN(d, count);
  return hn::IfThenElse(mask, hn::MaskedLoad(mask, d, x), hn::Set(d, pad));
#else
  HWY_ALIGN float buffer[hn::MaxLanes(d)];
  for (size_t k = 0; k < hn::Lanes(d); ++k) buffer[k] = k < count ? x[k] : pad;
  return hn::Load(d, buffer);
#endif
}

// The first `count` lanes of v into y[0, count); count < Lanes(d).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreTail(D d, V v, size_t count, float* HWY_RESTRICT y) {
#if ATTNSCORE_NATIVE_MASKED_TAILS
  hn::BlendedStore(v, hn::FirstN(d, count), d, y);
#else
  HWY_ALIGN float buffer[hn::MaxLanes(d)];
  hn::Store(v, d, buffer);
  for (size_t k = 0; k < count; ++k) y[k] = buffer[k];
#endif
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_TAILS_INL_H_ toggle
