// Logit soft-capping (docs/semantics.md section 5.1): a score s becomes
// cap · tanh(s / cap), within (−cap, cap), as Gemma 2 bounds its attention
// logits. Vectorised by Highway, dispatched at run time.
#ifndef ATTNSCORE_KERNELS_SOFT_CAP_H_
#define ATTNSCORE_KERNELS_SOFT_CAP_H_

#include <cstddef>

namespace attnscore::kernels {

// x[j] = cap · tanh(x[j] / cap) for j < n, in place; cap finite and > 0.
// Highway's tanh, within a few float ulps of tanh; ±Inf gives ±cap and a
// NaN stays NaN.
void SoftCap(float* x, size_t n, float cap);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_SOFT_CAP_H_
