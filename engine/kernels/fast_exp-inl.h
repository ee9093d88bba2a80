// exp(x - shift), vectorised, for a softmax's scores and the shift it takes
// from them; per-target, included from other -inl.h files.
//
// Accuracy (tests/fast_exp_test.cc, every 7th float in [-87.5, 0] and every
// 97th in [0, 14], each target): relative error below 1.6e-6 for
// -20 <= x - shift <= 14 (it grows with |x - shift|, as (x - shift)·log2(e)
// is rounded to float: about 2.3e-7 + 6e-8·|x - shift|), and below 6e-6
// further down, where results are < 2.1e-9 and a softmax weight only sees
// absolute errors under 1e-14. -Inf gives 0, and x - shift above 88.7 (88.4
// off AVX-512) gives +Inf, never a wrapped exponent: a sum of exps that
// comes out Inf tells the streamed softmax its shift was too low. Results below 2^-126
// are 0 or, without flush-to-zero, subnormal; engine calls run with
// flush-to-zero. NaN gives NaN on AVX-512 only (kExpKeepsNaN; the softmax
// kernel screens rows for it).
// Why not Highway's Exp: it covers the whole range (two-step scaling, overflow
// handling) and costs about 1.6x more per vector here.
#if defined(ATTNSCORE_KERNELS_FAST_EXP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_FAST_EXP_INL_H_
#undef ATTNSCORE_KERNELS_FAST_EXP_INL_H_
#else
#define ATTNSCORE_KERNELS_FAST_EXP_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// c[0] + c[1]·f + ... + c[5]·f^5 by Horner's rule.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Degree5(D d, V f, const float (&c)[6]) {
  V p = hn::Set(d, c[5]);
  for (int k = 4; k >= 0; --k) p = hn::MulAdd(p, f, hn::Set(d, c[k]));
  return p;
}

// exp(x - shift) as 2^t with t = (x - shift)·log2(e), split into an integer
// and a fraction whose power of 2 a degree-5 polynomial gives; the split
// differs between AVX-512 and the others.
#if HWY_TARGET <= HWY_AVX3
// AVX-512 splits t = floor(t) + f in one instruction (reduce, which returns
// f = t - floor(t) in [0, 1)) and applies 2^floor(t) in one (scalef, which
// floors its exponent itself, underflows to exact zero and overflows to
// +Inf), so t needs no rounding, no clamp and no n: 9 vector instructions a
// vector instead of 11 with round-to-nearest (a loop of exps: 2.67-2.69 ->
// 2.35-2.39 ns a vector on an AMD EPYC). The polynomial is fitted on [0, 1)
// instead: relative error -6.5e-8 to +9.0e-8 with its float coefficients
// evaluated exactly (the round-to-nearest fit's: -4.9e-8 to +1.55e-7).
constexpr float kExp2OfUnitInterval[6] = {0.9999999403953552f, 0.6931530833244324f,
                                          0.24015361070632935f, 0.05582631751894951f,
                                          0.00898934155702591f, 0.0018775759963318706f};

// imm8 of reduce: no fraction bits kept (bits 7:4 = 0), precision exception
// suppressed (bit 3), round down (bits 1:0 = 01): f = t - floor(t). An
// infinite t gives f = 0, so -Inf scores come out as scalef(p(0), -Inf) = +0.
constexpr int kFractionBelow = 0x09;
HWY_INLINE hn::Vec512<float> FractionOf(hn::Vec512<float> t) {
  return hn::Vec512<float>{_mm512_reduce_ps(t.raw, kFractionBelow)};
}
template <size_t N>
HWY_INLINE hn::Vec128<float, N> FractionOf(hn::Vec128<float, N> t) {
  return hn::Vec128<float, N>{_mm_reduce_ps(t.raw, kFractionBelow)};
}
HWY_INLINE hn::Vec512<float> ScaleByPowerOf2(hn::Vec512<float> p, hn::Vec512<float> t) {
  return hn::Vec512<float>{_mm512_scalef_ps(p.raw, t.raw)};
}
template <size_t N>
HWY_INLINE hn::Vec128<float, N> ScaleByPowerOf2(hn::Vec128<float, N> p, hn::Vec128<float, N> t) {
  return hn::Vec128<float, N>{_mm_scalef_ps(p.raw, t.raw)};
}

// A NaN argument gives NaN here (reduce and scalef pass it on), so a sum of
// exps tells whether a row had one; the clamp below hides it elsewhere.
constexpr bool kExpKeepsNaN = true;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpOfDifference(D d, V x, V shift) {
  const V t = hn::Mul(hn::Sub(x, shift), hn::Set(d, 1.44269504088896341f));
  return ScaleByPowerOf2(Degree5(d, FractionOf(t), kExp2OfUnitInterval), t);  // 2^f · 2^floor(t)
}
#else
// t = n + f with n = round(t), |f| <= 1/2; 2^f from a degree-5 polynomial
// fitted for relative error on [-1/2, 1/2] (-4.9e-8 to +1.55e-7 in exact
// arithmetic, 2.3e-7 in float Horner), 2^n built in the exponent bits.
constexpr float kExp2Fraction[6] = {1.0000001192092896f, 0.6931469440460205f,
                                    0.24022120237350464f, 0.05550713092088699f,
                                    0.009675541892647743f, 0.001327647129073739f};

// Max against the clamp returns the clamp for a NaN argument.
constexpr bool kExpKeepsNaN = false;

template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpOfDifference(D d, V x, V shift) {
  const hn::RebindToSigned<D> di;
  const V kLog2e = hn::Set(d, 1.44269504088896341f);
  // Clamping at -127 makes the exponent field 0 below, so 2^n is +0 there:
  // -Inf and the tiniest results come out as exact zeros. Clamping at 128
  // makes it all ones above, so 2^n is +Inf there, where a larger n would
  // carry into the sign bit.
  const V t = hn::Min(hn::Max(hn::Mul(hn::Sub(x, shift), kLog2e), hn::Set(d, -127.0f)),
                      hn::Set(d, 128.0f));
  // Adding 1.5 * 2^23 rounds t to the nearest integer n (ties to even) and
  // leaves n in the low mantissa bits: two adds instead of Round and a
  // float-to-int conversion (which Highway follows with overflow fix-ups).
  const V kShifter = hn::Set(d, 12582912.0f);  // 1.5 * 2^23, bits 0x4B400000
  const V shifted = hn::Add(t, kShifter);
  const V n = hn::Sub(shifted, kShifter);
  const V p = Degree5(d, hn::Sub(t, n), kExp2Fraction);
  // bits(shifted) = 0x4B400000 + n, so the biased exponent n + 127 is
  // bits(shifted) - 0x4B400000 + 127.
  const auto biased = hn::Add(hn::BitCast(di, shifted), hn::Set(di, 127 - 0x4B400000));
  return hn::Mul(p, hn::BitCast(d, hn::ShiftLeft<23>(biased)));
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_FAST_EXP_INL_H_ toggle
