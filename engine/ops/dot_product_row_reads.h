// What the row path's two forms (dot_product_rows.cc: rows whole;
// dot_product_row_blocks.cc: keys in blocks) share: the chunk of rows that
// read each K and V row together, the scores' cap and terms, and how a
// group's rows are handed to the row kernels. Private to those two files.
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_ROW_READS_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_ROW_READS_H_

#include <cstddef>
#include <cstdint>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "base/call_scope.h"
#include "base/valid_lens.h"
#include "kernels/attention_row.h"
#include "kernels/soft_cap.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops::dot_product {

// An entry's rows go through the row kernels in chunks of this many, the
// rows of a chunk sharing each K and V row read.
inline constexpr int64_t kChunkRows = static_cast<int64_t>(kernels::kMaxSharedRows);

// Each of `count` rows' first n[r] scores, against keys from `first_key`,
// capped where the form caps, then given its terms; rows[r] is row
// row_of(r) of group g of entry b.
template <class RowOf>
void ShapeScores(const ScoreForm& form, int64_t b, int64_t g, int64_t first_key, size_t count,
                 const size_t* n, float* const* rows, RowOf row_of) {
  if (form.softcap > 0.0f) {
    for (size_t r = 0; r < count; ++r) kernels::SoftCap(rows[r], n[r], form.softcap);
  }
  if (!form.HasTerms()) return;
  for (size_t r = 0; r < count; ++r) {
    form.AddTerms(b, g, row_of(r), first_key, rows[r], static_cast<int64_t>(n[r]));
  }
}

// Group g of entry b of a (B, G, R, F) view: its row 0; rows are
// strides[2] apart, their elements strides[3].
template <typename T>
T* GroupOf(const TensorView<T>& t, int64_t b, int64_t g) {
  return t.data + b * t.strides[0] + g * t.strides[1];
}

// Calls read(...) with group g of entry b's rows from row `first` on, as
// the row kernels take them: a pointer and a row stride, or a cache's keys
// (`first` then a multiple of kernels::kCachedKeyGroup, as the cached
// paths' key blocks and ranges are), or int8 values with their scales.
template <typename T, class Read>
void ReadFrom(const TensorView<const T>& t, int64_t b, int64_t g, int64_t first, Read&& read) {
  read(GroupOf(t, b, g) + first * t.strides[2], t.strides[2]);
}
template <class Read>
void ReadFrom(const Bf16KeyView& k, int64_t b, int64_t g, int64_t first, Read&& read) {
  read(kernels::Bf16Keys{GroupOf(k, b, g) + first * k.strides[2]});
}
template <class Read>
void ReadFrom(const Int8KeyView& k, int64_t b, int64_t g, int64_t first, Read&& read) {
  const float* params = k.params + b * k.params_strides[0] + g * k.params_strides[1];
  const auto group = static_cast<int64_t>(kernels::kCachedKeyGroup);
  read(kernels::Int8Keys{GroupOf(k, b, g) + first * k.strides[2],
                         params + first / group * 2 * k.dims[3]});
}
template <class Read>
void ReadFrom(const Int8ValueView& v, int64_t b, int64_t g, int64_t first, Read&& read) {
  const float* scales = v.scales + b * v.scales_strides[0] + g * v.scales_strides[1];
  read(kernels::Int8Values{GroupOf(v, b, g) + first * v.strides[2], v.strides[2], scales + first});
}

// The row path with the keys of each row in blocks of `key_block`
// (dot_product_row_blocks.cc), on `threads` threads; GroupedRowPath's
// arguments otherwise.
template <class KeyView, class ValueView>
Status RowsInKeyBlocks(const internal::CallContext& call, int threads, int64_t key_block,
                       const ConstTensor& q, const KeyView& k, const ValueView& v,
                       const internal::RowLengths& lens, const ScoreForm& form, const Tensor& out,
                       const Tensor& attention);

}  // namespace attnscore::ops::dot_product

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_ROW_READS_H_
