// Keeping each query's output to its own values after a shared W V product
// (docs/semantics.md section 2.2), for every attention op.
#ifndef ATTNSCORE_OPS_REMIX_ROWS_H_
#define ATTNSCORE_OPS_REMIX_ROWS_H_

#include <cstdint>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "base/valid_lens.h"

namespace attnscore::ops {

// A query's output reads only the values of its own keys: [start, L) of its
// valid length L and its window's start (RowLengths::start; none when the
// window left it no key), or all M keys when L = 0. A W V product that serves several queries at
// once runs over their entry's mix width (EntryWidths::mix), the widest of
// them; there a query's weights past its own width are exactly 0, which adds
// nothing to a finite sum, but 0 · NaN and 0 · Inf are NaN.
//
// So, called after such a product: each row of `out` that holds a NaN or an
// Inf, and whose keys are not all of its entry's mix width, is recomputed as
// Σ_{start <= j < L} weights[e, i, j] · values[e, j] in float32, in a fixed order
// (the same for any thread count), and values past its width never reach
// it. Every other row is left as the product wrote it: its masked terms were
// exact zeros.
//
// weights (E, R, >= mix), values (E, >= mix, Dv), out (E, R, Dv), any
// strides; row (e, i) of the views is row (first_batch + e, first_query + i)
// of `lens`. With `bf16`, each weight and value is rounded to bfloat16 first,
// as the bf16 mode's product reads them. Fails only if a thread's row buffer
// cannot be allocated.
Status RemixNonFiniteRows(internal::Workspace& workspace, const ConstTensor& weights,
                          const ConstTensor& values, const Tensor& out,
                          const internal::RowLengths& lens, int64_t first_batch,
                          int64_t first_query, bool bf16, int threads);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_REMIX_ROWS_H_
