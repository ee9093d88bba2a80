// Per-target bodies of the score kernels that hold K or the query in
// registers at AVX-512 (ScoreRows' fast paths, attention_row-inl.h), and the
// row prefetch they and the mixes share; included once per Highway target
// through attention_row-inl.h.
#if defined(ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#undef ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#else
#define ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/lane_sums-inl.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Rows a kernel asks the caches for ahead of the ones it works on: far
// enough to cover memory's latency at the rate the FMAs consume rows.
constexpr size_t kPrefetchKeys = 32;

// Prefetches rows [first, first + count) below `limit` of `columns` floats
// each, a cache line at a time.
HWY_INLINE void PrefetchRows(const float* HWY_RESTRICT base, size_t first, size_t count,
                             size_t limit, int64_t row_stride, size_t columns) {
  constexpr size_t kLineFloats = 16;
  for (size_t j = first; j < first + count && j < limit; ++j) {
    const float* row = base + static_cast<int64_t>(j) * row_stride;
    for (size_t c = 0; c < columns; c += kLineFloats) hwy::Prefetch(row + c);
  }
}

#if HWY_TARGET <= HWY_AVX3
// ScoreRows for rows of kVectors whole vectors (D 64 at AVX-512: 4), with
// the 32 registers to hold four keys' rows at once: they are loaded once
// for all the rows, not once a row, and always asked for ahead. Each row's
// sums are DotPartials4's (vector v into the even or odd accumulator as v
// is even or odd, in order), so the bits are the same. Alternated on an AMD
// EPYC Zen 5: GQA decode from a KvCache (4, Hq 16, Hkv 4, 2,048 keys, D 64)
// 307-320 µs a call against 246-253, where K was read from L1 once a row;
// a row alone too, dot-product decode (8, 1, 1,024), D 64: 34.7-34.9 µs
// against 32.6-32.8, (1, 1, 4,096) 23.4-23.7 against 21.5-22.3.
template <size_t kVectors, class D>
HWY_INLINE void ScoreRowsHeld(D d, size_t rows, const float* const* HWY_RESTRICT q,
                              const float* HWY_RESTRICT k, int64_t k_row_stride,
                              const size_t* HWY_RESTRICT keys, size_t longest, float scale,
                              float* const* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  V sums[4];
  for (size_t j = 0; j < longest; j += 4) {
    PrefetchRows(k, j + kPrefetchKeys, 4, longest, k_row_stride, kVectors * lanes);
    const size_t present = longest - j < 4 ? longest - j : 4;
    V kv[4][kVectors];
    HWY_UNROLL(4)
    for (size_t i = 0; i < 4; ++i) {
      const float* row =
          k + static_cast<int64_t>(j + (i < present ? i : present - 1)) * k_row_stride;
      HWY_UNROLL(4)
      for (size_t v = 0; v < kVectors; ++v) kv[i][v] = hn::LoadU(d, row + v * lanes);
    }
    for (size_t r = 0; r < rows; ++r) {
      if (j >= keys[r]) continue;
      V acc[4][2];
      HWY_UNROLL(4)
      for (size_t i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = hn::Zero(d);
      HWY_UNROLL(4)
      for (size_t v = 0; v < kVectors; ++v) {
        const V qv = hn::LoadU(d, q[r] + v * lanes);
        HWY_UNROLL(4)
        for (size_t i = 0; i < 4; ++i) acc[i][v % 2] = hn::MulAdd(qv, kv[i][v], acc[i][v % 2]);
      }
      HWY_UNROLL(4)
      for (size_t i = 0; i < 4; ++i) sums[i] = hn::Add(acc[i][0], acc[i][1]);
      const size_t count = keys[r] - j < 4 ? keys[r] - j : 4;
      StoreSums4(d, sums, scale, count, scores[r] + j);
    }
  }
}

// One key's accumulators as ScoreRowsHeld sums them: vector v into the even
// or odd one as v is even or odd, in order, then the two added.
template <size_t kVectors, class D, class V = hn::Vec<D>>
HWY_INLINE V KeySums(D d, const V* HWY_RESTRICT qv, const float* HWY_RESTRICT row) {
  V acc[2] = {hn::Zero(d), hn::Zero(d)};
  HWY_UNROLL(4)
  for (size_t v = 0; v < kVectors; ++v) {
    acc[v % 2] = hn::MulAdd(qv[v], hn::LoadU(d, row + v * hn::Lanes(d)), acc[v % 2]);
  }
  return hn::Add(acc[0], acc[1]);
}

// Sixteen keys' scores for a row alone, from `row` on: all sixteen when
// kWhole, else the first `count` < 16, zeros standing in for the missing
// ones' sums (their scores not stored; a key's sum never mixes with
// another's). The keys' sums go through memory, a key at a time, then are
// reduced together (QuadSums, BlockSums16) into one vector of scores.
// Unrolled over the sixteen keys instead, the kernel read K from L2 at about
// 120 GB/s against 160 (an AMD EPYC Zen 5, 1,024 keys of D 64, in one
// process).
template <size_t kVectors, bool kWhole, class D, class V = hn::Vec<D>>
HWY_INLINE void ScoreSixteenKeys(D d, const V* HWY_RESTRICT qv, const float* HWY_RESTRICT row,
                                 int64_t k_row_stride, size_t count, V scaling,
                                 float* HWY_RESTRICT scores) {
  const size_t lanes = hn::Lanes(d);
  HWY_ALIGN float sums[16 * hn::MaxLanes(d)];  // key i's accumulators from i · lanes
  const size_t present = kWhole ? 16 : count;
  HWY_UNROLL(1)
  for (size_t i = 0; i < present; ++i) {
    const float* key = row + static_cast<int64_t>(i) * k_row_stride;
    hn::Store(KeySums<kVectors>(d, qv, key), d, sums + i * lanes);
  }
  for (size_t i = present; i < 16; ++i) hn::Store(hn::Zero(d), d, sums + i * lanes);
  const auto quad = [&](size_t g) HWY_ATTR {  // keys 4g..4g+3
    const float* s = sums + 4 * g * lanes;
    return QuadSums(d, hn::Load(d, s), hn::Load(d, s + lanes), hn::Load(d, s + 2 * lanes),
                    hn::Load(d, s + 3 * lanes));
  };
  const V scaled = hn::Mul(BlockSums16(d, quad(0), quad(1), quad(2), quad(3)), scaling);
  if constexpr (kWhole) {
    hn::StoreU(scaled, d, scores);
  } else {
    StoreTail(d, scaled, count, scores);
  }
}

// ScoreRowsHeld for a row alone (decode): sixteen keys at a time, where four
// at a time spent a reduction's narrowing shuffles and a narrow store on
// every four. A row's K is one stream the hardware prefetcher follows: no
// prefetches. Each key's sums and their tree are ScoreRowsHeld's, so the
// bits are the same. Dot-product decode (1, 1, M), D 64, alternated against
// ScoreRowsHeld on an AMD EPYC Zen 5: 1.21-1.28 µs a call against 1.74-1.81
// at M 256, 4.59-4.85 against 5.44-5.97 at 1,024, 24.6-25.5 against
// 26.9-29.1 at 4,096.
template <size_t kVectors, class D>
HWY_INLINE void ScoreRowAlone(D d, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                              int64_t k_row_stride, size_t keys, float scale,
                              float* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  V qv[kVectors];
  HWY_UNROLL(4)
  for (size_t v = 0; v < kVectors; ++v) qv[v] = hn::LoadU(d, q + v * hn::Lanes(d));
  const V scaling = hn::Set(d, scale);
  size_t j = 0;
  for (; j + 16 <= keys; j += 16) {
    ScoreSixteenKeys<kVectors, true>(d, qv, k + static_cast<int64_t>(j) * k_row_stride,
                                     k_row_stride, 16, scaling, scores + j);
  }
  if (j < keys) {
    ScoreSixteenKeys<kVectors, false>(d, qv, k + static_cast<int64_t>(j) * k_row_stride,
                                      k_row_stride, keys - j, scaling, scores + j);
  }
}
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_ toggle
