// Run-time dispatch of the masked softmax kernel (masked_softmax-inl.h).
#include "kernels/masked_softmax.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/masked_softmax.cc"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/masked_softmax-inl.h"

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(MaskedSoftmaxRow);
HWY_EXPORT(MaskedSoftmaxRowsStream);
HWY_EXPORT(MaskedSoftmaxBlock);
HWY_EXPORT(MaskedSoftmaxTarget);

void MaskedSoftmaxRow(const float* x, size_t valid, size_t width, float* y) {
  ATTNSCORE_DISPATCH(MaskedSoftmaxRow)(x, valid, width, y);
}

void MaskedSoftmaxRowsStream(const StreamedRow* rows, size_t count, size_t width,
                             float* row_buffers) {
  ATTNSCORE_DISPATCH(MaskedSoftmaxRowsStream)(rows, count, width, row_buffers);
}

SoftmaxBlockStats MaskedSoftmaxBlock(const float* x, size_t n, float* y) {
  return ATTNSCORE_DISPATCH(MaskedSoftmaxBlock)(x, n, y);
}

void FlushStreams() { hwy::FlushStream(); }

const char* MaskedSoftmaxTarget() { return ATTNSCORE_DISPATCH(MaskedSoftmaxTarget)(); }

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
