#include "ops/masked_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/checks.h"
#include "base/parallel.h"
#include "base/valid_lens.h"
#include "base/workspace.h"
#include "kernels/bf16.h"
#include "kernels/masked_softmax.h"
#include "kernels/soft_cap.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "MaskedSoftmax";

// Outputs from this size on are streamed: about what one core's share of L3 holds.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Streamed rows go to the kernel in chunks: each chunk's last row is stored
// with nothing to overlap it, so a chunk should be long, and its descriptors
// small enough for the stack; and there should be a chunk for every thread.
constexpr auto kStreamChunkRows = static_cast<int64_t>(kernels::kMaxStreamedRows);

// Row (b, i) of the views: row (first_batch + b, first_query + i) of lens.
kernels::StreamedRow RowOf(const ConstTensor& x, const Tensor& y, const internal::RowLengths& lens,
                           int64_t first_batch, int64_t first_query, int64_t b, int64_t i) {
  return kernels::StreamedRow{
      x.data + b * x.strides[0] + i * x.strides[1],
      static_cast<size_t>(std::min(lens.row(first_batch + b, first_query + i), y.dims[2])),
      y.data + b * y.strides[0] + i * y.strides[1]};
}

// A row's part of a ScoreForm: its cap, its terms and its sink.
struct RowForm {
  const ScoreForm* form = nullptr;  // none: the scores as they are
  int64_t b = 0, i = 0;             // the row, as the form places it
  const float* sink = nullptr;

  bool changes_scores() const {
    return form != nullptr && (form->softcap > 0.0f || form->HasTerms());
  }
  // Caps x[start, valid), then adds the terms there.
  void Shape(float* x, size_t start, size_t valid) const {
    if (form == nullptr || valid <= start) return;
    if (form->softcap > 0.0f) kernels::SoftCap(x + start, valid - start, form->softcap);
    if (form->HasTerms()) {
      form->AddTerms(b, 0, i, static_cast<int64_t>(start), x + start,
                     static_cast<int64_t>(valid - start));
    }
  }
};

// The softmax of a row's valid scores, with the call's sink where it has one.
void RowSoftmax(const float* x, size_t valid, size_t width, const float* sink, float* y) {
  if (sink != nullptr) {
    SinkSoftmaxRow(x, valid, width, *sink, y);
  } else {
    kernels::MaskedSoftmaxRow(x, valid, width, y);
  }
}

// A row whose keys begin at start > 0 (a window's, RowLengths::start): the
// masked softmax of x[start, valid) into y[start, width), zeros before it;
// all zeros when start >= valid (the window left it no key). Its floats end
// in y's row, and where y's columns are strided in row_buffer too.
void CutRow(const ConstTensor& x, const Tensor& y, const kernels::StreamedRow& at, size_t start,
            size_t columns, const RowForm& form, float* row_buffer) {
  const bool unit_columns = x.strides[2] == 1 && y.strides[2] == 1;
  float* const row = unit_columns ? at.y : row_buffer;
  const size_t valid = std::max(at.valid, start);
  for (size_t j = start; j < valid; ++j) row[j] = at.x[j * static_cast<size_t>(x.strides[2])];
  std::fill(row, row + start, 0.0f);
  if (valid == start) {
    std::fill(row + start, row + columns, 0.0f);
  } else {
    form.Shape(row, start, valid);
    RowSoftmax(row + start, valid - start, columns - start, form.sink, row + start);
  }
  if (!unit_columns) {
    for (size_t j = 0; j < columns; ++j) at.y[j * static_cast<size_t>(y.strides[2])] = row[j];
  }
}

// The rows of SoftmaxRows, not streamed, one by one (shaped first as the
// form says): then(r, y_row) after each, with y_row the row's floats in
// L1, unit strides (y's own row, or the row buffer a strided y goes through).
template <class Then>
Status ForEachSoftmaxRow(internal::Workspace& workspace, ConstTensor x, Tensor y,
                         const internal::RowLengths& lens, int64_t first_batch, int64_t first_query,
                         int threads, const ScoreForm* score_form, Then then) {
  const int64_t queries = y.dims[1], width = y.dims[2];
  const bool unit_columns = x.strides[2] == 1 && y.strides[2] == 1;
  return internal::ForEachRowInParallel(
      workspace, threads, y.dims[0] * queries, internal::ScratchSlot::kRowBuffer,
      static_cast<size_t>(width),
      [&](int64_t r, float* row_buffer) {
        const int64_t b = first_batch + r / queries, i = first_query + r % queries;
        const kernels::StreamedRow at =
            RowOf(x, y, lens, first_batch, first_query, r / queries, r % queries);
        const auto columns = static_cast<size_t>(width);
        const auto start = static_cast<size_t>(std::min(lens.start(b, i), width));
        const RowForm form{score_form, b, i, score_form ? score_form->Sink(0, i) : nullptr};
        if (start > 0) {  // keys [start, valid) of a window: zeros before and after
          CutRow(x, y, at, start, columns, form, row_buffer);
          return then(r, unit_columns ? at.y : row_buffer);
        }
        if (unit_columns) {
          const float* scores = at.x;
          if (form.changes_scores()) {
            if (at.x != at.y) std::copy(at.x, at.x + at.valid, at.y);
            form.Shape(at.y, 0, at.valid);
            scores = at.y;
          }
          RowSoftmax(scores, at.valid, columns, form.sink, at.y);
          return then(r, at.y);
        }
        for (size_t j = 0; j < at.valid; ++j) row_buffer[j] = at.x[j * x.strides[2]];
        form.Shape(row_buffer, 0, at.valid);
        RowSoftmax(row_buffer, at.valid, columns, form.sink, row_buffer);
        for (size_t j = 0; j < columns; ++j) at.y[j * y.strides[2]] = row_buffer[j];
        then(r, row_buffer);
      },
      [] {});
}

// About 10 operations per score: max, exp, sum, scale.
int SoftmaxThreads(int threads, const Tensor& y) {
  return internal::ThreadsFor(threads,
                              10.0 * static_cast<double>(y.dims[0] * y.dims[1] * y.dims[2]));
}

}  // namespace

Status SoftmaxRows(internal::Workspace& workspace, ConstTensor x, Tensor y,
                   const internal::RowLengths& lens, int64_t first_batch, int64_t first_query,
                   int threads, bool stream, const ScoreForm* form) {
  const int64_t queries = y.dims[1], width = y.dims[2];
  const int64_t rows = y.dims[0] * queries;
  threads = SoftmaxThreads(threads, y);
  if (stream && form == nullptr && !lens.has_starts() && x.strides[2] == 1 && y.strides[2] == 1) {
    // Chunks split rows only, so their size never changes a result.
    const int64_t chunk_rows =
        std::clamp<int64_t>((rows + threads - 1) / threads, 1, kStreamChunkRows);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    return internal::ForEachRowInParallel(
        workspace, threads, chunks, internal::ScratchSlot::kRowBuffer,
        2 * static_cast<size_t>(width),
        [&](int64_t chunk, float* row_buffers) {
          kernels::StreamedRow descriptors[kStreamChunkRows];
          const int64_t first = chunk * chunk_rows;
          const int64_t count = std::min(chunk_rows, rows - first);
          // Row by row, not by a division each: this loop had 2.9% of the
          // op's profile samples with one, 2.4% without.
          for (int64_t k = 0, b = first / queries, i = first % queries; k < count; ++k) {
            descriptors[k] = RowOf(x, y, lens, first_batch, first_query, b, i);
            if (++i == queries) {
              i = 0;
              ++b;
            }
          }
          kernels::MaskedSoftmaxRowsStream(descriptors, static_cast<size_t>(count),
                                           static_cast<size_t>(width), row_buffers);
        },
        [] { kernels::FlushStreams(); });  // before other threads read y
  }
  return ForEachSoftmaxRow(workspace, x, y, lens, first_batch, first_query, threads, form,
                           [](int64_t, const float*) {});
}

Status SoftmaxRowsAndBf16(internal::Workspace& workspace, ConstTensor x, Tensor y, uint16_t* words,
                          const internal::RowLengths& lens, int64_t first_batch,
                          int64_t first_query, int threads, const ScoreForm* form) {
  const auto width = static_cast<size_t>(y.dims[2]);
  return ForEachSoftmaxRow(workspace, x, y, lens, first_batch, first_query,
                           SoftmaxThreads(threads, y), form, [&](int64_t r, const float* row) {
                             kernels::RoundNormalsToBf16(row, width,
                                                         words + static_cast<size_t>(r) * width);
                           });
}

void SinkSoftmaxRow(const float* x, size_t valid, size_t width, float sink, float* y) {
  if (valid == 0) return kernels::MaskedSoftmaxRow(x, valid, width, y);
  // y = e^{x - max} / sum, so with the sink e^{x - max} / (sum + e^{sink -
  // max}): y times sum / (sum + e^{sink - max}), which e^{sink - max} =
  // +Inf makes 0.
  const kernels::SoftmaxBlockStats stats = kernels::MaskedSoftmaxBlock(x, valid, y);
  if (stats.poisoned) {
    std::fill(y, y + width, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const float share =
      stats.sum == 0.0f ? 0.0f : stats.sum / (stats.sum + std::exp(sink - stats.max));
  for (size_t j = 0; j < valid; ++j) y[j] *= share;
  std::fill(y + valid, y + width, 0.0f);
}

Status CheckMaskedSoftmaxInput(const ConstTensor& x) {
  return internal::CheckTensor(kOp, "x", x,
                               {internal::kAnyDim, internal::kAnyDim, internal::kAnyDim}, "(B, N, M)");
}

Status MaskedSoftmax(const internal::CallContext& call, ConstTensor x, const ValidLens& valid_lens,
                     Tensor y) {
  ATTNSCORE_RETURN_IF_ERROR(CheckMaskedSoftmaxInput(x));
  const int64_t batch = x.dims[0], queries = x.dims[1], keys = x.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(
      internal::CheckTensor(kOp, "y", y, {batch, queries, keys}, "(B, N, M) like x"));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckWritable(kOp, "y", y));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckDisjoint(kOp, "y", y, "x", x, /*allow_same=*/true));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckValidLens(valid_lens, batch, queries, kOp, {{"y", y}}));
  // An output larger than the caches would only evict the caller's data and
  // cost a read per line written: stream it to memory instead.
  const bool stream = batch * queries * keys * int64_t{sizeof(float)} >= kStreamBytes;
  internal::RowLengths lens;
  ATTNSCORE_RETURN_IF_ERROR(
      internal::RowLengths::Resolve(valid_lens, batch, queries, keys, call.workspace, &lens));
  return SoftmaxRows(call.workspace, x, y, lens, /*first_batch=*/0, /*first_query=*/0,
                     call.threads(), stream);
}

}  // namespace attnscore::ops
