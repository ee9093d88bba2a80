// Masked softmax of one row, vectorised by Highway and dispatched at run time
// to the best target the CPU (and the process's ISA cap) allows.
#ifndef ATTNSCORE_KERNELS_MASKED_SOFTMAX_H_
#define ATTNSCORE_KERNELS_MASKED_SOFTMAX_H_

#include <cstddef>

namespace attnscore::kernels {

// y[0, valid) = softmax(x[0, valid)); y[valid, width) = 0 exactly, and
// x[valid, width) is never read. valid = 0 gives y = 1/width everywhere, as
// the reference's -1e6 mask does. Requires valid <= width, width >= 1.
// x may equal y (in place); otherwise they must not overlap.
// Non-finite inputs follow IEEE arithmetic as the reference does: a NaN or
// +Inf among the valid scores (or all of them -Inf) makes the whole row NaN.
void MaskedSoftmaxRow(const float* x, size_t valid, size_t width, float* y);

// Softmax of one block of a row's valid scores, for rows whose keys are
// split among threads: y[0, n) = exp(x - max) / sum over the block (n >= 1),
// and what merging the blocks needs: the block's max and sum. A block of
// only -Inf gives y = 0, max = -Inf, sum = 0 (it weighs nothing); a NaN or
// +Inf gives `poisoned` (the whole row is NaN, as in MaskedSoftmaxRow), and
// y is then unspecified. x may equal y.
struct SoftmaxBlockStats {
  float max, sum;
  bool poisoned;
};
SoftmaxBlockStats MaskedSoftmaxBlock(const float* x, size_t n, float* y);

// One row for MaskedSoftmaxRowsStream: its scores, valid length and output.
struct StreamedRow {
  const float* x;
  size_t valid;
  float* y;
};

// The softmax of each of `count` rows of one width, as MaskedSoftmaxRow
// gives it, for outputs too large to stay in cache: each y is written once,
// with non-temporal stores, while the next row computes (up to
// kMaxStreamedRows rows that share no vector, in order of valid length;
// more, in array order). The exps are shifted by the max of the row's first
// vector, not of the whole row, unless that could cost accuracy (see
// kMaxShiftedSum): so the weights are MaskedSoftmaxRow's within exp's
// error (about 1e-6 relative), not bit for bit, and the same bits wherever
// the rows lie. Each y may equal its x. `row_buffers` holds >= 2 * width floats
// of scratch. Call FlushStreams() on this thread before another thread
// reads the outputs.
constexpr size_t kMaxStreamedRows = 64;
void MaskedSoftmaxRowsStream(const StreamedRow* rows, size_t count, size_t width,
                             float* row_buffers);
void FlushStreams();

// The Highway target that MaskedSoftmaxRow runs on now, e.g. "AVX3".
const char* MaskedSoftmaxTarget();

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_MASKED_SOFTMAX_H_
