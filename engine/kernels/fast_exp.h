// ExpOfDifference (fast_exp-inl.h) over an array, dispatched at run time: for
// the accuracy test and the benchmarks; kernels use the inline form.
#ifndef ATTNSCORE_KERNELS_FAST_EXP_H_
#define ATTNSCORE_KERNELS_FAST_EXP_H_

#include <cstddef>

namespace attnscore::kernels {

// y[i] = exp(x[i]) (see fast_exp-inl.h for the range and the error bound).
void ExpArray(const float* x, size_t n, float* y);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_FAST_EXP_H_
