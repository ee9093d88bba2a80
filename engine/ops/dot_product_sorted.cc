// The gemm path on queries sorted by length: see dot_product_paths.h.
//
// The gemm path cuts an entry into blocks of consecutive queries, each as
// wide as its longest query. With per-query lengths out of order, every
// block holds a long query and the blocks save nothing: (1, 1024, 4096)
// with lengths uniform in [1, 4096] computed about 4096 keys for every
// query, twice the mean. Sorted, the first blocks hold the short queries and
// are narrow (0.53 of the FLOPs there). Each query's output and weights
// depend on its own row alone, so the order changes which block computes a
// row, not the semantics; it depends on the lengths alone, never on the
// thread count.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "base/workspace.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops::dot_product {

void CopyRow(const float* src, int64_t src_step, float* dst, int64_t dst_step, int64_t cols) {
  if (src_step == 1 && dst_step == 1) {
    std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  for (int64_t j = 0; j < cols; ++j) dst[j * dst_step] = src[j * src_step];
}

namespace {

// Whether entry b's lengths never fall from one query to the next (none,
// per batch, causal): its queries are in order already.
bool LengthsRise(const internal::RowLengths& lens, int64_t b) {
  for (int64_t i = 1; i < lens.queries(); ++i) {
    if (lens.row(b, i - 1) > lens.row(b, i)) return false;
  }
  return true;
}

}  // namespace

void OrderByLength(const internal::RowLengths& lens, int64_t b, int64_t* order) {
  const int64_t queries = lens.queries(), keys = lens.keys();
  if (LengthsRise(lens, b)) {
    for (int64_t i = 0; i < queries; ++i) order[i] = i;
    return;
  }
  if (keys <= kCountingSortMaxKeys) {
    // A counting sort: starts[l] is where the first query of length l goes,
    // and the queries of a length go in the caller's order. On (4, 128, 128)
    // with random per-query lengths the sort below took 3% of the tile
    // path's time; counting made the call 1.02-1.03x as fast (alternated).
    int64_t starts[kCountingSortMaxKeys + 1];
    std::fill_n(starts, keys + 1, int64_t{0});
    for (int64_t i = 0; i < queries; ++i) ++starts[lens.row(b, i)];
    int64_t first = 0;
    for (int64_t l = 0; l <= keys; ++l) first += std::exchange(starts[l], first);
    for (int64_t i = 0; i < queries; ++i) order[starts[lens.row(b, i)]++] = i;
    return;
  }
  // Keys of the length above the query: all distinct, so a plain sort gives
  // the stable order.
  for (int64_t i = 0; i < queries; ++i) order[i] = lens.row(b, i) << 32 | i;
  std::sort(order, order + queries);
  for (int64_t r = 0; r < queries; ++r) order[r] &= 0xFFFFFFFF;
}

Status SortedGemmPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                      const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                      const Tensor& out, const Tensor& attention_weights) {
  const int64_t batch = q.dims[0], queries = q.dims[1], depth = q.dims[2], value_dim = v.dims[2],
                keys = k.dims[1];
  // Entries whose lengths already rise (none, per batch, causal) are in
  // order; so are all when one length or query index would not fit the
  // sort keys below.
  bool rising = true;
  for (int64_t b = 0; b < batch && rising; ++b) rising = LengthsRise(lens, b);
  if (rising || keys >= (int64_t{1} << 31) || queries >= (int64_t{1} << 32)) {
    return GemmPath(call, q, k, v, lens, form, out, attention_weights);
  }
  // order[b * queries + r]: the query of entry b that goes r-th, shortest
  // first (ties in the caller's order); sorted_rows: its length.
  const auto rows = static_cast<size_t>(batch * queries);
  int64_t *order = nullptr, *sorted_rows = nullptr;
  try {
    order = call.workspace.Words(internal::IndexSlot::kOrder, rows);
    sorted_rows = call.workspace.Words(internal::IndexSlot::kSortedLengths, rows);
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory for the queries' order");
  }
  for (int64_t b = 0; b < batch; ++b) OrderByLength(lens, b, order + b * queries);
  for (size_t r = 0; r < rows; ++r) {
    sorted_rows[r] = lens.row(static_cast<int64_t>(r) / queries, order[r]);
  }
  const internal::RowLengths sorted = lens.WithRows(sorted_rows);
  if (GemmFlops(sorted, batch, depth, value_dim) >
      kSortWhenBelow * GemmFlops(lens, batch, depth, value_dim)) {
    return GemmPath(call, q, k, v, lens, form, out, attention_weights);
  }

  // Dense sorted copies: Q (B, N, D), then out (B, N, Dv) and the weights
  // (B, N, M) as the gemm path writes them.
  const bool want_weights = !attention_weights.empty();
  const int64_t q_floats = batch * queries * depth, out_floats = batch * queries * value_dim;
  float* buffer = nullptr;
  try {
    buffer = call.workspace.Floats(
        internal::ScratchSlot::kSortedRows,
        static_cast<size_t>(q_floats + out_floats + (want_weights ? batch * queries * keys : 0)));
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory for the queries sorted by length");
  }
  const Tensor sorted_q(buffer, {batch, queries, depth});
  const Tensor sorted_out(buffer + q_floats, {batch, queries, value_dim});
  const Tensor sorted_weights =
      want_weights ? Tensor(buffer + q_floats + out_floats, {batch, queries, keys}) : Tensor();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < queries; ++r) {
      const int64_t i = order[static_cast<size_t>(b * queries + r)];
      CopyRow(q.data + b * q.strides[0] + i * q.strides[1], q.strides[2],
              sorted_q.data + (b * queries + r) * depth, 1, depth);
    }
  }
  ATTNSCORE_RETURN_IF_ERROR(
      GemmPath(call, sorted_q, k, v, sorted, form, sorted_out, sorted_weights));
  // Only now, with every row computed, are the caller's outputs written.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < queries; ++r) {
      const int64_t i = order[static_cast<size_t>(b * queries + r)];
      CopyRow(sorted_out.data + (b * queries + r) * value_dim, 1,
              out.data + b * out.strides[0] + i * out.strides[1], out.strides[2], value_dim);
      if (want_weights) {
        CopyRow(sorted_weights.data + (b * queries + r) * keys, 1,
                attention_weights.data + b * attention_weights.strides[0] +
                    i * attention_weights.strides[1],
                attention_weights.strides[2], keys);
      }
    }
  }
  return Status::Ok();
}

}  // namespace attnscore::ops::dot_product
