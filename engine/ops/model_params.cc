#include "ops/model_params.h"

#include <cmath>

#include "base/file_io.h"

namespace attnscore::ops {
namespace {

// Rows, columns and their strides of a rank-1 or rank-2 view.
struct Matrix {
  int64_t rows, cols, row_stride, col_stride;
};

Matrix MatrixOf(const ConstTensor& t) {
  if (t.rank == 1) return {1, t.dims[0], 0, t.strides[0]};
  return {t.dims[0], t.dims[1], t.strides[0], t.strides[1]};
}

}  // namespace

Status CheckFinite(const char* op, const char* name, const ConstTensor& param) {
  const Matrix m = MatrixOf(param);
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      const float x = param.data[r * m.row_stride + c * m.col_stride];
      if (std::isfinite(x)) continue;
      const std::string index = param.rank == 1
                                    ? std::to_string(c)
                                    : std::to_string(r) + ", " + std::to_string(c);
      return Status::InvalidArgument(std::string(op) + ": " + name + " has " +
                                     (std::isnan(x) ? "NaN" : "Inf") + " at (" + index +
                                     "); model parameters must be finite");
    }
  }
  return Status::Ok();
}

std::vector<float> CopyMatrix(const ConstTensor& param, bool transpose) {
  const Matrix m = MatrixOf(param);
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      out[static_cast<size_t>(transpose ? c * m.rows + r : r * m.cols + c)] =
          param.data[r * m.row_stride + c * m.col_stride];
    }
  }
  return out;
}

Status CheckOnlyTensors(const std::string& path, const std::vector<io::SafetensorsTensor>& tensors,
                        std::initializer_list<const char*> names, const char* model) {
  for (const io::SafetensorsTensor& t : tensors) {
    bool known = false;
    for (const char* name : names) known |= t.name == name;
    if (known) continue;
    std::string list;
    size_t n = 0;
    for (const char* name : names) {
      list += (n == 0 ? "" : n + 1 == names.size() ? " and " : ", ") + std::string(name);
      ++n;
    }
    // The name comes from the file: escaped, so the message stays one line.
    return Status::InvalidArgument(path + ": unexpected tensor \"" +
                                   internal::Printable(t.name, 60) + "\"; " + model +
                                   " state_dict has only " + list);
  }
  return Status::Ok();
}

ConstTensor ViewOf(const io::SafetensorsTensor& tensor) {
  if (tensor.shape.size() == 1) return ConstTensor(tensor.data.data(), {tensor.shape[0]});
  return ConstTensor(tensor.data.data(), {tensor.shape[0], tensor.shape[1]});
}

Status LinearPlan(const ConstTensor& x, int64_t out, bool bias, const ConstTensor* y,
                  std::shared_ptr<const matmul::Plan>* plan) {
  int64_t batch = x.dims[0], rows = x.dims[1];
  const int64_t in = x.dims[2];
  // Entries one after another (x's, and y's when given) are one taller
  // matrix: a single product instead of a batch of small ones.
  const auto stacked = [](const ConstTensor& t) { return t.strides[0] == t.dims[1] * t.strides[1]; };
  if (stacked(x) && (y == nullptr || stacked(*y))) rows *= batch, batch = 1;
  matmul::Problem p;
  p.batch = batch;
  p.a = {rows, in, x.strides[0], x.strides[1], x.strides[2]};
  p.b = {in, out, 0, out, 1};
  p.shared_b = true;
  p.c = y ? matmul::Layout{rows, out, y->strides[0], y->strides[1], y->strides[2]}
          : matmul::Layout{rows, out, rows * out, out, 1};
  p.bias = bias;
  return matmul::GetPlan(p, plan);
}

}  // namespace attnscore::ops
