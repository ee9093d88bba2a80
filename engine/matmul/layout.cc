#include "matmul/layout.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace attnscore::matmul {

Layout Canonical(const Layout& l, int64_t batch) {
  Layout c = l;
  if (c.cols == 1) c.col_stride = 1;
  if (c.rows == 1) c.row_stride = c.cols * c.col_stride;
  if (batch == 1) {
    c.batch_stride = std::max({c.rows * c.row_stride, c.cols * c.col_stride, int64_t{1}});
  }
  return c;
}

bool Describable(const Layout& l, int64_t batch) {
  std::pair<int64_t, int64_t> dims[3];  // (stride, size) of each dim of size > 1
  int n = 0;
  if (batch > 1) dims[n++] = {l.batch_stride, batch};
  if (l.rows > 1) dims[n++] = {l.row_stride, l.rows};
  if (l.cols > 1) dims[n++] = {l.col_stride, l.cols};
  std::sort(dims, dims + n);
  if (n > 0 && dims[0].first < 1) return false;
  for (int d = 1; d < n; ++d) {
    if (dims[d].first < dims[d - 1].first * dims[d - 1].second) return false;
  }
  return true;
}

Layout Dense(const Layout& l) {
  Layout d = l;
  d.col_stride = 1;
  d.row_stride = l.cols;
  d.batch_stride = l.rows * l.cols;
  return d;
}

void Pack(const void* from, const Layout& l, int64_t batch, int64_t element_bytes, void* to) {
  const auto* src = static_cast<const unsigned char*>(from);
  auto* dst = static_cast<unsigned char*>(to);
  const auto bytes = static_cast<size_t>(element_bytes);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < l.rows; ++r) {
      const unsigned char* row = src + (b * l.batch_stride + r * l.row_stride) * element_bytes;
      for (int64_t c = 0; c < l.cols; ++c) {
        std::memcpy(dst, row + c * l.col_stride * element_bytes, bytes);
        dst += bytes;
      }
    }
  }
}

}  // namespace attnscore::matmul
