// Non-owning views of caller memory: a pointer, dims and element strides.
// The engine never keeps a view past the call it was passed to.
#ifndef ATTNSCORE_TENSOR_H_
#define ATTNSCORE_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>

namespace attnscore {

inline constexpr int kMaxRank = 4;

template <typename T>
struct TensorView {
  T* data = nullptr;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements, not bytes

  TensorView() = default;

  // Row-major (C order) view of `dims`.
  TensorView(T* data_, std::initializer_list<int64_t> dims_)
      : data(data_), rank(static_cast<int>(dims_.size())) {
    int d = 0;
    for (int64_t n : dims_) {
      if (d < kMaxRank) dims[d] = n;
      ++d;
    }
    int64_t stride = 1;
    for (d = (rank < kMaxRank ? rank : kMaxRank) - 1; d >= 0; --d) {
      strides[d] = stride;
      stride *= dims[d];
    }
  }

  // Explicit strides, e.g. a transposed or padded view.
  TensorView(T* data_, std::initializer_list<int64_t> dims_,
             std::initializer_list<int64_t> strides_)
      : data(data_), rank(static_cast<int>(dims_.size())) {
    int d = 0;
    for (int64_t n : dims_) {
      if (d < kMaxRank) dims[d] = n;
      ++d;
    }
    d = 0;
    for (int64_t s : strides_) {
      if (d < kMaxRank) strides[d] = s;
      ++d;
    }
    if (static_cast<int>(strides_.size()) != rank) rank = -1;  // rejected later
  }

  // A view of mutable memory converts to a read-only view.
  template <typename U>
  TensorView(const TensorView<U>& other)  // NOLINT(google-explicit-constructor)
      : data(other.data), rank(other.rank) {
    for (int d = 0; d < kMaxRank; ++d) {
      dims[d] = other.dims[d];
      strides[d] = other.strides[d];
    }
  }

  bool empty() const { return data == nullptr && rank == 0; }
};

using Tensor = TensorView<float>;
using ConstTensor = TensorView<const float>;

// "(2, 3, 4)": how messages print a shape.
template <typename T>
std::string ShapeString(const TensorView<T>& view) {
  std::string s = "(";
  for (int d = 0; d < view.rank && d < kMaxRank; ++d) {
    if (d) s += ", ";
    s += std::to_string(view.dims[d]);
  }
  return s + ")";
}

}  // namespace attnscore

#endif  // ATTNSCORE_TENSOR_H_
