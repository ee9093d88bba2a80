// Run-time dispatch of the attention tile kernels (attention_tile-inl.h).
#include "kernels/attention_tile.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/attention_tile-inl.h"

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(PackKeys);
HWY_EXPORT(PackValues);
HWY_EXPORT(ScoreTile);
HWY_EXPORT(MixTile);
HWY_EXPORT(MixPackedTile);
HWY_EXPORT(ValuePanelColumns);

void ScoreTile(size_t rows, const float* const* q, size_t depth, const float* packed, size_t width,
               float scale, float* const* scores) {
  HWY_DYNAMIC_DISPATCH(ScoreTile)(rows, q, depth, packed, width, scale, scores);
}

uint32_t MixTile(size_t rows, const float* const* weights, size_t width, const float* v,
                 int64_t v_row_stride, size_t value_dim, float* const* out) {
  return HWY_DYNAMIC_DISPATCH(MixTile)(rows, weights, width, v, v_row_stride, value_dim, out);
}

uint32_t MixPackedTile(size_t rows, const float* const* weights, size_t width, const float* packed,
                       size_t packed_keys, size_t value_dim, size_t panel_columns,
                       float* const* out) {
  return HWY_DYNAMIC_DISPATCH(MixPackedTile)(rows, weights, width, packed, packed_keys, value_dim,
                                             panel_columns, out);
}

size_t ValuePanelColumns() { return HWY_DYNAMIC_DISPATCH(ValuePanelColumns)(); }

void PackValues(const float* v, int64_t v_row_stride, int64_t v_column_stride, size_t keys,
                size_t value_dim, size_t panel_columns, float* packed) {
  HWY_DYNAMIC_DISPATCH(PackValues)
  (v, v_row_stride, v_column_stride, keys, value_dim, panel_columns, packed);
}

void PackKeys(const float* k, int64_t k_row_stride, int64_t k_column_stride, size_t keys,
              size_t depth, float* packed) {
  HWY_DYNAMIC_DISPATCH(PackKeys)(k, k_row_stride, k_column_stride, keys, depth, packed);
}

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
