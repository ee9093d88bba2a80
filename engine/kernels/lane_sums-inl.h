// Lane sums of four accumulators at once, for the row kernels over floats
// (attention_row-inl.h, score_rows_held-inl.h) and over bf16 words
// (attention_row_cached.cc): included once per Highway target.
#if defined(ATTNSCORE_KERNELS_LANE_SUMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#undef ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#else
#define ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
#endif

#include <cstddef>
#include <type_traits>

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

#if HWY_TARGET != HWY_SCALAR
// Four keys' accumulators summed within each 128-bit block: lane i of block
// b holds key i's lanes of block b added as (0 + 2) + (1 + 3), the four keys
// transposed by interleaving so that one add serves all four.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V QuadSums(D d, V s0, V s1, V s2, V s3) {
  const hn::Repartition<double, D> dd;
  const V t01 = hn::Add(hn::InterleaveLower(d, s0, s1), hn::InterleaveUpper(d, s0, s1));
  const V t23 = hn::Add(hn::InterleaveLower(d, s2, s3), hn::InterleaveUpper(d, s2, s3));
  const auto low = hn::InterleaveLower(dd, hn::BitCast(dd, t01), hn::BitCast(dd, t23));
  const auto high = hn::InterleaveUpper(dd, hn::BitCast(dd, t01), hn::BitCast(dd, t23));
  return hn::Add(hn::BitCast(d, low), hn::BitCast(d, high));
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
  const auto blocks = SumBlocks(d, QuadSums(d, sums[0], sums[1], sums[2], sums[3]));
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

#if HWY_TARGET <= HWY_AVX3
// The lane sums of sixteen keys' accumulators, key i's in lane i, each by
// StoreSums4's tree: QuadSums on each four keys, then blocks (0 + 2) +
// (1 + 3), four keys' blocks moved together (quad g holds keys 4g..4g+3).
// So a key's sum has the same bits here as there.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V BlockSums16(D d, V quad0, V quad1, V quad2, V quad3) {
  (void)d;
  // Blocks of a and b picked by imm (_mm512_shuffle_f32x4: two of a, two of b).
  const auto blocks = [](V a, V b, auto imm) HWY_ATTR {
    return V{_mm512_shuffle_f32x4(a.raw, b.raw, decltype(imm)::value)};
  };
  using Low = std::integral_constant<int, _MM_SHUFFLE(1, 0, 1, 0)>;
  using High = std::integral_constant<int, _MM_SHUFFLE(3, 2, 3, 2)>;
  using Even = std::integral_constant<int, _MM_SHUFFLE(2, 0, 2, 0)>;
  using Odd = std::integral_constant<int, _MM_SHUFFLE(3, 1, 3, 1)>;
  // Blocks (0 + 2) and (1 + 3) of quads 0 and 1 (then 2 and 3) side by side.
  const V pair01 = hn::Add(blocks(quad0, quad1, Low()), blocks(quad0, quad1, High()));
  const V pair23 = hn::Add(blocks(quad2, quad3, Low()), blocks(quad2, quad3, High()));
  return hn::Add(blocks(pair01, pair23, Even()), blocks(pair01, pair23, Odd()));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_LANE_SUMS_INL_H_
