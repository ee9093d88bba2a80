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

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_BF16_H_
