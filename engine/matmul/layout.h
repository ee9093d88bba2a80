// What oneDNN can be told about a Layout, and the copy for what it cannot.
#ifndef ATTNSCORE_MATMUL_LAYOUT_H_
#define ATTNSCORE_MATMUL_LAYOUT_H_

#include <cstdint>

#include "matmul/matmul.h"

namespace attnscore::matmul {

// `l` with the stride of each size-1 dim (batch, rows or cols) replaced by
// the one a layout of the other dims in their order gives it: cols 1 ->
// col_stride 1; rows 1 -> row_stride cols * col_stride; a batch of 1 ->
// batch_stride past the matrix. oneDNN infers a layout's order from every
// stride, size-1 dims included (out (1, 1, 14) with strides (14, 1, 1)
// read as transposed, and the primitive then failed to run), while its
// primitive cache treats descriptors differing only there as equal (so the
// broken primitive was reused for dense calls of the shape). A size-1 dim's
// stride never changes an address, so this changes nothing else.
Layout Canonical(const Layout& l, int64_t batch);

// Whether oneDNN can describe `l` (canonical) for `batch` matrices, by its
// rule for strided descriptors: its dims of size > 1, ordered by stride,
// each stride at least the next smaller one times that dim's size, and none
// zero. An input whose rows overlap (a sliding window), repeat (a zero
// stride) or interleave fails it; it is copied densely first (Pack).
bool Describable(const Layout& l, int64_t batch);

// The dense row-major layout of `l`'s shape.
Layout Dense(const Layout& l);

// Copies `batch` matrices of `l` from `from` into `to`, laid out Dense(l);
// elements are `element_bytes` (4, or 2 for bf16) wide.
void Pack(const void* from, const Layout& l, int64_t batch, int64_t element_bytes, void* to);

}  // namespace attnscore::matmul

#endif  // ATTNSCORE_MATMUL_LAYOUT_H_
