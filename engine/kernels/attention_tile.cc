// Run-time dispatch of the attention tile kernels (attention_tile-inl.h).
#include "kernels/attention_tile.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_tile.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/attention_tile-inl.h"
#include "kernels/dispatch.h"

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(QueryTileLanes);
HWY_EXPORT(PackQueries);
HWY_EXPORT(ScoreQueryTile);
HWY_EXPORT(QueryTileExps);
HWY_EXPORT(PackValues);
HWY_EXPORT(MixTile);
HWY_EXPORT(MixPackedTile);
HWY_EXPORT(ValuePanelColumns);
HWY_EXPORT(MixTileRows);

size_t QueryTileLanes() { return ATTNSCORE_DISPATCH(QueryTileLanes)(); }

void PackQueries(size_t rows, const float* const* q, int64_t q_column_stride, size_t depth,
                 float* packed) {
  ATTNSCORE_DISPATCH(PackQueries)(rows, q, q_column_stride, depth, packed);
}

void ScoreQueryTile(const float* packed_q, size_t depth, const float* k, int64_t k_row_stride,
                    const size_t (&widths)[2], float scale, const int32_t* starts,
                    const int32_t* valid, float* row_max, float* scores) {
  ATTNSCORE_DISPATCH(ScoreQueryTile)
  (packed_q, depth, k, k_row_stride, widths, scale, starts, valid, row_max, scores);
}

uint32_t QueryTileExps(const int32_t* starts, const int32_t* valid, const float* row_max,
                       size_t width, size_t row_step, float* scores, float* inv_sum, float* sums) {
  return ATTNSCORE_DISPATCH(QueryTileExps)(starts, valid, row_max, width, row_step, scores, inv_sum,
                                           sums);
}

uint32_t MixTile(size_t rows, const TileWeights& weights, size_t width, const float* v,
                 int64_t v_row_stride, size_t value_dim, float* const* out) {
  return ATTNSCORE_DISPATCH(MixTile)(rows, weights, width, v, v_row_stride, value_dim, out);
}

uint32_t MixPackedTile(size_t rows, const TileWeights& weights, size_t width, const float* packed,
                       size_t packed_keys, size_t first_key, size_t value_dim, size_t panel_columns,
                       float* const* out) {
  return ATTNSCORE_DISPATCH(MixPackedTile)(rows, weights, width, packed, packed_keys, first_key,
                                           value_dim, panel_columns, out);
}

size_t MixTileRows() { return ATTNSCORE_DISPATCH(MixTileRows)(); }

size_t ValuePanelColumns() { return ATTNSCORE_DISPATCH(ValuePanelColumns)(); }

void PackValues(const float* v, int64_t v_row_stride, int64_t v_column_stride, size_t keys,
                size_t value_dim, size_t panel_columns, float* packed) {
  ATTNSCORE_DISPATCH(PackValues)
  (v, v_row_stride, v_column_stride, keys, value_dim, panel_columns, packed);
}

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
