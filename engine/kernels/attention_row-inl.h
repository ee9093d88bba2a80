// Per-target bodies of the attention row kernels (attention_row.h); included
// once per Highway target by attention_row.cc through foreach_target.h.
#if defined(ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#undef ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#else
#define ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/attention_row.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Four keys' dot products with one query, each as a vector of partial sums
// (reduced by the caller): two accumulators per key, over alternate vectors
// of D, the query's vectors loaded once for the four keys.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void DotPartials4(D d, const float* HWY_RESTRICT q, const float* const* HWY_RESTRICT row,
                             size_t depth, V* HWY_RESTRICT sums) {
  const size_t lanes = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  size_t c = 0;
  for (; c + 2 * lanes <= depth; c += 2 * lanes) {
    const V qa = hn::LoadU(d, q + c), qb = hn::LoadU(d, q + c + lanes);
    a0 = hn::MulAdd(qa, hn::LoadU(d, row[0] + c), a0);
    a1 = hn::MulAdd(qa, hn::LoadU(d, row[1] + c), a1);
    a2 = hn::MulAdd(qa, hn::LoadU(d, row[2] + c), a2);
    a3 = hn::MulAdd(qa, hn::LoadU(d, row[3] + c), a3);
    b0 = hn::MulAdd(qb, hn::LoadU(d, row[0] + c + lanes), b0);
    b1 = hn::MulAdd(qb, hn::LoadU(d, row[1] + c + lanes), b1);
    b2 = hn::MulAdd(qb, hn::LoadU(d, row[2] + c + lanes), b2);
    b3 = hn::MulAdd(qb, hn::LoadU(d, row[3] + c + lanes), b3);
  }
  if (c + lanes <= depth) {
    const V qa = hn::LoadU(d, q + c);
    a0 = hn::MulAdd(qa, hn::LoadU(d, row[0] + c), a0);
    a1 = hn::MulAdd(qa, hn::LoadU(d, row[1] + c), a1);
    a2 = hn::MulAdd(qa, hn::LoadU(d, row[2] + c), a2);
    a3 = hn::MulAdd(qa, hn::LoadU(d, row[3] + c), a3);
    c += lanes;
  }
  if (c < depth) {
    const size_t rest = depth - c;
    const V qb = LoadTail(d, q + c, rest, 0.0f);
    b0 = hn::MulAdd(qb, LoadTail(d, row[0] + c, rest, 0.0f), b0);
    b1 = hn::MulAdd(qb, LoadTail(d, row[1] + c, rest, 0.0f), b1);
    b2 = hn::MulAdd(qb, LoadTail(d, row[2] + c, rest, 0.0f), b2);
    b3 = hn::MulAdd(qb, LoadTail(d, row[3] + c, rest, 0.0f), b3);
  }
  sums[0] = hn::Add(a0, b0), sums[1] = hn::Add(a1, b1);
  sums[2] = hn::Add(a2, b2), sums[3] = hn::Add(a3, b3);
}

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

// Rows a kernel asks the caches for ahead of the four it works on: far
// enough to cover memory's latency at the rate the FMAs consume rows.
constexpr size_t kPrefetchKeys = 32;

// Prefetches rows [first, first + 4) below `limit` of `columns` floats each,
// a cache line at a time.
HWY_INLINE void PrefetchRows(const float* HWY_RESTRICT base, size_t first, size_t limit,
                             int64_t row_stride, size_t columns) {
  constexpr size_t kLineFloats = 16;
  for (size_t j = first; j < first + 4 && j < limit; ++j) {
    const float* row = base + static_cast<int64_t>(j) * row_stride;
    for (size_t c = 0; c < columns; c += kLineFloats) hwy::Prefetch(row + c);
  }
}

// Scores of up to kernels::kMaxSharedRows rows over the same keys: row r's
// score j is scale · q[r]·k_j for j < keys[r]. Keys go four at a time, every
// row taking each group of four while its K rows are in L1, so K is read from
// memory once for all rows. A score's arithmetic is that of its own query
// and key alone: a row's last keys short of four are scored with the last
// key standing in for the missing ones, and only their own scores stored.
void ScoreRows(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
               const float* HWY_RESTRICT k, int64_t k_row_stride, const size_t* HWY_RESTRICT keys,
               float scale, float* const* HWY_RESTRICT scores) {
  using D = hn::ScalableTag<float>;
  const D d;
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = keys[r] > longest ? keys[r] : longest;
  hn::Vec<D> sums[4];
  for (size_t j = 0; j < longest; j += 4) {
    // One row's keys are a single stream the hardware prefetcher follows;
    // rows sharing them keep the core busier, and miss more without this.
    if (rows > 1) PrefetchRows(k, j + kPrefetchKeys, longest, k_row_stride, depth);
    for (size_t r = 0; r < rows; ++r) {
      if (j >= keys[r]) continue;
      const size_t count = keys[r] - j < 4 ? keys[r] - j : 4;
      const float* row[4];
      for (size_t i = 0; i < 4; ++i) {
        row[i] = k + static_cast<int64_t>(j + (i < count ? i : count - 1)) * k_row_stride;
      }
      DotPartials4(d, q[r], row, depth, sums);
      StoreSums4(d, sums, scale, count, scores[r] + j);
    }
  }
}

void ScoreRow(const float* HWY_RESTRICT q, size_t depth, const float* HWY_RESTRICT k,
              int64_t k_row_stride, size_t keys, float scale, float* HWY_RESTRICT scores) {
  const float* const query[1] = {q};
  float* const out[1] = {scores};
  ScoreRows(1, query, depth, k, k_row_stride, &keys, scale, out);
}

// The columns a MixColumns call covers at most: four vectors, the most whose
// two accumulators each fit in registers beside the loads.
template <class D>
HWY_INLINE size_t StripColumns(D d) {
  return 4 * hn::Lanes(d);
}

// A row's running sums over one strip of at most four vectors of columns:
// two accumulators per vector, `a` for even keys and `b` for odd ones (the
// last key of an odd count goes to `a`), added only at the end.
template <class D>
struct MixState {
  hn::Vec<D> a[4], b[4];
};

// Adds keys [first, last) of one row's weights times V's rows to `state`,
// over kVectors vectors of columns from column 0 of `v`, the last of them
// `rest` lanes wide when kTail. `first` is even, so key pairs fall where
// they fall over the whole row. With `prefetch_columns` > 0, it asks for
// that many floats of the V rows kPrefetchKeys ahead, below `limit`.
template <size_t kVectors, bool kTail, class D>
HWY_INLINE void MixVectors(D d, const float* HWY_RESTRICT weights, size_t first, size_t last,
                           const float* HWY_RESTRICT v, int64_t v_row_stride, size_t rest,
                           size_t prefetch_columns, size_t limit, MixState<D>& state) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const auto load = [&](const float* row, size_t vec) HWY_ATTR {
    return kTail && vec + 1 == kVectors ? LoadTail(d, row + vec * lanes, rest, 0.0f)
                                        : hn::LoadU(d, row + vec * lanes);
  };
  V a[kVectors], b[kVectors];
  for (size_t vec = 0; vec < kVectors; ++vec) a[vec] = state.a[vec], b[vec] = state.b[vec];
  size_t j = first;
  for (; j + 2 <= last; j += 2) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const float* row1 = row0 + v_row_stride;
    if (prefetch_columns != 0 && (j & 3) == 0) {
      PrefetchRows(v, j + kPrefetchKeys, limit, v_row_stride, prefetch_columns);
    }
    const V w0 = hn::Set(d, weights[j]), w1 = hn::Set(d, weights[j + 1]);
    for (size_t vec = 0; vec < kVectors; ++vec) {
      a[vec] = hn::MulAdd(w0, load(row0, vec), a[vec]);
      b[vec] = hn::MulAdd(w1, load(row1, vec), b[vec]);
    }
  }
  if (j < last) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const V w0 = hn::Set(d, weights[j]);
    for (size_t vec = 0; vec < kVectors; ++vec) a[vec] = hn::MulAdd(w0, load(row0, vec), a[vec]);
  }
  for (size_t vec = 0; vec < kVectors; ++vec) state.a[vec] = a[vec], state.b[vec] = b[vec];
}

// MixVectors over a strip of `columns` <= StripColumns, its shape chosen
// once here rather than tested in the loop.
template <class D>
HWY_INLINE void MixColumns(D d, const float* HWY_RESTRICT weights, size_t first, size_t last,
                           const float* HWY_RESTRICT v, int64_t v_row_stride, size_t columns,
                           size_t prefetch_columns, size_t limit, MixState<D>& state) {
  const size_t lanes = hn::Lanes(d);
  const size_t rest = columns % lanes;
  const size_t vectors = columns / lanes + (rest ? 1 : 0);
#define ATTNSCORE_MIX(n, tail)                                                                 \
  return MixVectors<n, tail>(d, weights, first, last, v, v_row_stride, rest, prefetch_columns, \
                             limit, state)
  if (rest == 0) {
    if (vectors == 4) ATTNSCORE_MIX(4, false);
    if (vectors == 3) ATTNSCORE_MIX(3, false);
    if (vectors == 2) ATTNSCORE_MIX(2, false);
    ATTNSCORE_MIX(1, false);
  }
  if (vectors == 4) ATTNSCORE_MIX(4, true);
  if (vectors == 3) ATTNSCORE_MIX(3, true);
  if (vectors == 2) ATTNSCORE_MIX(2, true);
  ATTNSCORE_MIX(1, true);
#undef ATTNSCORE_MIX
}

// Stores a + b of a strip's state: its `columns` output floats.
template <class D>
HWY_INLINE void StoreMix(D d, const MixState<D>& state, size_t columns, float* HWY_RESTRICT out) {
  const size_t lanes = hn::Lanes(d);
  for (size_t vec = 0; vec * lanes < columns; ++vec) {
    const auto sum = hn::Add(state.a[vec], state.b[vec]);
    if ((vec + 1) * lanes <= columns) {
      hn::StoreU(sum, d, out + vec * lanes);
    } else {
      StoreTail(d, sum, columns - vec * lanes, out + vec * lanes);
    }
  }
}

// Keys per pass of MixRows: each row takes this many V rows of a strip while
// they are in L1 (64 rows of a four-vector strip: 8 KiB at AVX2, 16 KiB at
// AVX-512). Even, so a pass never splits a pair of keys.
constexpr size_t kMixPassKeys = 64;

// out[r][c] = Σ_{j < keys[r]} weights[r][j] · v_j[c] for up to
// kMaxSharedRows rows over the same values, strip by strip of columns; each
// pass of kMixPassKeys keys serves every row while its V rows are in L1, so
// V is read from memory once for all rows. A row's sums do not depend on
// the rows beside it: each is MixColumns' order over all its keys.
void MixRows(size_t rows, const float* const* HWY_RESTRICT weights, const size_t* HWY_RESTRICT keys,
             const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
             float* const* HWY_RESTRICT out) {
  using D = hn::ScalableTag<float>;
  const D d;
  const size_t strip = StripColumns(d);
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = keys[r] > longest ? keys[r] : longest;
  const size_t pass = rows == 1 ? longest : kMixPassKeys;
  MixState<D> states[kernels::kMaxSharedRows];
  for (size_t c = 0; c < value_dim; c += strip) {
    const size_t columns = value_dim - c < strip ? value_dim - c : strip;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t vec = 0; vec < 4; ++vec) states[r].a[vec] = states[r].b[vec] = hn::Zero(d);
    }
    for (size_t first = 0; first < longest; first += pass) {
      // With rows sharing V, the first row of the first strip asks for the
      // rows ahead, whole: the other rows and strips find them in cache.
      size_t prefetch_columns = c == 0 && rows > 1 ? value_dim : 0;
      for (size_t r = 0; r < rows; ++r) {
        if (first >= keys[r]) continue;
        const size_t last = keys[r] - first < pass ? keys[r] : first + pass;
        MixColumns(d, weights[r], first, last, v + c, v_row_stride, columns, prefetch_columns,
                   longest, states[r]);
        prefetch_columns = 0;
      }
    }
    for (size_t r = 0; r < rows; ++r) StoreMix(d, states[r], columns, out[r] + c);
  }
}

void MixRow(const float* HWY_RESTRICT weights, size_t keys, const float* HWY_RESTRICT v,
            int64_t v_row_stride, size_t value_dim, float* HWY_RESTRICT out) {
  const float* const row[1] = {weights};
  float* const mixed[1] = {out};
  MixRows(1, row, &keys, v, v_row_stride, value_dim, mixed);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_ toggle
