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
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "hwy/highway.h"
#include "kernels/fast_exp-inl.h"
#include "kernels/tails-inl.h"
#include "kernels/masked_softmax.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Elements before the first vector-aligned address at or after p, up to n.
// Loads and stores that straddle two cache lines cost two accesses, and rows
// seldom start on a 32- or 64-byte boundary (a malloc'd array is 16 bytes
// past a line). Where alignment cannot change a result (the max pass, fills
// and the streamer's stores) a pass does this many elements alone first,
// then whole aligned vectors; the exp pass cannot (see ExpAndSum). What it
// gained is in bench/RESULTS.md, "Softmax rows off a cache line".
template <class D>
HWY_INLINE size_t UnalignedHead(D d, const float* p, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const size_t offset = reinterpret_cast<uintptr_t>(p) / sizeof(float) % lanes;
  return std::min(n, offset == 0 ? 0 : lanes - offset);
}

// Max of x[0, n), n >= 1. With kProbe, also reports whether any element is
// Inf or NaN: x * 0 is 0 for every finite x and NaN otherwise, so one
// multiply-add per element tells, where Max alone would hide a NaN (x86 max
// returns an operand). Without it, all_finite is left true, for callers
// whose exps and sums carry a NaN through (kExpKeepsNaN), which then tell.
// Four accumulators each: one chain would stall on Max/FMA latency and halve
// the throughput of a 512-key row (236 -> 125 ns measured).
template <bool kProbe, class D>
HWY_INLINE float RowMax(D d, const float* HWY_RESTRICT x, size_t n, bool* all_finite) {
  const size_t lanes = hn::Lanes(d);
  const auto zero = hn::Zero(d);
  const auto lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto max0 = lowest, max1 = lowest, max2 = lowest, max3 = lowest;
  auto probe0 = zero, probe1 = zero, probe2 = zero, probe3 = zero;
  const auto take = [zero](hn::Vec<D> v, hn::Vec<D>& max, hn::Vec<D>& probe) {
    max = hn::Max(max, v);
    if constexpr (kProbe) probe = hn::MulAdd(v, zero, probe);
  };
  size_t j = UnalignedHead(d, x, n);
  // Padding with x[0] leaves both the max and the finiteness verdict as they are.
  if (j > 0) take(LoadTail(d, x, j, x[0]), max2, probe2);
  for (; j + 4 * lanes <= n; j += 4 * lanes) {
    take(hn::Load(d, x + j), max0, probe0);
    take(hn::Load(d, x + j + lanes), max1, probe1);
    take(hn::Load(d, x + j + 2 * lanes), max2, probe2);
    take(hn::Load(d, x + j + 3 * lanes), max3, probe3);
  }
  for (; j + lanes <= n; j += lanes) take(hn::Load(d, x + j), max0, probe0);
  if (j < n) take(LoadTail(d, x + j, n - j, x[0]), max1, probe1);
  *all_finite = true;
  if constexpr (kProbe) {
    const auto probe = hn::Add(hn::Add(probe0, probe1), hn::Add(probe2, probe3));
    *all_finite = hn::AllFalse(d, hn::IsNaN(probe));
  }
  const auto max = hn::Max(hn::Max(max0, max1), hn::Max(max2, max3));
  return hn::GetLane(hn::MaxOfLanes(d, max));
}

// Masked stores are kept off the ends of rows. A load that overlaps a
// masked store's vector, masked-off lanes included, cannot take its data
// from the store and waits until the store has left the core. So the masked
// store of one row's last partial vector held up the next row's first
// loads, and the exp pass's masked store of its last exps the scale pass's
// load of them: rows could not overlap. (Storing only the scale pass's last
// partial vector with scalar stores instead took rows of 23-124 keys from
// 73 to 55 ns.) Where a row is at least a vector long, its last partial
// vector goes out as the window of its last `lanes` floats instead, a plain
// store that overlaps the vector before it with the same values; zeros
// likewise. (SSE4 and below have no masked stores: their StoreTail writes
// lane by lane through a buffer, and a window replaces those stores by one.)

// The window of a row's last Lanes(d) floats, where the row ends with
// `tail` (1 <= tail < lanes) lanes of `last` after the vector `before`:
// before's lanes [tail, lanes), then last's lanes [0, tail). Both rotated by
// tail lanes, then blended.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V WindowEndingIn(D d, V before, V last, size_t tail) {
  const hn::RebindToSigned<D> di;
  const auto rotate = hn::IndicesFromVec(
      d, hn::And(hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(tail))),
                 hn::Set(di, static_cast<int32_t>(hn::Lanes(d) - 1))));
  return hn::IfThenElse(hn::FirstN(d, hn::Lanes(d) - tail), hn::TableLookupLanes(before, rotate),
                        hn::TableLookupLanes(last, rotate));
}

// e[j] = exp(x[j] - shift) for j < n; returns their sum. e may equal x (in
// place), so neither pointer is restrict. Four sums, as above, and with
// kProbe, RowMax's finiteness probe into all_finite (one chain: fast enough
// beside the exps). between() runs once per four vectors; the streaming
// path stores an earlier row's output there (see RowStreamer).
// Unlike RowMax, unaligned loads: each element's place in the sums must not
// depend on where the row starts, or results would change with alignment.
// Where n > lanes, the last partial vector of exps goes out as a window when
// they are read back at once (`read_soon`); the streamer reads them a row
// later, when a masked store has long left the core.
template <bool kProbe = false, class D, class Between>
HWY_INLINE float ExpAndSum(D d, const float* x, size_t n, float shift, float* e, bool read_soon,
                           Between between, bool* all_finite = nullptr) {
  const size_t lanes = hn::Lanes(d);
  const auto vshift = hn::Set(d, shift);
  auto sum0 = hn::Zero(d), sum1 = hn::Zero(d), sum2 = hn::Zero(d), sum3 = hn::Zero(d);
  auto probe = hn::Zero(d);
  const auto exp_of = [&](hn::Vec<D> v) {
    if constexpr (kProbe) probe = hn::MulAdd(v, hn::Zero(d), probe);  // see RowMax
    return ExpOfDifference(d, v, vshift);
  };
  size_t j = 0;
  for (; j + 4 * lanes <= n; j += 4 * lanes) {
    const auto e0 = exp_of(hn::LoadU(d, x + j));
    const auto e1 = exp_of(hn::LoadU(d, x + j + lanes));
    const auto e2 = exp_of(hn::LoadU(d, x + j + 2 * lanes));
    const auto e3 = exp_of(hn::LoadU(d, x + j + 3 * lanes));
    hn::StoreU(e0, d, e + j);
    hn::StoreU(e1, d, e + j + lanes);
    hn::StoreU(e2, d, e + j + 2 * lanes);
    hn::StoreU(e3, d, e + j + 3 * lanes);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
    sum2 = hn::Add(sum2, e2);
    sum3 = hn::Add(sum3, e3);
    between();
  }
  for (; j + lanes <= n; j += lanes) {
    const auto exps = exp_of(hn::LoadU(d, x + j));
    sum0 = hn::Add(sum0, exps);
    hn::StoreU(exps, d, e + j);
  }
  if (j < n) {
    const auto exps = exp_of(LoadTail(d, x + j, n - j, shift));
    sum1 = hn::Add(sum1, hn::IfThenElseZero(hn::FirstN(d, n - j), exps));
    if (read_soon && j > 0) {  // the window, after the last whole vector
      hn::StoreU(WindowEndingIn(d, hn::LoadU(d, e + j - lanes), exps, n - j), d, e + n - lanes);
    } else {
      StoreTail(d, exps, n - j, e + j);
    }
  }
  if constexpr (kProbe) *all_finite = hn::AllFalse(d, hn::IsNaN(probe));
  const auto sum = hn::Add(hn::Add(sum0, sum1), hn::Add(sum2, sum3));
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// e[0, count)·scale in the first lanes, zeros in the others; count < Lanes(d).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ScaledTail(D d, const float* e, size_t count, V scale) {
  return hn::Mul(LoadTail(d, e, count, 0.0f), scale);
}

// y[j] = e[j] * scale for j < n (e may equal y). Where n > lanes, the
// last partial vector as a window (see WindowEndingIn), read before the
// loop overwrites its first lanes in place.
template <class D>
HWY_INLINE void Scale(D d, const float* e, size_t n, float scale, float* y) {
  const size_t lanes = hn::Lanes(d);
  const auto vscale = hn::Set(d, scale);
  const bool window = n > lanes && n % lanes != 0;
  const auto last = window ? hn::Mul(hn::LoadU(d, e + n - lanes), vscale) : vscale;
  size_t j = 0;
  for (; j + lanes <= n; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, e + j), vscale), d, y + j);
  if (window) {
    hn::StoreU(last, d, y + n - lanes);
  } else if (j < n) {
    StoreTail(d, ScaledTail(d, e + j, n - j, vscale), n - j, y + j);
  }
}

// Writes value to y[0, n). Up to the first vector boundary alone, then
// aligned vectors: a masked row's zeros start anywhere, and a store that
// straddles two cache lines costs two (rows of L = 1 took 75 ns against
// 55 ns for L = 16).
template <class D>
HWY_INLINE void Fill(D d, float value, float* HWY_RESTRICT y, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const auto v = hn::Set(d, value);
  size_t j = UnalignedHead(d, y, n);
  if (j > 0) StoreTail(d, v, j, y);
  for (; j + lanes <= n; j += lanes) hn::Store(v, d, y + j);
  if (j < n) StoreTail(d, v, n - j, y + j);
}

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
// went from 72-80 to 34-38 ns a row (a loop over the kernel outside the
// engine); see bench/RESULTS.md, "Short softmax rows", for the op.
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

// Stores e[0, valid)·scale, then zeros up to width, into y with non-temporal
// stores: y is not read again soon, so it should not evict the caller's data,
// and streaming skips the read-for-ownership of each line. The stores go out
// a few vectors at a time, in between the next row's arithmetic: issued as
// one run, they stall the core on the memory's write speed, and the
// arithmetic cannot start until they drain.
//
// Non-temporal stores need aligned addresses, and rows seldom start on one
// (a malloc'd array is 16 bytes past a line, where no 32- or 64-byte vector
// starts), so a row's tail and the next row's head share a vector. Stored
// plainly, that line is first read from memory, and the core waits for it:
// on (64, 128, 512) 16 bytes off a line, 1.94 ms against 1.20 aligned. So
// where the next row starts right after a row, as rows of one array do, the
// two go out together as one aligned vector, put together in registers
// (through memory, the load could not be forwarded from the two stores and
// waited for every store queued before them: 10% of the op's samples).
template <class D>
class RowStreamer {
 public:
  bool idle() const { return e_ == nullptr; }

  // Finishes the row streaming now, if any, and starts this one.
  void Next(D d, const float* HWY_RESTRICT e, float scale, size_t valid, size_t width,
            float* HWY_RESTRICT y) {
    const size_t lanes = hn::Lanes(d);
    const size_t head = UnalignedHead(d, y, width);
    size_t tail = 0;  // the previous row's last floats, after its whole vectors
    if (!idle()) {
      Store(d, width_);
      tail = width_ - next_;
    }
    if (tail > 0 && head + tail == lanes && y_ + width_ == y) {
      const hn::RebindToSigned<D> di;
      // Lane k gets the head's lane k - tail (mod lanes; the others are the tail's).
      const auto from = hn::And(hn::Sub(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(tail))),
                                hn::Set(di, static_cast<int32_t>(lanes - 1)));
      const auto head_values = ScaledTail(d, e, std::min(head, valid), hn::Set(d, scale));
      hn::Stream(hn::IfThenElse(hn::FirstN(d, tail), TailValues(d),
                                hn::TableLookupLanes(head_values, hn::IndicesFromVec(d, from))),
                 d, y_ + next_);
    } else {
      if (tail > 0) StoreTail(d, TailValues(d), tail, y_ + next_);
      const size_t values = std::min(head, valid);  // fewer than a vector
      if (values > 0) StoreTail(d, ScaledTail(d, e, values, hn::Set(d, scale)), values, y);
      if (head > valid) Fill(d, 0.0f, y + valid, head - valid);
    }
    e_ = e;
    scale_ = scale;
    valid_ = valid;
    width_ = width;
    y_ = y;
    next_ = head;
  }

  // Streams up to `vectors` more whole vectors: scaled exps, the one that
  // straddles the valid length, zeros, each in a loop of its own. The row's
  // fields are copied to locals first: stores through float pointers could
  // alias scale_, and the old single loop reloaded it after every store and
  // tested three conditions per vector. On (64, 128, 512) this took the op
  // from 0.589 to 0.671 of memcpy's speed (medians of 16 alternated runs).
  HWY_INLINE void Store(D d, size_t vectors) {
    const size_t lanes = hn::Lanes(d);
    const size_t valid = valid_, width = width_;
    const float* HWY_RESTRICT e = e_;
    float* HWY_RESTRICT y = y_;
    const auto scale = hn::Set(d, scale_);
    size_t next = next_;
    for (; vectors > 0 && next + lanes <= valid; --vectors, next += lanes) {
      hn::Stream(hn::Mul(hn::LoadU(d, e + next), scale), d, y + next);
    }
    if (vectors > 0 && next < valid && next + lanes <= width) {
      hn::Stream(ScaledTail(d, e + next, valid - next, scale), d, y + next);
      --vectors;
      next += lanes;
    }
    for (; vectors > 0 && next + lanes <= width; --vectors, next += lanes) {
      hn::Stream(hn::Zero(d), d, y + next);
    }
    next_ = next;
  }

  // Streams the rest of the row, its tail stored plainly; afterwards the
  // streamer is idle.
  void Finish(D d) {
    if (idle()) return;
    Store(d, width_);
    if (next_ < width_) StoreTail(d, TailValues(d), width_ - next_, y_ + next_);
    e_ = nullptr;
  }

 private:
  // The row's last, partial vector, from next_ on (fewer than Lanes(d) left).
  hn::Vec<D> TailValues(D d) const {
    return next_ < valid_ ? ScaledTail(d, e_ + next_, valid_ - next_, hn::Set(d, scale_))
                          : hn::Zero(d);
  }

  const float* e_ = nullptr;
  float scale_ = 0.0f;
  size_t valid_ = 0, width_ = 0, next_ = 0;
  float* y_ = nullptr;
};

// Whether a row whose max pass gave (max, all_finite) holds a NaN, a +Inf,
// or only -Inf: then every weight is NaN, as in the reference. Where the
// max pass does not probe (kExpKeepsNaN), its sum of exps tells instead:
// x - max is NaN for a NaN, for +Inf (max is +Inf too, unless a NaN made
// Max drop it, and that NaN's own lane is NaN) and for all -Inf.
constexpr bool kProbeInMaxPass = !kExpKeepsNaN;
HWY_INLINE bool IsNanSum(float sum) { return !std::isfinite(sum); }
HWY_INLINE bool IsNanRow(const float* x, size_t valid, float max, bool all_finite) {
  bool nan_row = !all_finite && !std::isfinite(max);  // +Inf, or all -Inf
  for (size_t j = 0; !all_finite && !nan_row && j < valid; ++j) {
    nan_row = std::isnan(x[j]);  // Max may have hidden it
  }
  return nan_row;
}

// The weights of a row that has no softmax to take: 1/width everywhere for
// valid = 0 (the reference's -1e6 mask), NaN for a NaN row.
template <class D>
HWY_INLINE void FillSpecialRow(D d, size_t valid, size_t width, float* y) {
  Fill(d, valid == 0 ? 1.0f / static_cast<float>(width) : std::numeric_limits<float>::quiet_NaN(),
       y, width);
}

// e[j] = exp(x[j] - max) for j < n (n >= 1), max the row's; returns their
// sum, or NaN for a NaN row (whose weights FillSpecialRow gives).
template <class D>
HWY_INLINE float MaxShiftedExpsAndSum(D d, const float* x, size_t n, float* e, bool read_soon) {
  bool all_finite;
  const float max = RowMax<kProbeInMaxPass>(d, x, n, &all_finite);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (IsNanRow(x, n, max, all_finite)) return nan;
  const float sum = ExpAndSum(d, x, n, max, e, read_soon, [] {});
  return IsNanSum(sum) ? nan : sum;
}

// Softmax of x[0, valid) (see masked_softmax.h for the contract). Three
// passes over an L1-resident row: max, exp and sum (storing the exps in y),
// then scale by 1/sum in place. Rows are short (<= a few thousand floats),
// so the later passes read y back from L1, not from memory.
template <class D>
HWY_INLINE void SoftmaxRow(D d, const float* x, size_t valid, size_t width, float* y) {
  HWY_DASSERT(valid <= width && width >= 1);
  if (valid == 0) return FillSpecialRow(d, valid, width, y);
  if (SoftmaxInRegistersIfShort(d, x, valid, width, y)) return;

  const float sum = MaxShiftedExpsAndSum(d, x, valid, y, /*read_soon=*/true);
  if (std::isnan(sum)) return FillSpecialRow(d, valid, width, y);
  Scale(d, y, valid, 1.0f / sum, y);
  if (valid >= width) return;
  if (valid < hn::Lanes(d)) return Fill(d, 0.0f, y + valid, width - valid);
  // The load is forwarded from Scale's last store, to the same address.
  ZerosAfter(d, hn::LoadU(d, y + valid - hn::Lanes(d)), valid, width, y);
}

void MaskedSoftmaxRow(const float* x, size_t valid, size_t width, float* y) {
  const hn::ScalableTag<float> d;
  SoftmaxRow(d, x, valid, width, y);
}

kernels::SoftmaxBlockStats MaskedSoftmaxBlock(const float* x, size_t n, float* y) {
  const hn::ScalableTag<float> d;
  const auto nothing = [] {};
  bool all_finite;
  const float max = RowMax</*kProbe=*/true>(d, x, n, &all_finite);
  if (!all_finite) {
    bool poisoned = max == std::numeric_limits<float>::infinity();
    for (size_t j = 0; !poisoned && j < n; ++j) poisoned = std::isnan(x[j]);
    if (poisoned) return {max, 0.0f, true};
    if (max == -std::numeric_limits<float>::infinity()) {  // only -Inf
      Fill(d, 0.0f, y, n);
      return {max, 0.0f, false};
    }
  }
  const float sum = ExpAndSum(d, x, n, max, y, /*read_soon=*/true, nothing);
  Scale(d, y, n, 1.0f / sum, y);
  return {max, sum, false};
}

// Rows ahead whose valid scores are prefetched into L2. Without it the
// hardware prefetcher alone, which does not know where a row's valid part
// ends, leaves the loads waiting (reading the valid parts with a copy's
// stores took 1.2-1.9 ms on (64, 128, 512), with rows prefetched 0.5-0.7).
// Prefetching whole rows instead, as this did before, cost more than it
// saved once the stores stopped stalling: on an Intel Xeon the op reached
// 0.64 of memcpy's speed with whole rows, 0.68 with valid parts only
// (medians of 20 runs alternated in one process, the kernel's other changes
// of that commit in both).
constexpr size_t kPrefetchRows = 4;

// Every cache line holding some of row[0, count).
HWY_INLINE void PrefetchScores(const float* row, size_t count) {
  if (count == 0) return;
  constexpr uintptr_t kLine = 64;
  const uintptr_t end = reinterpret_cast<uintptr_t>(row + count);
  // Into L2 (locality 1): copies in L1 crowd out the row buffers (2.5-2.9 ms
  // against 2.9-3.4 ms into L1 on an AMD EPYC, alternated runs in the engine).
  for (uintptr_t line = reinterpret_cast<uintptr_t>(row) & ~(kLine - 1); line < end; line += kLine) {
    __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 1);
  }
}

// Where the streamed rows' exps start from: not the row's max but the max
// of its first vector, known before any pass over the row. Any shift gives
// the same softmax in exact arithmetic; the max is there so that no exp
// overflows and none loses accuracy (exp's error grows with x - shift).
// Every exp is at most their sum, so a sum of at most kMaxShiftedSum bounds
// each x - shift by ln(2^20) = 13.9, within fast_exp-inl.h's bound (1.1e-6
// measured; the weights' tolerance is 1e-5 absolute). A larger sum, a sum
// that is not finite (a NaN or +Inf score on AVX-512, or a shift far below
// the max), or a probe that saw a NaN or an Inf (the other targets, whose
// exp hides a NaN) sends the row through the max pass and the exps against
// the max: MaskedSoftmaxRow's bits. So the max pass, its loop and its
// mispredicted exit are gone from rows whose max is not far above their
// first scores. (On the other targets a row with a -Inf score takes both
// passes too: the probe cannot tell it from +Inf.) On (64, 128, 512) with
// random lengths: see bench/RESULTS.md, "Exps before the max".
constexpr float kMaxShiftedSum = 0x1p20f;

// The streamed rows in a pipeline of three stages, each on a different row:
// row r's shift, row r - 1's exps (its shift taken a stage ago, so the exps
// do not wait for its load and reduction), and the stores of row r - 2 (its
// sum known a stage ago), spread over the exps. So no row's stores wait on
// its sum. (With a max pass as the first stage, against one row at a time:
// 878 -> 810 us.)
//
// What a row carries from its first stage to its exps.
struct RowShift {
  float shift;
  bool empty;  // valid = 0: no exps, FillSpecialRow instead
};

template <class D>
HWY_INLINE RowShift FirstVectorMax(D d, const kernels::StreamedRow& row) {
  if (row.valid == 0) return {0.0f, true};
  const auto first = row.valid >= hn::Lanes(d) ? hn::LoadU(d, row.x)
                                                : LoadTail(d, row.x, row.valid, row.x[0]);
  return {hn::GetLane(hn::MaxOfLanes(d, first)), false};
}

// Row's exps into e, then row starts streaming (the row before it finishes).
template <class D>
HWY_INLINE void ExpPass(D d, const kernels::StreamedRow& row, RowShift first, size_t width,
                        float* e, RowStreamer<D>& streamer) {
  float sum = std::numeric_limits<float>::quiet_NaN();
  if (!first.empty) {
    // Six stores of the row streaming per four exps (about 40 instructions;
    // four or eight were slower), and the probe where exp hides a NaN
    // (kExpKeepsNaN).
    bool all_finite = true;
    sum = ExpAndSum<!kExpKeepsNaN>(d, row.x, row.valid, first.shift, e, /*read_soon=*/false,
                                   [&] { streamer.Store(d, 6); }, &all_finite);
    if (!(all_finite && sum <= kMaxShiftedSum)) {
      sum = MaxShiftedExpsAndSum(d, row.x, row.valid, e, /*read_soon=*/false);
    }
  }
  if (std::isnan(sum)) {  // valid = 0 too
    streamer.Finish(d);
    return FillSpecialRow(d, row.valid, width, row.y);
  }
  streamer.Next(d, e, 1.0f / sum, row.valid, width, row.y);
}

// Whether no two rows share a vector: each starts on a vector boundary and
// is whole vectors long.
template <class D>
HWY_INLINE bool RowsOnVectors(D d, const kernels::StreamedRow* rows, size_t count, size_t width) {
  bool aligned = width % hn::Lanes(d) == 0;
  for (size_t k = 0; k < count; ++k) aligned &= UnalignedHead(d, rows[k].y, width) == 0;
  return aligned;
}

// sorted[0, count) = rows[0, count) by valid length, shortest first, ties in
// array order; count <= kMaxStreamedRows. The passes' loops run as many
// times as the row is long, and in array order random lengths make each
// loop's exit a mispredicted branch; sorted, a row's loops mostly run as
// often as the row's before. Each key's rank is a count of the smaller ones:
// no branches, where a comparison sort would mispredict as much as it saves.
template <class D>
HWY_INLINE void SortByValidLength(D /*d*/, const kernels::StreamedRow* rows, size_t count,
                                  kernels::StreamedRow* sorted) {
  const hn::Rebind<int32_t, D> di;
  const size_t lanes = hn::Lanes(di);
  // Length, then index, in one key (lengths past 2^24 all tie, in array order).
  HWY_ALIGN int32_t keys[kernels::kMaxStreamedRows + hn::MaxLanes(di)];
  for (size_t k = 0; k < count + lanes; ++k) {
    keys[k] = k < count ? static_cast<int32_t>(std::min<size_t>(rows[k].valid, size_t{1} << 24) *
                                                   kernels::kMaxStreamedRows + k)
                        : std::numeric_limits<int32_t>::max();
  }
  for (size_t k = 0; k < count; ++k) {
    const auto key = hn::Set(di, keys[k]);
    size_t rank = 0;
    for (size_t j = 0; j < count; j += lanes) {
      rank += hn::CountTrue(di, hn::Lt(hn::Load(di, keys + j), key));
    }
    sorted[rank] = rows[k];
  }
}

void MaskedSoftmaxRowsStream(const kernels::StreamedRow* rows, size_t count, size_t width,
                             float* row_buffers) {
  const hn::ScalableTag<float> d;
  // Rows that share no vector can go in any order: by length. Rows that do
  // stay in array order, where each row's tail and the next row's head go
  // out as one vector (see RowStreamer); keeping those vectors for rows in
  // any order cost more than the order saved. On (64, 128, 512) with random
  // lengths, rows on a line: 785 -> 705 us; see bench/RESULTS.md, "Rows by
  // length".
  kernels::StreamedRow sorted[kernels::kMaxStreamedRows];
  if (count <= kernels::kMaxStreamedRows && RowsOnVectors(d, rows, count, width)) {
    SortByValidLength(d, rows, count, sorted);
    rows = sorted;
  }
  RowStreamer<hn::ScalableTag<float>> streamer;
  RowShift previous{};
  for (size_t r = 0; r <= count; ++r) {
    RowShift current{};
    if (r < count) {
      if (r + kPrefetchRows < count) {
        PrefetchScores(rows[r + kPrefetchRows].x, rows[r + kPrefetchRows].valid);
      }
      current = FirstVectorMax(d, rows[r]);
    }
    if (r > 0) {
      // Row r - 1's exps must not overwrite those of row r - 2, still streaming.
      ExpPass(d, rows[r - 1], previous, width, row_buffers + (r % 2) * width, streamer);
    }
    previous = current;
  }
  streamer.Finish(d);
}

const char* MaskedSoftmaxTarget() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_ toggle
