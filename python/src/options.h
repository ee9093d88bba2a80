// The multi-head op's keyword options, from Python objects to
// MultiHeadOptions, for multihead_attention, its packed form and
// KvCache.attend (python/src/options.cc).
#ifndef ATTNSCORE_PYTHON_OPTIONS_H_
#define ATTNSCORE_PYTHON_OPTIONS_H_

#include <pybind11/pybind11.h>

#include <string>

#include "attnscore/attnscore.h"

namespace attnscore::python {

namespace py = pybind11;

// "none", "top-left" or "bottom-right"; else ValueError.
Causal CausalArgument(const std::string& name);

// The arrays a call's options view, kept alive for the call.
struct OptionArrays {
  py::object sinks, slopes, bias;
};

// multihead_attention's keywords as MultiHeadOptions: window None or
// (left, right); softcap a number, not a bool; sinks and alibi_slopes (Hq,)
// float32 arrays or None; bias float32, or a bool array as the mask, or None.
MultiHeadOptions OptionsOf(const std::string& causal, float scale, const py::object& window,
                           const py::object& alibi_slopes, const py::object& softcap,
                           const py::object& sinks, const py::object& bias, OptionArrays* keep);

}  // namespace attnscore::python

#endif  // ATTNSCORE_PYTHON_OPTIONS_H_
