#include "ops/masked_softmax.h"

#include "api/call_scope.h"
#include "api/checks.h"
#include "api/valid_lens.h"
#include "kernels/masked_softmax.h"

namespace attnscore::ops {
namespace {
// Outputs from this size on are streamed: about what one core's share of L3 holds.
constexpr int64_t kStreamBytes = int64_t{8} << 20;

// Streamed rows prefetch the scores 4 rows ahead into L2 (prefetcht2): in
// alternated runs on (64, 128, 512), distances 2-16 into L1 took 2.9-3.4 ms,
// 4-8 rows into L2 2.5-2.9 ms (likely: copies in L1 crowd out the row
// buffer the kernel keeps there).
constexpr int64_t kPrefetchRows = 4;

void PrefetchRow(const float* row, int64_t count) {
  constexpr int64_t kLineFloats = 64 / sizeof(float);
  for (int64_t j = 0; j < count; j += kLineFloats) {
    __builtin_prefetch(row + j, /*rw=*/0, /*locality=*/1);
  }
}
}  // namespace

Status SoftmaxRows(ConstTensor x, Tensor y, const ValidLens& valid_lens,
                   int64_t first_batch, int64_t first_query, int threads, bool stream) {
  const int64_t queries = y.dims[1], width = y.dims[2];
  const int64_t rows = y.dims[0] * queries;
  // The kernel wants unit column strides; other views go through a row buffer.
  const bool unit_columns = x.strides[2] == 1 && y.strides[2] == 1;
  stream = stream && unit_columns;
  return ForEachRowInParallel(
      threads, rows, /*slot=*/0, static_cast<size_t>(width),
      [&](int64_t r, float* row_buffer) {
        const int64_t b = r / queries, i = r % queries;
        const int64_t valid = RowValidLength(valid_lens, first_batch + b, first_query + i, width);
        const float* in = x.data + b * x.strides[0] + i * x.strides[1];
        float* out = y.data + b * y.strides[0] + i * y.strides[1];
        if (stream) {
          // Memory-bound here: fetch scores a few rows ahead while this one computes.
          if (r + kPrefetchRows < rows) {
            const int64_t nb = (r + kPrefetchRows) / queries, ni = (r + kPrefetchRows) % queries;
            PrefetchRow(x.data + nb * x.strides[0] + ni * x.strides[1],
                        RowValidLength(valid_lens, first_batch + nb, first_query + ni, width));
          }
          kernels::MaskedSoftmaxRowStream(in, static_cast<size_t>(valid),
                                          static_cast<size_t>(width), out, row_buffer);
          return;
        }
        if (unit_columns) {
          kernels::MaskedSoftmaxRow(in, static_cast<size_t>(valid), static_cast<size_t>(width),
                                    out);
          return;
        }
        for (int64_t j = 0; j < valid; ++j) row_buffer[j] = in[j * x.strides[2]];
        kernels::MaskedSoftmaxRow(row_buffer, static_cast<size_t>(valid),
                                  static_cast<size_t>(width), row_buffer);
        for (int64_t j = 0; j < width; ++j) out[j * y.strides[2]] = row_buffer[j];
      },
      [&] {
        if (stream) kernels::FlushStreams();  // before other threads read y
      });
}

Status MaskedSoftmax(const EngineOptions& options, ConstTensor x,
                     const ValidLens& valid_lens, Tensor y) {
  constexpr const char* kOp = "MaskedSoftmax";
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "x", x, {kAnyDim, kAnyDim, kAnyDim}, "(B, N, M)"));
  const int64_t batch = x.dims[0], queries = x.dims[1], keys = x.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "y", y, {batch, queries, keys}, "(B, N, M) like x"));
  ATTNSCORE_RETURN_IF_ERROR(CheckWritable(kOp, "y", y));
  ATTNSCORE_RETURN_IF_ERROR(CheckDisjoint(kOp, "y", y, "x", x, /*allow_same=*/true));
  ATTNSCORE_RETURN_IF_ERROR(CheckValidLens(valid_lens, batch, queries, kOp, {{"y", y}}));
  // An output larger than the caches would only evict the caller's data and
  // cost a read per line written: stream it to memory instead.
  const bool stream = batch * queries * keys * int64_t{sizeof(float)} >= kStreamBytes;
  return SoftmaxRows(x, y, valid_lens, /*first_batch=*/0, /*first_query=*/0, options.threads,
                     stream);
}

}  // namespace attnscore::ops
