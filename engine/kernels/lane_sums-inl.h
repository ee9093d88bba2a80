// Lane sums of four accumulators at once, for the row kernels over floats
// (attention_row-inl.h) and over bf16 words (attention_row_cached.cc):
// included once per Highway target.
#if defined(ATTNSCORE_KERNELS_LANE_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#undef ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#else
#define ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#endif

#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// Lanes 0..3 of v's 128-bit blocks added: halves added until one block is left.
template <class D>
HWY_INLINE hn::Vec<hn::Full128<float>> SumBlocks(D d, hn::Vec<D> v) {
  if constexpr (hn::MaxLanes(D()) <= 4) {
    (void)d;
    return v;
  } else {
    const hn::Half<D> half;
    return SumBlocks(half, hn::Add(hn::LowerHalf(half, v), hn::UpperHalf(half, v)));
  }
}
#endif

// Stores scale · (the lane sum of sums[i]) for the first `count` <= 4 of
// four keys. Each key's sum is its own lanes added in a fixed tree, whatever
// the other three hold: lanes paired within each 128-bit block (the four
// keys transposed by interleaving, so one add serves all four), then the
// blocks added.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreSums4(D d, const V* HWY_RESTRICT sums, float scale, size_t count,
                           float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)d;
  for (size_t i = 0; i < count; ++i) out[i] = scale * hn::GetLane(sums[i]);
#else
  const hn::Repartition<double, D> dd;
  const V t01 =
      hn::Add(hn::InterleaveLower(d, sums[0], sums[1]), hn::InterleaveUpper(d, sums[0], sums[1]));
  const V t23 =
      hn::Add(hn::InterleaveLower(d, sums[2], sums[3]), hn::InterleaveUpper(d, sums[2], sums[3]));
  const auto low = hn::InterleaveLower(dd, hn::BitCast(dd, t01), hn::BitCast(dd, t23));
  const auto high = hn::InterleaveUpper(dd, hn::BitCast(dd, t01), hn::BitCast(dd, t23));
  const auto blocks = SumBlocks(d, hn::Add(hn::BitCast(d, low), hn::BitCast(d, high)));
  const hn::Full128<float> d4;
  const auto scaled = hn::Mul(blocks, hn::Set(d4, scale));
  if (count == 4) {
    hn::StoreU(scaled, d4, out);
  } else {
    alignas(16) float lanes[4];
    hn::Store(scaled, d4, lanes);
    for (size_t i = 0; i < count; ++i) out[i] = lanes[i];
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
