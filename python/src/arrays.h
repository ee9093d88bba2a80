// NumPy arrays as attnscore views, and attnscore Status as Python exceptions.
// Only the public headers: the extension links the shared library alone.
#ifndef ATTNSCORE_PYTHON_ARRAYS_H_
#define ATTNSCORE_PYTHON_ARRAYS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore::python {

namespace py = pybind11;

// Holders are py::object rather than py::array: a default-constructed
// py::array allocates an empty NumPy array, which costs more than a toy call.

// Raises the Python exception for a non-OK status: InvalidArgument and
// Unsupported as ValueError, IoError as OSError, Internal as RuntimeError,
// each with the engine's message. Does nothing for OK.
void ThrowIfError(const Status& status);

// An input tensor. `obj` must be a float32 NumPy array (native byte order),
// else TypeError naming `name`. The array is read in place when its data is
// 4-byte aligned and its strides are non-negative multiples of 4 bytes;
// otherwise (negative or odd strides, unaligned data) a C-order copy is made.
// `*keep` holds what the view points into: keep it until the call returns.
// Rank and shape are left to the engine's checks.
ConstTensor InputView(py::handle obj, const char* name, py::object* keep);

// An output tensor: a writable float32 array, written in place. TypeError
// when it is not a float32 array, ValueError when it is read-only or its
// memory cannot be described as a float view (odd strides, unaligned data).
// Negative strides are passed on for the engine to refuse.
Tensor OutputView(py::handle obj, const char* name, py::object* keep);

// A fresh C-order float32 array of `dims` and its view.
Tensor NewOutput(const std::vector<int64_t>& dims, py::object* array);
Tensor NewOutput(const std::array<int64_t, 3>& dims, py::object* array);

// One output of a call. Not `wanted` (weights not asked for): nothing.
// Otherwise, when the caller gave no array (`given` None), a new one of
// `dims` in *array and *view; a given array (already in *view and *array,
// from OutputView) is written in place, its checks the engine's. With
// `keep_original` (a call SIGINT may stop: interrupt.h) a copy of a given
// array is kept, and Restore() puts it back: a stopped call leaves the
// caller's array as it was.
class OutputSlot {
 public:
  OutputSlot(const py::object& given, const std::vector<int64_t>& dims, Tensor* view,
             py::object* array, bool keep_original, bool wanted = true);
  void Restore();

 private:
  py::object given_, original_;
};

// Runs call() (which may throw); if it throws, restores `slots` first.
template <typename Call>
auto RestoringOnError(std::initializer_list<OutputSlot*> slots, Call call) {
  try {
    return call();
  } catch (...) {
    for (OutputSlot* slot : slots) slot->Restore();
    throw;
  }
}

// None, or an int32 / int64 array of shape (B,) or (B, N) (copied to C
// order when it is not). Another type is a TypeError, another rank a
// ValueError; both name valid_lens.
ValidLens LensView(py::handle obj, py::object* keep);
// A packed batch's offsets: a 1-D int32 or int64 array, copied if it is not
// contiguous and aligned; `name` names it in errors.
SequenceOffsets OffsetsView(py::handle obj, const char* name, py::object* keep);

}  // namespace attnscore::python

#endif  // ATTNSCORE_PYTHON_ARRAYS_H_
