// Per-target bodies of the score kernels that hold K or the query in
// registers at AVX-512 (ScoreRows' fast paths, attention_row-inl.h), and the
// row prefetch and off-line loads they and the mixes share; included once
// per Highway target through attention_row-inl.h.
#if defined(ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#undef ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#else
#define ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

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
// Rows of whole vectors back to back (each row's stride its length) that
// start `off` lanes past a 64-byte line, as a std::vector's or a NumPy
// array's floats do (16 bytes past one): LoadU would read every vector of
// them across two lines. Row() reads a row's vectors instead as the aligned
// vectors they straddle, each one permute of two of them, the same floats.
// It reads up to a vector before and after the row, within the rows beside
// it: callers use it on rows that have a row on each side. Decode (1, 1,
// 1,024), D 64, 16 bytes past a line, on an AMD EPYC Zen 5: 3.57-3.65 µs a
// call against 4.29-4.33 by LoadU (3.10-3.21 on lines), alternated.
template <class D>
class OffLineRows {
 public:
  using V = hn::Vec<D>;
  // Rows from `first` on, `row_floats` apart; off() is 0 (LoadU is as
  // good) where they are on lines, where `row_floats` is not whole vectors
  // or the rows not back to back (`row_stride` != `row_floats`).
  OffLineRows(D d, const float* first, int64_t row_stride, size_t row_floats) {
    const size_t lanes = hn::Lanes(d);
    const auto address = reinterpret_cast<uintptr_t>(first);
    if (row_stride == static_cast<int64_t>(row_floats) && row_floats % lanes == 0 &&
        address % sizeof(float) == 0) {
      off_ = address / sizeof(float) % lanes;
    }
    const hn::RebindToSigned<D> di;
    pick_ = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(off_))).raw;
  }
  size_t off() const { return off_; }
  // Vectors [0, kVectors) of `row` into x.
  template <size_t kVectors>
  HWY_INLINE void Row(D d, const float* HWY_RESTRICT row, V* HWY_RESTRICT x) const {
    const float* line = row - off_;
    V low = hn::Load(d, line);
    HWY_UNROLL(8)
    for (size_t v = 0; v < kVectors; ++v) {
      const V high = hn::Load(d, line + (v + 1) * hn::Lanes(d));
      x[v] = V{_mm512_permutex2var_ps(low.raw, pick_, high.raw)};  // lanes off.. of the pair
      low = high;
    }
  }

 private:
  size_t off_ = 0;
  __m512i pick_;  // off, off + 1, ..., off + 15
};

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
// or odd one as v is even or odd, in order, then the two added. Its row read
// by LoadU, or with `rows` where given.
template <size_t kVectors, class D, class V = hn::Vec<D>>
HWY_INLINE V KeySums(D d, const V* HWY_RESTRICT qv, const float* HWY_RESTRICT row,
                     const OffLineRows<D>* rows = nullptr) {
  V k[kVectors];
  if (rows != nullptr) {
    rows->template Row<kVectors>(d, row, k);
  } else {
    HWY_UNROLL(4)
    for (size_t v = 0; v < kVectors; ++v) k[v] = hn::LoadU(d, row + v * hn::Lanes(d));
  }
  V acc[2] = {hn::Zero(d), hn::Zero(d)};
  HWY_UNROLL(4)
  for (size_t v = 0; v < kVectors; ++v) acc[v % 2] = hn::MulAdd(qv[v], k[v], acc[v % 2]);
  return hn::Add(acc[0], acc[1]);
}

// Sixteen keys' scores for a row alone, from `row` on: all sixteen when
// kWhole, else the first `count` < 16, zeros standing in for the missing
// ones' sums (their scores not stored; a key's sum never mixes with
// another's). Keys [inner_from, inner_to) are read with `rows`, the others
// by LoadU. The keys' sums go through memory, a key at a time, then are
// reduced together (QuadSums, BlockSums16) into one vector of scores.
// Unrolled over the sixteen keys instead, the kernel read K from L2 at about
// 120 GB/s against 160 (an AMD EPYC Zen 5, 1,024 keys of D 64, in one
// process).
template <size_t kVectors, bool kWhole, class D, class V = hn::Vec<D>>
HWY_INLINE void ScoreSixteenKeys(D d, const V* HWY_RESTRICT qv, const float* HWY_RESTRICT row,
                                 int64_t k_row_stride, size_t count, V scaling,
                                 const OffLineRows<D>& rows, size_t inner_from, size_t inner_to,
                                 float* HWY_RESTRICT scores) {
  const size_t lanes = hn::Lanes(d);
  HWY_ALIGN float sums[16 * hn::MaxLanes(d)];  // key i's accumulators from i · lanes
  const size_t present = kWhole ? 16 : count;
  const auto key = [&](size_t i) { return row + static_cast<int64_t>(i) * k_row_stride; };
  size_t i = 0;
  HWY_UNROLL(1)
  for (; i < inner_from; ++i) hn::Store(KeySums<kVectors>(d, qv, key(i)), d, sums + i * lanes);
  HWY_UNROLL(1)
  for (; i < inner_to; ++i) {
    hn::Store(KeySums<kVectors>(d, qv, key(i), &rows), d, sums + i * lanes);
  }
  HWY_UNROLL(1)
  for (; i < present; ++i) hn::Store(KeySums<kVectors>(d, qv, key(i)), d, sums + i * lanes);
  for (; i < 16; ++i) hn::Store(hn::Zero(d), d, sums + i * lanes);
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
  // Keys [1, inner_to) have a row on each side: read with `rows` where they
  // lie off a line (none where they do not).
  const OffLineRows<D> rows(d, k, k_row_stride, kVectors * hn::Lanes(d));
  const size_t inner_to = rows.off() != 0 && keys > 2 ? keys - 1 : 0;
  // The inner keys of the n keys from j, counted from j.
  const auto inner = [&](size_t j, size_t n) {
    const size_t from = j == 0 ? std::min<size_t>(1, n) : 0;
    return std::make_pair(from, std::max(from, std::min(n, inner_to > j ? inner_to - j : 0)));
  };
  size_t j = 0;
  for (; j + 16 <= keys; j += 16) {
    const auto [from, to] = inner(j, 16);
    ScoreSixteenKeys<kVectors, true>(d, qv, k + static_cast<int64_t>(j) * k_row_stride,
                                     k_row_stride, 16, scaling, rows, from, to, scores + j);
  }
  if (j < keys) {
    const auto [from, to] = inner(j, keys - j);
    ScoreSixteenKeys<kVectors, false>(d, qv, k + static_cast<int64_t>(j) * k_row_stride,
                                      k_row_stride, keys - j, scaling, rows, from, to, scores + j);
  }
}
#endif

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_SCORE_ROWS_HELD_INL_H_ toggle
