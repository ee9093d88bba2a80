// Masked softmax over the last axis (docs/semantics.md section 1).
#ifndef ATTNSCORE_OPS_MASKED_SOFTMAX_H_
#define ATTNSCORE_OPS_MASKED_SOFTMAX_H_

#include <cstdint>

#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"
#include "base/valid_lens.h"
#include "ops/score_form.h"

namespace attnscore::ops {

// The checks of MaskedSoftmax's x (shape, strides); y has x's shape.
Status CheckMaskedSoftmaxInput(const ConstTensor& x);

// Engine::MaskedSoftmax without the call scope (threads, denormals).
Status MaskedSoftmax(const internal::CallContext& call, ConstTensor x, const ValidLens& valid_lens,
                     Tensor y);

// The unchecked core, shared with the attention ops: y[b, i] = masked softmax
// of x[b, i] over y's width W, where row (b, i) of the views is row
// (first_batch + b, first_query + i) of `lens` (lengths past W count as W). Reads only x[b, i, 0:L]
// (streaming also prefetches whole rows: a hint, whose data is never used).
// `stream` writes y with non-temporal stores (for outputs nobody reads soon;
// needs unit column strides). With a `form` (the attention ops' scores,
// which the factor has already scaled), row (first_batch + b, first_query +
// i) is row i of group 0 of entry that of the form's place: where the form
// caps, each row's scores are first capped, c · tanh(x / c)
// (kernels::SoftCap), then given the form's terms (ALiBi, bias, mask), in y
// or its row buffer (x is not written); with its sinks each row is
// SinkSoftmaxRow's. Such rows are not streamed. Fails only if a thread's row
// buffer cannot be allocated, and then may have written part of y.
Status SoftmaxRows(internal::Workspace& workspace, ConstTensor x, Tensor y,
                   const internal::RowLengths& lens, int64_t first_batch, int64_t first_query,
                   int threads, bool stream, const ScoreForm* form = nullptr);

// y = the masked softmax of x[0, valid) with a sink logit in its denominator
// (docs/semantics.md section 5.5): y_j = e^{x_j} / (Σ_{i < valid} e^{x_i} +
// e^sink) for j < valid, 0 from there to width. valid = 0 gives d2l's
// uniform 1/width, without the sink. A NaN or +Inf among the valid scores
// makes the row NaN; all of them -Inf gives weights 0 (the sink holds the
// whole mass). x may equal y.
void SinkSoftmaxRow(const float* x, size_t valid, size_t width, float sink, float* y);

// SoftmaxRows without streaming, and each row of y also rounded to bf16
// words into `words`, dense rows of y's width W, as soon as it is made: the
// words RoundToBf16 gives (the weights have no subnormals under the call's
// flush-to-zero), by the CPU's own conversion where it has one
// (kernels::RoundNormalsToBf16). For the bf16 mode's W V; on the long
// (1, 1024, 4096) call (a Zen 5) 2,335-2,339 us against 2,403-2,456 with a
// separate RoundToBf16 pass over the chunk's weights.
Status SoftmaxRowsAndBf16(internal::Workspace& workspace, ConstTensor x, Tensor y, uint16_t* words,
                          const internal::RowLengths& lens, int64_t first_batch,
                          int64_t first_query, int threads, const ScoreForm* form = nullptr);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MASKED_SOFTMAX_H_
