// Rounding floats to bfloat16 for the bf16 matmuls (EngineOptions::precision).
// Vectorised by Highway, dispatched at run time.
#ifndef ATTNSCORE_KERNELS_BF16_H_
#define ATTNSCORE_KERNELS_BF16_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// out[i] = in[i] as a bfloat16 word (a float's upper 16 bits), rounded to
// nearest with ties to even, as oneDNN's own conversion does; values past
// bf16's range round to ±Inf and a NaN stays a (quiet) NaN.
void RoundToBf16(const float* in, size_t n, uint16_t* out);

// RoundToBf16 for inputs with no subnormal among them (the words differ only
// there: a subnormal may come out as a zero), by the CPU's own conversion
// where it has avx512_bf16 (one instruction for 32 floats): for a softmax's
// weights, which the call's flush-to-zero keeps from being subnormal. It
// does not heed the ISA cap: callers use it only beside oneDNN's native bf16
// matmuls, which do (matmul::NativeBf16).
void RoundNormalsToBf16(const float* in, size_t n, uint16_t* out);

// out[i] = in[i] rounded as RoundToBf16 does, widened back to a float (the
// word in the upper half, zeros below): for f32 matmuls that compute exactly
// what a bf16 matmul with f32 accumulation does, where the CPU has no bf16
// arithmetic. out may equal in.
void RoundThroughBf16(const float* in, size_t n, float* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_BF16_H_
