// Per-target bodies and run-time dispatch of RoundToBf16 and RoundThroughBf16,
// and RoundNormalsToBf16 (bf16.h).
#include "kernels/bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Adding 0x7FFF plus the kept part's lowest bit, then dropping the low half,
// rounds to nearest even; a carry out of the mantissa bumps the exponent,
// which is the right result up to and including overflow to Inf. A NaN
// could carry into Inf instead, so it keeps its own upper half, made quiet.
template <class DU>
HWY_INLINE hn::Vec<DU> Bf16Bits(DU du, hn::Vec<DU> bits) {
  const auto upper = hn::ShiftRight<16>(bits);
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(upper, hn::Set(du, 1u)))));
  // NaN: exponent all ones and a nonzero mantissa, i.e. |bits| > Inf's.
  const auto magnitude = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto is_nan = hn::Gt(hn::BitCast(hn::RebindToSigned<DU>(), magnitude),
                             hn::Set(hn::RebindToSigned<DU>(), 0x7F800000));
  return hn::IfThenElse(hn::RebindMask(du, is_nan), hn::Or(upper, hn::Set(du, 0x40u)), rounded);
}

void RoundToBf16(const float* HWY_RESTRICT in, size_t n, uint16_t* HWY_RESTRICT out) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<uint16_t, decltype(du)> d16;  // half as wide
  const size_t lanes = hn::Lanes(du);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto bits = hn::BitCast(du, hn::LoadU(hn::RebindToFloat<decltype(du)>(), in + i));
    // Every lane holds at most 0xFFFF, so the saturating demotion is exact.
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, Bf16Bits(du, bits))), d16, out + i);
  }
  // The tail, one lane at a time through the same arithmetic.
  const hn::CappedTag<uint32_t, 1> d1;
  for (; i < n; ++i) {
    const auto bits = hn::BitCast(d1, hn::LoadU(hn::RebindToFloat<decltype(d1)>(), in + i));
    out[i] = static_cast<uint16_t>(hn::GetLane(Bf16Bits(d1, bits)));
  }
}

void RoundThroughBf16(const float* in, size_t n, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto word = Bf16Bits(du, hn::BitCast(du, hn::LoadU(df, in + i)));
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(word)), df, out + i);
  }
  const hn::CappedTag<float, 1> d1;
  const hn::RebindToUnsigned<decltype(d1)> du1;
  for (; i < n; ++i) {
    const auto word = Bf16Bits(du1, hn::BitCast(du1, hn::LoadU(d1, in + i)));
    hn::StoreU(hn::BitCast(d1, hn::ShiftLeft<16>(word)), d1, out + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(RoundToBf16);

void RoundToBf16(const float* in, size_t n, uint16_t* out) {
  ATTNSCORE_DISPATCH(RoundToBf16)(in, n, out);
}

HWY_EXPORT(RoundThroughBf16);
void RoundThroughBf16(const float* in, size_t n, float* out) {
  ATTNSCORE_DISPATCH(RoundThroughBf16)(in, n, out);
}

#if defined(__x86_64__)
namespace {

// vcvtne2ps2bf16 rounds 32 floats to nearest even in one instruction, and
// makes a NaN quiet as Bf16Bits does; but it takes subnormal inputs as zeros.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void RoundNormalsByCpu(const float* in,
                                                                              size_t n,
                                                                              uint16_t* out) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh words =
        _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(words));
  }
  if (i < n) RoundToBf16(in + i, n - i, out + i);
}

}  // namespace

void RoundNormalsToBf16(const float* in, size_t n, uint16_t* out) {
  static const bool by_cpu = __builtin_cpu_supports("avx512bf16");
  if (by_cpu) return RoundNormalsByCpu(in, n, out);
  RoundToBf16(in, n, out);
}
#else
void RoundNormalsToBf16(const float* in, size_t n, uint16_t* out) { RoundToBf16(in, n, out); }
#endif

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
