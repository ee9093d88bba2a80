// The masked softmax's passes over one row, per target: the max, the exps
// and their sum, the scaling, the fills; and how a row with a NaN, an Inf
// or no valid score is told apart. Included by masked_softmax-inl.h.
#if defined(ATTNSCORE_KERNELS_MASKED_SOFTMAX_PASSES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_MASKED_SOFTMAX_PASSES_INL_H_
#undef ATTNSCORE_KERNELS_MASKED_SOFTMAX_PASSES_INL_H_
#else
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_PASSES_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"
#include "kernels/fast_exp-inl.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Elements before the first vector-aligned address at or after p, up to n.
// Loads and stores that straddle two cache lines cost two accesses, and rows
// seldom start on a 32- or 64-byte boundary (a malloc'd array is 16 bytes
// past a line). Where alignment cannot change a result (the max pass, fills
// and the streamer's stores) a pass does this many elements alone first,
// then whole aligned vectors; the exp pass cannot (see ExpAndSum).
template <class D>
HWY_INLINE size_t UnalignedHead(D d, const float* p, size_t n) {
  const size_t lanes = hn::Lanes(d);
  const size_t offset = reinterpret_cast<uintptr_t>(p) / sizeof(float) % lanes;
  return std::min(n, offset == 0 ? 0 : lanes - offset);
}

// The largest lane of v, -Inf if every lane is -Inf. Highway's MaxOfLanes
// (1.0.x) reduces from LowestValue<float>() on EMU128, the finite -FLT_MAX,
// not from -Inf, so there a row of only -Inf had a finite max: IsNanRow let
// it through, its exps summed to 0, and 1/0 scaled them to NaN at valid
// positions but 0 at masked ones, where docs/semantics.md 1.4 and 1.5 want
// the whole row NaN (the x86 targets reduce with Max between lanes and give
// -Inf). A true -FLT_MAX stays: some lane then equals it.
template <class D>
HWY_INLINE float MaxLane(D d, hn::Vec<D> v) {
  const float max = hn::GetLane(hn::MaxOfLanes(d, v));
  const float lowest = std::numeric_limits<float>::lowest();
  if (HWY_UNLIKELY(max == lowest) && hn::AllTrue(d, hn::Lt(v, hn::Set(d, lowest)))) {
    return -std::numeric_limits<float>::infinity();
  }
  return max;
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
  return MaxLane(d, hn::Max(hn::Max(max0, max1), hn::Max(max2, max3)));
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

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_PASSES_INL_H_ toggle
