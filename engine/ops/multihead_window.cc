// The multi-head op's sliding window: see multihead_window.h.
#include "ops/multihead_window.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "base/valid_lens.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops {
namespace {

// Sets columns [from, to) of rows [i, i + rows) of entry b of a (B, N, M)
// view to `value`.
void FillColumns(const Tensor& attention, int64_t b, int64_t i, int64_t rows, int64_t from,
                 int64_t to, float value) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = attention.data + b * attention.strides[0] + (i + r) * attention.strides[1];
    for (int64_t j = from; j < to; ++j) row[j * attention.strides[2]] = value;
  }
}

}  // namespace

Status CheckWindow(const char* op, const Window& window) {
  if (window.left < -1 || window.right < -1) {
    return Status::InvalidArgument(std::string(op) + ": window is (" + std::to_string(window.left) +
                                   ", " + std::to_string(window.right) +
                                   "); each side must be >= 0, or -1 for unbounded");
  }
  return Status::Ok();
}

int64_t WindowFirstKey(const Window& window, int64_t n, int64_t queries, int64_t keys) {
  const int64_t p = n + keys - queries;
  // p - left only where it is positive: no overflow for any left.
  return window.left < 0 || p <= window.left ? 0 : std::min(p - window.left, keys);
}

bool CutByWindow(const Window& window, int64_t batch, int64_t queries, int64_t keys,
                 std::vector<int64_t>* ends, std::vector<int64_t>* starts) {
  starts->assign(ends->size(), 0);
  bool cut = false;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      const auto r = static_cast<size_t>(b * queries + i);
      int64_t end = (*ends)[r];
      if (end == 0) continue;  // d2l's L = 0: uniform over all M
      const int64_t p = i + keys - queries;
      int64_t start = WindowFirstKey(window, i, queries, keys);
      // A right side of M + N or more bounds nothing (p >= -N); below it,
      // p + right + 1 cannot overflow.
      if (window.right >= 0 && window.right < keys + queries) {
        end = std::min(end, std::max<int64_t>(p + window.right + 1, 0));
      }
      if (start >= end) start = end = std::clamp<int64_t>(start, 1, keys);  // no key
      (*starts)[r] = start;
      (*ends)[r] = end;
      cut |= start > 0;
    }
  }
  return cut;
}

Status WindowedHead(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                    const ConstTensor& v, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& starts, const ScoreForm& form, const Tensor& out,
                    const Tensor& attention) {
  const int64_t batch = q.dims[0], queries = q.dims[1], keys = k.dims[1];
  int64_t block_ends[kWindowQueryBlock], block_starts[kWindowQueryBlock];
  // Rows [i, i + rows) of entry b of a (B, R, C) view, columns from `column`.
  const auto part = [](auto& t, int64_t b, int64_t i, int64_t rows, int64_t column,
                       int64_t columns) {
    using View = std::remove_const_t<std::remove_reference_t<decltype(t)>>;
    return View(t.data + b * t.strides[0] + i * t.strides[1] + column * t.strides[2],
                {1, rows, columns}, {t.strides[0], t.strides[1], t.strides[2]});
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; i += kWindowQueryBlock) {
      const int64_t rows = std::min(kWindowQueryBlock, queries - i);
      const auto first = static_cast<size_t>(b * queries + i);
      // The block's keys [lo, hi): its rows' own, rows of no key aside.
      int64_t lo = keys, hi = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t start = starts[first + r], end = ends[first + r];
        if (end > start) lo = std::min(lo, start), hi = std::max(hi, end);
      }
      if (hi <= lo) continue;  // every row of length 0 or of no key: FixUncoveredRows
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t start = starts[first + r], end = ends[first + r];
        // Rows of length 0 (end 0) or of no key ([1, 1) here) are written
        // whole by FixUncoveredRows afterwards.
        block_ends[r] = end > start ? end - lo : end == 0 ? 0 : 1;
        block_starts[r] = end > start ? start - lo : end == 0 ? 0 : 1;
      }
      const int64_t width = hi - lo;
      internal::RowLengths lens;
      ATTNSCORE_RETURN_IF_ERROR(internal::RowLengths::Resolve(
          ValidLens::PerQuery(block_ends, 1, rows), 1, rows, width, call.workspace, &lens));
      const Tensor attention_block =
          attention.empty() ? Tensor() : part(attention, b, i, rows, lo, width);
      ATTNSCORE_RETURN_IF_ERROR(dot_product::GemmPath(
          call, part(q, b, i, rows, 0, q.dims[2]), part(k, b, lo, width, 0, k.dims[2]),
          part(v, b, lo, width, 0, v.dims[2]), lens.WithStarts(block_starts), form.Part(b, i, lo),
          part(out, b, i, rows, 0, out.dims[2]), attention_block));
      if (!attention.empty()) {  // the keys outside the block's
        FillColumns(attention, b, i, rows, 0, lo, 0.0f);
        FillColumns(attention, b, i, rows, hi, keys, 0.0f);
      }
    }
  }
  return Status::Ok();
}

void FixUncoveredRows(const ConstTensor& v, const std::vector<int64_t>& ends,
                      const std::vector<int64_t>& starts, const Tensor& out,
                      const Tensor& attention) {
  const int64_t batch = out.dims[0], queries = out.dims[1], heads = out.dims[2];
  const int64_t value_dim = out.dims[3], keys = v.dims[1], group = heads / v.dims[2];
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      const auto r = static_cast<size_t>(b * queries + i);
      const bool uniform = ends[r] == 0;  // else of no key, when start == end
      if (!uniform && starts[r] < ends[r]) continue;
      const float weight = uniform && keys > 0 ? 1.0f / static_cast<float>(keys) : 0.0f;
      for (int64_t h = 0; h < heads; ++h) {
        float* o = out.data + b * out.strides[0] + i * out.strides[1] + h * out.strides[2];
        for (int64_t c = 0; c < value_dim; ++c) {
          // Σ_j (1/M) v_j in key order, as the reference sums; 0 for no key.
          float sum = 0.0f;
          if (uniform) {
            const float* column =
                v.data + b * v.strides[0] + (h / group) * v.strides[2] + c * v.strides[3];
            for (int64_t j = 0; j < keys; ++j) sum += weight * column[j * v.strides[1]];
          }
          o[c * out.strides[3]] = sum;
        }
        if (!attention.empty()) {
          const Tensor head(attention.data + h * attention.strides[1],
                            {attention.dims[0], attention.dims[2], attention.dims[3]},
                            {attention.strides[0], attention.strides[2], attention.strides[3]});
          FillColumns(head, b, i, 1, 0, keys, weight);
        }
      }
    }
  }
}

}  // namespace attnscore::ops
