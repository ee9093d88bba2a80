// The keyword options: see options.h.
#include "options.h"

#include <pybind11/numpy.h>

#include <string>

#include "arrays.h"

namespace attnscore::python {
namespace {

// Whether obj is a numpy array of bools (multihead_attention's bias as a mask).
bool IsBoolArray(const py::object& obj) {
  return py::isinstance<py::array>(obj) &&
         py::reinterpret_borrow<py::array>(obj).dtype().kind() == 'b';
}

// A bool array as bytes by strides (nonzero keeps, 0 masks); one with a
// negative stride as a contiguous copy.
TensorView<const uint8_t> MaskView(const py::object& obj, py::object* keep) {
  py::array a = py::reinterpret_borrow<py::array>(obj);
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.strides(d) < 0) {
      a = py::module_::import("numpy").attr("ascontiguousarray")(a);
      break;
    }
  }
  if (a.ndim() > kMaxRank) {
    throw py::value_error("bias has rank " + std::to_string(a.ndim()) + "; want (B, Hq, N, M)");
  }
  TensorView<const uint8_t> view;
  view.data = static_cast<const uint8_t*>(a.data());
  view.rank = static_cast<int>(a.ndim());
  for (int d = 0; d < view.rank; ++d) {
    view.dims[d] = a.shape(d);
    view.strides[d] = a.strides(d);
  }
  *keep = a;
  return view;
}

// multihead_attention's window: None (every key), or (left, right), two
// integers (-1: that side unbounded); the op checks their values.
Window WindowArgument(const py::object& window) {
  Window w;
  if (window.is_none()) return w;
  const auto is_int = [](const py::handle& x) {
    return py::isinstance<py::int_>(x) && !py::isinstance<py::bool_>(x);
  };
  if (!py::isinstance<py::tuple>(window) && !py::isinstance<py::list>(window)) {
    throw py::type_error("window is None or (left, right), two integers (-1: unbounded); got " +
                         std::string(py::str(window.get_type().attr("__name__"))));
  }
  const py::sequence sides = window;
  if (sides.size() != 2 || !is_int(sides[0]) || !is_int(sides[1])) {
    throw py::type_error("window is None or (left, right), two integers (-1: unbounded); got " +
                         std::string(py::repr(window)));
  }
  w.left = sides[0].cast<int64_t>();
  w.right = sides[1].cast<int64_t>();
  return w;
}

// multihead_attention's softcap, a number: a bool is refused, as a call
// written before softcap came (return_weights in its place) would pass one.
float SoftCapArgument(const py::object& softcap) {
  if (py::isinstance<py::bool_>(softcap)) {
    throw py::type_error(
        "softcap is a number (the scores' cap, 0: none), got a bool; "
        "pass return_weights= by name");
  }
  return softcap.cast<float>();
}

}  // namespace

Causal CausalArgument(const std::string& name) {
  if (name == "none") return Causal::kNone;
  if (name == "top-left") return Causal::kTopLeft;
  if (name == "bottom-right") return Causal::kBottomRight;
  throw py::value_error("causal is '" + name + "'; want 'none', 'top-left' or 'bottom-right'");
}

MultiHeadOptions OptionsOf(const std::string& causal, float scale, const py::object& window,
                           const py::object& alibi_slopes, const py::object& softcap,
                           const py::object& sinks, const py::object& bias, OptionArrays* keep) {
  MultiHeadOptions options;
  options.causal = CausalArgument(causal);
  options.scale = scale;
  options.window = WindowArgument(window);
  options.softcap = SoftCapArgument(softcap);
  if (!sinks.is_none()) options.sinks = InputView(sinks, "sinks", &keep->sinks);
  if (!alibi_slopes.is_none()) {
    options.alibi_slopes = InputView(alibi_slopes, "alibi_slopes", &keep->slopes);
  }
  if (IsBoolArray(bias)) {
    options.mask = MaskView(bias, &keep->bias);
  } else if (!bias.is_none()) {
    options.bias = InputView(bias, "bias", &keep->bias);
  }
  return options;
}

}  // namespace attnscore::python
