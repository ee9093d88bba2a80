// Per-target bodies of the masked softmax kernels (masked_softmax.h); included
// once per Highway target by masked_softmax.cc through foreach_target.h.
// By algorithm: masked_softmax_passes-inl.h (a row's passes),
// masked_softmax_short-inl.h (short rows in registers) and
// masked_softmax_stream-inl.h (rows streamed to memory).
#if defined(ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#undef ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#else
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <limits>

#include "hwy/highway.h"
#include "kernels/masked_softmax.h"
#include "kernels/masked_softmax_passes-inl.h"
#include "kernels/masked_softmax_short-inl.h"
#include "kernels/masked_softmax_stream-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

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

const char* MaskedSoftmaxTarget() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_INL_H_ toggle
