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

// Σ_d q[d]·row[d] as a vector of partial sums (reduced by the caller).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V DotPartials(D d, const float* HWY_RESTRICT q, const float* HWY_RESTRICT row,
                         size_t depth) {
  const size_t lanes = hn::Lanes(d);
  V sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  size_t c = 0;
  for (; c + 2 * lanes <= depth; c += 2 * lanes) {
    sum0 = hn::MulAdd(hn::LoadU(d, q + c), hn::LoadU(d, row + c), sum0);
    sum1 = hn::MulAdd(hn::LoadU(d, q + c + lanes), hn::LoadU(d, row + c + lanes), sum1);
  }
  for (; c + lanes <= depth; c += lanes) {
    sum0 = hn::MulAdd(hn::LoadU(d, q + c), hn::LoadU(d, row + c), sum0);
  }
  if (c < depth) {
    sum1 = hn::MulAdd(LoadTail(d, q + c, depth - c, 0.0f), LoadTail(d, row + c, depth - c, 0.0f),
                      sum1);
  }
  return hn::Add(sum0, sum1);
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

// Scores of up to kernels::kMaxSharedRows rows over the same keys: row r's score j is
// scale · q[r]·k_j for j < keys[r]. Keys go four at a time, every row taking
// each group of four while its K rows are in L1, so K is read from memory
// once for all rows. A score is summed the same way whatever the rows beside
// it: two partial sums over alternate vectors of D, then across lanes.
void ScoreRows(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
               const float* HWY_RESTRICT k, int64_t k_row_stride, const size_t* HWY_RESTRICT keys,
               float scale, float* const* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = keys[r] > longest ? keys[r] : longest;
  // Four keys at a time: their dot products are independent, so the loads
  // and FMAs of one overlap the horizontal sums of the others.
  for (size_t j = 0; j < longest; j += 4) {
    const float* row = k + static_cast<int64_t>(j) * k_row_stride;
    PrefetchRows(k, j + kPrefetchKeys, longest, k_row_stride, depth);
    for (size_t r = 0; r < rows; ++r) {
      float* out = scores[r];
      if (j + 4 <= keys[r]) {
        const auto s0 = DotPartials(d, q[r], row, depth);
        const auto s1 = DotPartials(d, q[r], row + k_row_stride, depth);
        const auto s2 = DotPartials(d, q[r], row + 2 * k_row_stride, depth);
        const auto s3 = DotPartials(d, q[r], row + 3 * k_row_stride, depth);
        out[j] = scale * hn::GetLane(hn::SumOfLanes(d, s0));
        out[j + 1] = scale * hn::GetLane(hn::SumOfLanes(d, s1));
        out[j + 2] = scale * hn::GetLane(hn::SumOfLanes(d, s2));
        out[j + 3] = scale * hn::GetLane(hn::SumOfLanes(d, s3));
        continue;
      }
      for (size_t i = j; i < keys[r]; ++i) {
        const auto s = DotPartials(d, q[r], k + static_cast<int64_t>(i) * k_row_stride, depth);
        out[i] = scale * hn::GetLane(hn::SumOfLanes(d, s));
      }
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

// Adds keys [first, last) of one row's weights times V's rows (the strip
// starting at column 0 of `v`, `columns` <= StripColumns wide) to `state`.
// `first` is even, so key pairs fall where they fall over the whole row.
// With `prefetch_columns` > 0, it asks for that many floats of the V rows
// kPrefetchKeys ahead, below `limit`.
template <class D>
HWY_INLINE void MixColumns(D d, const float* HWY_RESTRICT weights, size_t first, size_t last,
                           const float* HWY_RESTRICT v, int64_t v_row_stride, size_t columns,
                           size_t prefetch_columns, size_t limit, MixState<D>& state) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const size_t whole = columns / lanes;  // full vectors, at most 4
  const size_t rest = columns % lanes;
  auto load = [&](const float* row, size_t vec) {
    return vec < whole ? hn::LoadU(d, row + vec * lanes)
                       : LoadTail(d, row + vec * lanes, rest, 0.0f);
  };
  const size_t vectors = whole + (rest ? 1 : 0);
  V a0 = state.a[0], a1 = state.a[1], a2 = state.a[2], a3 = state.a[3];
  V b0 = state.b[0], b1 = state.b[1], b2 = state.b[2], b3 = state.b[3];
  size_t j = first;
  for (; j + 2 <= last; j += 2) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const float* row1 = row0 + v_row_stride;
    if (prefetch_columns != 0 && (j & 3) == 0) {
      PrefetchRows(v, j + kPrefetchKeys, limit, v_row_stride, prefetch_columns);
    }
    const V w0 = hn::Set(d, weights[j]), w1 = hn::Set(d, weights[j + 1]);
    a0 = hn::MulAdd(w0, load(row0, 0), a0);
    b0 = hn::MulAdd(w1, load(row1, 0), b0);
    if (vectors > 1) {
      a1 = hn::MulAdd(w0, load(row0, 1), a1);
      b1 = hn::MulAdd(w1, load(row1, 1), b1);
    }
    if (vectors > 2) {
      a2 = hn::MulAdd(w0, load(row0, 2), a2);
      b2 = hn::MulAdd(w1, load(row1, 2), b2);
    }
    if (vectors > 3) {
      a3 = hn::MulAdd(w0, load(row0, 3), a3);
      b3 = hn::MulAdd(w1, load(row1, 3), b3);
    }
  }
  if (j < last) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const V w0 = hn::Set(d, weights[j]);
    a0 = hn::MulAdd(w0, load(row0, 0), a0);
    if (vectors > 1) a1 = hn::MulAdd(w0, load(row0, 1), a1);
    if (vectors > 2) a2 = hn::MulAdd(w0, load(row0, 2), a2);
    if (vectors > 3) a3 = hn::MulAdd(w0, load(row0, 3), a3);
  }
  state.a[0] = a0, state.a[1] = a1, state.a[2] = a2, state.a[3] = a3;
  state.b[0] = b0, state.b[1] = b1, state.b[2] = b2, state.b[3] = b3;
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
      for (size_t r = 0; r < rows; ++r) {
        if (first >= keys[r]) continue;
        const size_t last = keys[r] - first < pass ? keys[r] : first + pass;
        // The first strip asks for the rows ahead, whole: the others find
        // them in cache.
        MixColumns(d, weights[r], first, last, v + c, v_row_stride, columns, c == 0 ? value_dim : 0,
                   longest, states[r]);
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
