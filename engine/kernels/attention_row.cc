// Run-time dispatch of the attention row kernels (attention_row-inl.h).
#include "kernels/attention_row.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_row.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/attention_row-inl.h"
#include "kernels/dispatch.h"

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(ScoreRow);
HWY_EXPORT(MixRow);
HWY_EXPORT(ScoreRows);
HWY_EXPORT(MixRows);
HWY_EXPORT(AddMixes);

void ScoreRow(const float* q, size_t depth, const float* k, int64_t k_row_stride, size_t keys,
              float scale, float* scores) {
  ATTNSCORE_DISPATCH(ScoreRow)(q, depth, k, k_row_stride, keys, scale, scores);
}

void MixRow(const float* weights, size_t keys, const float* v, int64_t v_row_stride,
            size_t value_dim, float* out) {
  ATTNSCORE_DISPATCH(MixRow)(weights, keys, v, v_row_stride, value_dim, out);
}

void ScoreRows(size_t rows, const float* const* q, size_t depth, const float* k,
               int64_t k_row_stride, const size_t* keys, float scale, float* const* scores) {
  ATTNSCORE_DISPATCH(ScoreRows)(rows, q, depth, k, k_row_stride, keys, scale, scores);
}

void MixRows(size_t rows, const float* const* weights, const size_t* keys, const float* v,
             int64_t v_row_stride, size_t value_dim, float* const* out) {
  ATTNSCORE_DISPATCH(MixRows)(rows, weights, keys, v, v_row_stride, value_dim, out);
}

void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const float* v,
              int64_t v_row_stride, size_t value_dim, float* const* out) {
  ATTNSCORE_DISPATCH(AddMixes)(rows, weights, keys, v, v_row_stride, value_dim, out);
}

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
