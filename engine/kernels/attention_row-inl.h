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

#include "hwy/highway.h"
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
    sum1 = hn::MulAdd(LoadTail(d, q + c, depth - c, 0.0f), LoadTail(d, row + c, depth - c, 0.0f), sum1);
  }
  return hn::Add(sum0, sum1);
}

void ScoreRow(const float* HWY_RESTRICT q, size_t depth, const float* HWY_RESTRICT k,
              int64_t k_row_stride, size_t keys, float scale, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  // Four keys at a time: their dot products are independent, so the loads
  // and FMAs of one overlap the horizontal sums of the others.
  size_t j = 0;
  for (; j + 4 <= keys; j += 4) {
    const float* row = k + static_cast<int64_t>(j) * k_row_stride;
    const auto s0 = DotPartials(d, q, row, depth);
    const auto s1 = DotPartials(d, q, row + k_row_stride, depth);
    const auto s2 = DotPartials(d, q, row + 2 * k_row_stride, depth);
    const auto s3 = DotPartials(d, q, row + 3 * k_row_stride, depth);
    scores[j] = scale * hn::GetLane(hn::SumOfLanes(d, s0));
    scores[j + 1] = scale * hn::GetLane(hn::SumOfLanes(d, s1));
    scores[j + 2] = scale * hn::GetLane(hn::SumOfLanes(d, s2));
    scores[j + 3] = scale * hn::GetLane(hn::SumOfLanes(d, s3));
  }
  for (; j < keys; ++j) {
    const auto s = DotPartials(d, q, k + static_cast<int64_t>(j) * k_row_stride, depth);
    scores[j] = scale * hn::GetLane(hn::SumOfLanes(d, s));
  }
}

// out[c0, c0 + columns) for columns <= 4 · Lanes: up to four accumulators,
// each fed by every key, with two keys in flight to halve the FMA chains.
template <class D>
HWY_INLINE void MixColumns(D d, const float* HWY_RESTRICT weights, size_t keys,
                           const float* HWY_RESTRICT v, int64_t v_row_stride, size_t columns,
                           float* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const size_t whole = columns / lanes;  // full vectors, at most 4
  const size_t rest = columns % lanes;
  auto load = [&](const float* row, size_t vec) {
    return vec < whole ? hn::LoadU(d, row + vec * lanes) : LoadTail(d, row + vec * lanes, rest, 0.0f);
  };
  const size_t vectors = whole + (rest ? 1 : 0);
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  size_t j = 0;
  for (; j + 2 <= keys; j += 2) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const float* row1 = row0 + v_row_stride;
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
  if (j < keys) {
    const float* row0 = v + static_cast<int64_t>(j) * v_row_stride;
    const V w0 = hn::Set(d, weights[j]);
    a0 = hn::MulAdd(w0, load(row0, 0), a0);
    if (vectors > 1) a1 = hn::MulAdd(w0, load(row0, 1), a1);
    if (vectors > 2) a2 = hn::MulAdd(w0, load(row0, 2), a2);
    if (vectors > 3) a3 = hn::MulAdd(w0, load(row0, 3), a3);
  }
  const V sums[4] = {hn::Add(a0, b0), hn::Add(a1, b1), hn::Add(a2, b2), hn::Add(a3, b3)};
  for (size_t vec = 0; vec < vectors; ++vec) {
    if (vec < whole) {
      hn::StoreU(sums[vec], d, out + vec * lanes);
    } else {
      StoreTail(d, sums[vec], rest, out + vec * lanes);
    }
  }
}

void MixRow(const float* HWY_RESTRICT weights, size_t keys, const float* HWY_RESTRICT v,
            int64_t v_row_stride, size_t value_dim, float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t block = 4 * hn::Lanes(d);
  for (size_t c = 0; c < value_dim; c += block) {
    const size_t columns = value_dim - c < block ? value_dim - c : block;
    MixColumns(d, weights, keys, v + c, v_row_stride, columns, out + c);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_ toggle
