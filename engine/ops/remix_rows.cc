#include "ops/remix_rows.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/attention_row.h"
#include "kernels/bf16.h"

namespace attnscore::ops {
namespace {

// Whether one of the n floats at x, `stride` apart, is NaN or ±Inf (all
// exponent bits set). Integer tests, which the compiler vectorises.
bool AnyNonFinite(const float* x, int64_t n, int64_t stride) {
  constexpr uint32_t kExponent = 0x7F800000u;
  const auto special = [](const float* at) {
    uint32_t bits;
    std::memcpy(&bits, at, sizeof(bits));
    return static_cast<uint32_t>((bits & kExponent) == kExponent);
  };
  uint32_t found = 0;
  if (stride == 1) {
    for (int64_t c = 0; c < n; ++c) found |= special(x + c);
  } else {
    for (int64_t c = 0; c < n; ++c) found |= special(x + c * stride);
  }
  return found != 0;
}

}  // namespace

Status RemixNonFiniteRows(internal::Workspace& workspace, const ConstTensor& weights,
                          const ConstTensor& values, const Tensor& out,
                          const internal::RowLengths& lens, int64_t first_batch,
                          int64_t first_query, bool bf16, int threads) {
  const int64_t queries = out.dims[1], value_dim = out.dims[2];
  const int64_t rows = out.dims[0] * queries, keys = lens.keys();
  // Row r's own keys [first, end): [start, L), or all M when L = 0.
  const auto own_keys = [&](int64_t r) -> std::pair<int64_t, int64_t> {
    const int64_t b = first_batch + r / queries, i = first_query + r % queries;
    const int64_t valid = lens.row(b, i);
    if (valid == 0) return {0, keys};  // L = 0: uniform over all M
    return {std::min(lens.start(b, i), valid), valid};
  };
  // Whether the product ran past row r's own keys and left a NaN or an Inf
  // in it. Rows as wide as the product are not even read.
  const auto to_remix = [&](int64_t r) {
    const auto [first, end] = own_keys(r);
    const int64_t e = r / queries, i = r % queries;
    if (first == 0 && end >= lens.entry(first_batch + e).mix) return false;
    const float* row = out.data + e * out.strides[0] + i * out.strides[1];
    return AnyNonFinite(row, value_dim, out.strides[2]);
  };
  double flops = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (to_remix(r)) {
      const auto [first, end] = own_keys(r);
      flops += 2.0 * static_cast<double>(std::max<int64_t>(end - first, 1) * value_dim);
    }
  }
  if (flops == 0) return Status::Ok();

  // MixRow reads the views as they are when it can; otherwise a row buffer
  // holds the row's weights, one row of values and the sums.
  const bool direct =
      !bf16 && weights.strides[2] == 1 && values.strides[2] == 1 && out.strides[2] == 1;
  const size_t buffer = direct ? 0 : static_cast<size_t>(keys + 2 * value_dim);
  return internal::ForEachRowInParallel(
      workspace, internal::ThreadsFor(threads, flops), rows, internal::ScratchSlot::kRowBuffer,
      buffer,
      [&](int64_t r, float* scratch) {
        if (!to_remix(r)) return;
        const auto [first, end] = own_keys(r);
        const int64_t width = std::max<int64_t>(end - first, 0);
        const int64_t e = r / queries, i = r % queries;
        const float* w = weights.data + e * weights.strides[0] + i * weights.strides[1] +
                         first * weights.strides[2];
        const float* v = values.data + e * values.strides[0] + first * values.strides[1];
        float* o = out.data + e * out.strides[0] + i * out.strides[1];
        if (direct) {
          kernels::MixRow(w, static_cast<size_t>(width), v, values.strides[1],
                          static_cast<size_t>(value_dim), o);
          return;
        }
        float* const w_row = scratch;
        float* const v_row = w_row + keys;
        float* const sum = v_row + value_dim;
        for (int64_t j = 0; j < width; ++j) w_row[j] = w[j * weights.strides[2]];
        if (bf16) kernels::RoundThroughBf16(w_row, static_cast<size_t>(width), w_row);
        std::fill(sum, sum + value_dim, 0.0f);
        for (int64_t j = 0; j < width; ++j) {
          const float* v_j = v + j * values.strides[1];
          for (int64_t c = 0; c < value_dim; ++c) v_row[c] = v_j[c * values.strides[2]];
          if (bf16) kernels::RoundThroughBf16(v_row, static_cast<size_t>(value_dim), v_row);
          for (int64_t c = 0; c < value_dim; ++c) sum[c] += w_row[j] * v_row[c];
        }
        for (int64_t c = 0; c < value_dim; ++c) o[c * out.strides[2]] = sum[c];
      },
      [] {}, internal::Balance::kOneAtATime);
}

}  // namespace attnscore::ops
