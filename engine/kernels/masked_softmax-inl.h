// Per-target body of the masked softmax row kernel; included once per
// Highway target by masked_softmax.cc through foreach_target.h.
#if defined(ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#undef ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#else
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "kernels/fast_exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Calls body(d, offset, vec) for each whole vector of x[0, n), then once for
// the remainder, copied into a vector padded with `pad` so the same math runs
// on it and no byte past x[n - 1] is read. Returns the remainder's size.
template <class D, class Body>
HWY_INLINE size_t ForEachVector(D d, const float* HWY_RESTRICT x, size_t n,
                                float pad, float* HWY_RESTRICT tail, Body body) {
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) body(i, hn::LoadU(d, x + i));
  const size_t rest = n - i;
  if (rest != 0) {
    for (size_t k = 0; k < lanes; ++k) tail[k] = k < rest ? x[i + k] : pad;
    body(i, hn::Load(d, tail));
  }
  return rest;
}

// Max of x[0, n), n >= 1. Also reports whether any element is Inf or NaN:
// x * 0 is 0 for every finite x and NaN otherwise, so one multiply-add per
// element tells, where Max alone would hide a NaN (x86 max returns an operand).
HWY_INLINE float RowMax(const float* HWY_RESTRICT x, size_t n,
                        bool* all_finite) {
  const hn::ScalableTag<float> d;
  HWY_ALIGN float tail[hn::MaxLanes(d)];
  const auto zero = hn::Zero(d);
  auto max = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto probe = zero;
  // Padding with x[0] leaves both the max and the finiteness verdict as they are.
  ForEachVector(d, x, n, x[0], tail, [&](size_t, decltype(zero) v) {
    max = hn::Max(max, v);
    probe = hn::MulAdd(v, zero, probe);
  });
  *all_finite = !std::isnan(hn::GetLane(hn::SumOfLanes(d, probe)));
  return hn::GetLane(hn::MaxOfLanes(d, max));
}

// Writes value to y[0, n).
template <class D>
HWY_INLINE void Fill(D d, float value, float* HWY_RESTRICT y, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const auto v = hn::Set(d, value);
  size_t j = 0;
  for (; j + lanes <= n; j += lanes) hn::StoreU(v, d, y + j);
  for (; j < n; ++j) y[j] = value;
}

// Stores e[0, valid)·scale, then zeros up to width, into y with non-temporal
// stores: y is not read again soon, so it should not evict the caller's data,
// and streaming skips the read-for-ownership of each line.
template <class D>
HWY_INLINE void StreamScaled(D d, const float* HWY_RESTRICT e, float scale,
                             size_t valid, size_t width, float* HWY_RESTRICT y) {
  const size_t lanes = hn::Lanes(d);
  auto value = [&](size_t j) { return j < valid ? e[j] * scale : 0.0f; };
  size_t j = 0;
  // Non-temporal stores need aligned addresses: the head goes one by one.
  for (; j < width && reinterpret_cast<uintptr_t>(y + j) % (lanes * sizeof(float)); ++j) {
    y[j] = value(j);
  }
  HWY_ALIGN float straddle[hn::MaxLanes(d)];
  const auto vscale = hn::Set(d, scale);
  for (; j + lanes <= width; j += lanes) {
    auto v = hn::Zero(d);
    if (j + lanes <= valid) {
      v = hn::Mul(hn::LoadU(d, e + j), vscale);
    } else if (j < valid) {
      for (size_t k = 0; k < lanes; ++k) straddle[k] = value(j + k);
      v = hn::Load(d, straddle);
    }
    hn::Stream(v, d, y + j);
  }
  for (; j < width; ++j) y[j] = value(j);
}

// Softmax of x[0, valid) (see masked_softmax.h for the contract). Three
// passes over an L1-resident row: max, exp and sum (storing the exps in e),
// then scale by 1/sum into y. Rows are short (<= a few thousand floats), so the
// later passes read e back from L1, not from memory. With `stream`, e is a
// separate row buffer and y is written once, by non-temporal stores.
HWY_INLINE void SoftmaxRow(const float* HWY_RESTRICT x, size_t valid,
                           size_t width, float* y, float* e, bool stream) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  if (valid == 0) return Fill(d, 1.0f / static_cast<float>(width), y, width);

  bool all_finite;
  const float max = RowMax(x, valid, &all_finite);
  bool nan_row = !all_finite && !std::isfinite(max);  // +Inf, or all -Inf
  for (size_t j = 0; !all_finite && !nan_row && j < valid; ++j) {
    nan_row = std::isnan(x[j]);  // Max may have hidden it
  }
  if (nan_row) return Fill(d, std::numeric_limits<float>::quiet_NaN(), y, width);

  HWY_ALIGN float tail[hn::MaxLanes(d)];
  const auto vmax = hn::Set(d, max);
  auto sum = hn::Zero(d);
  // The padding is max, whose exp is 1: those lanes stay out of the sum.
  const size_t rest = ForEachVector(
      d, x, valid, max, tail, [&](size_t j, hn::Vec<decltype(d)> v) {
        const auto exps = ExpNonPositive(d, v, vmax);
        if (j + lanes <= valid) {
          sum = hn::Add(sum, exps);
          hn::StoreU(exps, d, e + j);
        } else {
          hn::Store(exps, d, tail);
        }
      });
  float total = hn::GetLane(hn::SumOfLanes(d, sum));
  const size_t whole = valid - rest;
  for (size_t k = 0; k < rest; ++k) {
    total += tail[k];
    e[whole + k] = tail[k];
  }

  const float inv = 1.0f / total;
  if (stream) return StreamScaled(d, e, inv, valid, width, y);
  const auto vinv = hn::Set(d, inv);
  size_t j = 0;
  for (; j + lanes <= valid; j += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(d, e + j), vinv), d, y + j);
  }
  for (; j < valid; ++j) y[j] = e[j] * inv;
  Fill(d, 0.0f, y + valid, width - valid);
}

void MaskedSoftmaxRow(const float* HWY_RESTRICT x, size_t valid, size_t width,
                      float* y) {
  SoftmaxRow(x, valid, width, y, /*e=*/y, /*stream=*/false);
}

void MaskedSoftmaxRowStream(const float* HWY_RESTRICT x, size_t valid,
                            size_t width, float* y, float* row_buffer) {
  SoftmaxRow(x, valid, width, y, row_buffer, /*stream=*/true);
}

const char* MaskedSoftmaxTarget() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_ toggle
