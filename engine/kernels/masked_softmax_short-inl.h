// Short masked softmax rows held in registers from their one load to their
// stores, per target. Included by masked_softmax-inl.h.
#if defined(ATTNSCORE_KERNELS_MASKED_SOFTMAX_SHORT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_MASKED_SOFTMAX_SHORT_INL_H_
#undef ATTNSCORE_KERNELS_MASKED_SOFTMAX_SHORT_INL_H_
#else
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_SHORT_INL_H_
#endif

#include <cstddef>
#include <limits>
#include <utility>

#include "hwy/highway.h"
#include "kernels/masked_softmax_passes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Rows whose valid scores fit in this many vectors are held in registers
// from their one load to their stores (see SoftmaxInRegisters).
constexpr size_t kRegisterRowVectors = 8;

// f(std::integral_constant<size_t, i>()) for each i in [0, kCount): loops
// over arrays of vectors with the index a constant, so that the arrays live
// in registers (indexed by a loop variable, they went to the stack).
// The lambdas given to ForEachIndex are always inlined too: at eight vectors
// GCC called some of them, and the arrays went to the stack again.
#ifndef ATTNSCORE_INLINE_LAMBDA
#define ATTNSCORE_INLINE_LAMBDA __attribute__((always_inline))
#endif
template <size_t kCount, class F>
HWY_INLINE void ForEachIndex(F f) {
  [&]<size_t... kIndex>(std::index_sequence<kIndex...>) ATTNSCORE_INLINE_LAMBDA {
    (f(std::integral_constant<size_t, kIndex>()), ...);
  }(std::make_index_sequence<kCount>());
}

// op over v[kBegin, kEnd) as a tree: log2 steps of latency, not a chain.
template <size_t kBegin, size_t kEnd, class V, size_t kN, class Op>
HWY_INLINE V ReduceTree(const V (&v)[kN], Op op) {
  if constexpr (kEnd - kBegin == 1) {
    return v[kBegin];
  } else {
    constexpr size_t kMiddle = (kBegin + kEnd) / 2;
    return op(ReduceTree<kBegin, kMiddle>(v, op), ReduceTree<kMiddle, kEnd>(v, op));
  }
}

// Zeros into y[valid, width) with plain stores only, once y[0, valid) holds
// the values, the last Lanes(d) of them also in `last` (valid >= lanes). A
// run of zeros shorter than a vector goes out as the window ending at width.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void ZerosAfter(D d, V last, size_t valid, size_t width, float* HWY_RESTRICT y) {
  const size_t lanes = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  if (valid >= width) return;
  if (width - valid < lanes) {
    return hn::StoreU(WindowEndingIn(d, last, zero, width - valid), d, y + width - lanes);
  }
  // Unaligned stores at both ends, aligned ones between.
  size_t j = valid + UnalignedHead(d, y + valid, width - valid);
  if (j > valid) hn::StoreU(zero, d, y + valid);
  for (; j + lanes <= width; j += lanes) hn::Store(zero, d, y + j);
  if (j < width) hn::StoreU(zero, d, y + width - lanes);
}

// The softmax of a row whose valid scores are kFull whole vectors and, if
// kTail, a partial one, held in registers: loaded once, no exps stored and
// read back, the max, the finiteness check and the sum reduced as trees,
// and plain stores (see WindowEndingIn) unless the whole row is narrower
// than a vector. Rows this short are bound by latency, not work. The result
// is SoftmaxRow's passes', bit for bit: the same exps, summed in
// ExpAndSum's order.
//
// With the plain stores of the passes too, rows of 23 to 124 valid keys
// lying back to back and done in place, as the dot product's scores are,
// took 34-38 ns a row against 72-80 through the passes (a loop over the
// kernel outside the engine).
//
// Returns false, having written nothing, for a row with an Inf or NaN,
// which SoftmaxRow's passes handle.
template <size_t kFull, bool kTail, class D>
HWY_INLINE bool SoftmaxInRegisters(D d, const float* x, size_t valid, size_t width, float* y) {
  using V = hn::Vec<D>;
  constexpr size_t kVectors = kFull + (kTail ? 1 : 0);
  const size_t lanes = hn::Lanes(d);
  const size_t tail = valid - kFull * lanes;  // valid floats in the partial vector
  const auto zero = hn::Zero(d);
  V v[kVectors], probe[kVectors];
  ForEachIndex<kVectors>([&](auto i) ATTNSCORE_INLINE_LAMBDA {
    if constexpr (i < kFull) {
      v[i] = hn::LoadU(d, x + i * lanes);
    } else {  // padded with x[0]: the max and the finiteness verdict stay as they are
      v[i] = LoadTail(d, x + i * lanes, tail, x[0]);
    }
    probe[i] = hn::Mul(v[i], zero);  // NaN for an Inf or a NaN (see RowMax)
  });
  const auto add = [](V a, V b) { return hn::Add(a, b); };
  const auto max = [](V a, V b) { return hn::Max(a, b); };
  if (!hn::AllFalse(d, hn::IsNaN(ReduceTree<0, kVectors>(probe, add)))) return false;
  const auto vmax = hn::MaxOfLanes(d, ReduceTree<0, kVectors>(v, max));

  V e[kVectors];
  // ExpAndSum's four sums: whole groups of four vectors in turn, the vectors
  // after the last group into the first sum, the partial one into the second.
  V sum[4] = {zero, zero, zero, zero};
  constexpr size_t kGrouped = kFull / 4 * 4;
  ForEachIndex<kVectors>([&](auto i) ATTNSCORE_INLINE_LAMBDA {
    if constexpr (i < kFull) {
      e[i] = ExpOfDifference(d, v[i], vmax);
      constexpr size_t k = i < kGrouped ? i % 4 : 0;
      sum[k] = hn::Add(sum[k], e[i]);
    } else {
      e[i] = hn::IfThenElseZero(hn::FirstN(d, tail), ExpOfDifference(d, v[i], vmax));
      sum[1] = hn::Add(sum[1], e[i]);
    }
  });
  const auto total = hn::Add(hn::Add(sum[0], sum[1]), hn::Add(sum[2], sum[3]));
  const auto scale = hn::Set(d, 1.0f / hn::GetLane(hn::SumOfLanes(d, total)));

  if (width < lanes) {  // a row narrower than a vector: one masked store
    StoreTail(d, hn::Mul(e[0], scale), width, y);  // e[0] is 0 past valid
    return true;
  }
  ForEachIndex<kFull>([&](auto i) ATTNSCORE_INLINE_LAMBDA {
    hn::StoreU(hn::Mul(e[i], scale), d, y + i * lanes);
  });
  // Then the partial vector: whole where the row has room for it (its lanes
  // past the valid length are the zeros due there), else as the window.
  V last = zero;  // y's last Lanes(d) floats stored so far
  size_t stored = valid;
  if constexpr (!kTail) {
    last = hn::Mul(e[kFull - 1], scale);
  } else if (kFull * lanes + lanes <= width) {
    last = hn::Mul(e[kFull], scale);
    hn::StoreU(last, d, y + kFull * lanes);
    stored = kFull * lanes + lanes;
  } else if constexpr (kFull > 0) {  // width >= lanes: there is a whole vector
    last = hn::Mul(WindowEndingIn(d, e[kFull - 1], e[kFull], tail), scale);
    hn::StoreU(last, d, y + valid - lanes);
  }
  ZerosAfter(d, last, stored, width, y);
  return true;
}

// SoftmaxInRegisters for the row's shape, if it has kFull or more whole
// vectors and fits in kRegisterRowVectors; false if not, or if it holds an
// Inf or NaN.
template <size_t kFull = 0, class D>
HWY_INLINE bool SoftmaxInRegistersIfShort(D d, const float* x, size_t valid, size_t width,
                                          float* y) {
  if constexpr (HWY_HAVE_SCALABLE || kFull > kRegisterRowVectors) {
    return false;  // arrays of vectors need a size known at compile time
  } else {
    const size_t lanes = hn::Lanes(d);
    if (valid / lanes != kFull) {
      return SoftmaxInRegistersIfShort<kFull + 1>(d, x, valid, width, y);
    }
    if (valid % lanes == 0) {
      if constexpr (kFull > 0) return SoftmaxInRegisters<kFull, false>(d, x, valid, width, y);
      return false;  // valid = 0: not here
    }
    if constexpr (kFull < kRegisterRowVectors) {
      return SoftmaxInRegisters<kFull, true>(d, x, valid, width, y);
    }
    return false;
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_SHORT_INL_H_ toggle
