#include "arrays.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace attnscore::python {
namespace {

// What was passed, for messages: an array's dtype ("float64"), else the
// type's qualified name ("list", "torch.Tensor").
std::string WhatIs(py::handle obj) {
  if (py::isinstance<py::array>(obj)) {
    return py::str(py::reinterpret_borrow<py::array>(obj).dtype()).cast<std::string>();
  }
  py::handle type(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())));
  std::string name = py::str(py::getattr(type, "__qualname__", py::str("?"))).cast<std::string>();
  py::object module = py::getattr(type, "__module__", py::none());
  if (py::isinstance<py::str>(module)) {
    const std::string m = module.cast<std::string>();
    if (m != "builtins") name = m + "." + name;
  }
  return name;
}

// Describes `a` as a view of `data`: dims, and strides in floats. False when
// its memory does not fit one (data not 4-byte aligned, a stride that is not
// a multiple of 4 bytes, or a negative stride unless `allow_negative`).
//
// A dim of size 1 addresses one element whatever its stride, and NumPy holds
// anything there (0 after np.newaxis, a parent's stride after slicing, a
// negative one after reversing). It gets the stride C order would give it,
// the extent of the dims after it, so that a view of C-order data looks
// C-order to the engine. (Stride 0 there is valid by the engine's contract,
// but concat attention with B = N = 1 and stride-0 size-1 dims in out and in
// one input fails in oneDNN with kInternal, and later calls of that shape
// fail too: an engine bug, reported, that this keeps Python callers clear of.)
//
// Ranks above kMaxRank keep their rank, for the engine's rank check to
// refuse.
template <typename T>
bool ToView(const py::array& a, T* data, bool allow_negative, TensorView<T>* view) {
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0) return false;
  const int ndim = static_cast<int>(a.ndim());
  view->data = data;
  view->rank = ndim;
  int64_t inner = 1;  // the C-order stride of dim d: elements the dims after it span
  for (int d = std::min(ndim, kMaxRank) - 1; d >= 0; --d) {
    const int64_t dim = a.shape(d);
    const int64_t bytes = a.strides(d);
    view->dims[d] = dim;
    if (dim == 1) {
      view->strides[d] = inner;
      continue;
    }
    inner *= dim;
    if (bytes % static_cast<int64_t>(sizeof(float)) != 0 || (bytes < 0 && !allow_negative)) {
      return false;
    }
    view->strides[d] = bytes / static_cast<int64_t>(sizeof(float));
  }
  return true;
}

// Whether `obj` is a NumPy array of `kind` ('f' float, 'i' signed integer)
// and `bytes` per item in this machine's byte order. Reads the descriptor's
// fields rather than asking NumPy whether two dtypes are equivalent, which
// costs more than a small op.
bool IsNativeArray(py::handle obj, char kind, int64_t bytes) {
  if (!py::isinstance<py::array>(obj)) return false;
  const py::dtype dtype = py::reinterpret_borrow<py::array>(obj).dtype();
  constexpr char kNative = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>';
  const char order = dtype.byteorder();  // '=' native, '|' one byte, '<' or '>'
  return dtype.kind() == kind && dtype.itemsize() == bytes &&
         (order == '=' || order == '|' || order == kNative);
}

bool IsFloat32Array(py::handle obj) { return IsNativeArray(obj, 'f', sizeof(float)); }

// A C-order copy of `a` (ndarray.copy always copies; its result is aligned).
py::array CopyOf(const py::array& a) {
  return py::reinterpret_borrow<py::array>(a.attr("copy")("C"));
}

}  // namespace

void ThrowIfError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnsupported:
      throw py::value_error(status.message());
    case StatusCode::kCancelled:  // a CancelToken the caller set (interrupt.h raises for SIGINT)
      PyErr_SetString(PyExc_KeyboardInterrupt, status.message().c_str());
      throw py::error_already_set();
    case StatusCode::kIoError:
      PyErr_SetString(PyExc_OSError, status.message().c_str());
      throw py::error_already_set();
    case StatusCode::kInternal:
    default:
      PyErr_SetString(PyExc_RuntimeError, status.message().c_str());
      throw py::error_already_set();
  }
}

ConstTensor InputView(py::handle obj, const char* name, py::object* keep) {
  if (!IsFloat32Array(obj)) {
    throw py::type_error(std::string(name) + " must be a float32 array, got " + WhatIs(obj));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  ConstTensor view;
  if (!ToView(a, static_cast<const float*>(a.data()), /*allow_negative=*/false, &view)) {
    a = CopyOf(a);
    ToView(a, static_cast<const float*>(a.data()), false, &view);  // C order: always fits
  }
  *keep = a;
  return view;
}

Tensor OutputView(py::handle obj, const char* name, py::object* keep) {
  if (!IsFloat32Array(obj)) {
    throw py::type_error(std::string(name) + " must be a float32 array, got " + WhatIs(obj));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!a.writeable()) {
    throw py::value_error(std::string(name) + " is read-only; it must be a writable float32 array");
  }
  Tensor view;
  if (!ToView(a, static_cast<float*>(a.mutable_data()), /*allow_negative=*/true, &view)) {
    throw py::value_error(std::string(name) +
                          " cannot be written in place: its data is not 4-byte aligned or "
                          "a stride is not a multiple of 4 bytes");
  }
  *keep = a;
  return view;
}

Tensor NewOutput(const std::vector<int64_t>& dims, py::object* array) {
  py::array_t<float> a(dims);
  Tensor view;
  ToView(a, a.mutable_data(), false, &view);  // C order: always fits
  *array = a;
  return view;
}

Tensor NewOutput(const std::array<int64_t, 3>& dims, py::object* array) {
  return NewOutput(std::vector<int64_t>(dims.begin(), dims.end()), array);
}

OutputSlot::OutputSlot(const py::object& given, const std::vector<int64_t>& dims, Tensor* view,
                       py::object* array, bool keep_original, bool wanted) {
  if (!wanted) return;
  if (given.is_none()) {
    *view = NewOutput(dims, array);
    return;
  }
  if (!keep_original) return;
  given_ = given;
  original_ = given.attr("copy")();
}

void OutputSlot::Restore() {
  if (original_) given_[py::ellipsis()] = original_;  // NumPy's copy, through its strides
}

SequenceOffsets OffsetsView(py::handle obj, const char* name, py::object* keep) {
  const bool is_int64 = IsNativeArray(obj, 'i', sizeof(int64_t));
  if (!is_int64 && !IsNativeArray(obj, 'i', sizeof(int32_t))) {
    throw py::type_error(std::string(name) + " must be an int32 or int64 array, got " +
                         WhatIs(obj));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (a.ndim() != 1) {
    throw py::value_error(std::string(name) + " has shape " +
                          py::str(a.attr("shape")).cast<std::string>() +
                          " but must be (S + 1,), where each sequence begins");
  }
  const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % a.itemsize() == 0;
  if (!aligned || !(a.flags() & py::array::c_style)) a = CopyOf(a);
  *keep = a;
  return is_int64 ? SequenceOffsets::Of(static_cast<const int64_t*>(a.data()), a.shape(0))
                  : SequenceOffsets::Of(static_cast<const int32_t*>(a.data()), a.shape(0));
}

ValidLens LensView(py::handle obj, py::object* keep) {
  if (obj.is_none()) return ValidLens::None();
  const bool is_int64 = IsNativeArray(obj, 'i', sizeof(int64_t));
  if (!is_int64 && !IsNativeArray(obj, 'i', sizeof(int32_t))) {
    throw py::type_error("valid_lens must be None or an int32 or int64 array, got " +
                         WhatIs(obj));
  }
  py::array a = py::reinterpret_borrow<py::array>(obj);
  if (a.ndim() != 1 && a.ndim() != 2) {
    throw py::value_error("valid_lens has shape " +
                          py::str(a.attr("shape")).cast<std::string>() +
                          " but must be (B,), one length per batch entry, or (B, N), one per query");
  }
  const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % a.itemsize() == 0;
  if (!aligned || !(a.flags() & py::array::c_style)) a = CopyOf(a);
  *keep = a;
  const int64_t batch = a.shape(0);
  if (a.ndim() == 1) {
    return is_int64 ? ValidLens::PerBatch(static_cast<const int64_t*>(a.data()), batch)
                    : ValidLens::PerBatch(static_cast<const int32_t*>(a.data()), batch);
  }
  const int64_t queries = a.shape(1);
  return is_int64 ? ValidLens::PerQuery(static_cast<const int64_t*>(a.data()), batch, queries)
                  : ValidLens::PerQuery(static_cast<const int32_t*>(a.data()), batch, queries);
}

}  // namespace attnscore::python
