// attnscore.catalogue() and attnscore.Op: every catalogue entry through
// its generic call, with NumPy arrays by name.
#include "catalogue.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "attnscore/attnscore.h"
#include "interrupt.h"

namespace attnscore::python {
namespace {

py::list TensorSpecs(const std::vector<TensorSpec>& specs) {
  py::list list;
  for (const TensorSpec& t : specs) {
    py::list dtypes;
    for (DataType d : t.dtypes) dtypes.append(DataTypeName(d));
    list.append(py::dict(py::arg("name") = t.name, py::arg("dtypes") = dtypes,
                         py::arg("dims") = t.dims, py::arg("min_rank") = t.min_rank,
                         py::arg("optional") = t.optional, py::arg("doc") = t.doc));
  }
  return list;
}

py::dict SpecDict(const OpSpec& spec) {
  py::list params;
  for (const ParamSpec& p : spec.params) {
    const char* type = p.type == ParamSpec::Type::kInt     ? "int"
                       : p.type == ParamSpec::Type::kFloat ? "float"
                                                           : "choice";
    params.append(py::dict(py::arg("name") = p.name,
                           py::arg("kind") = p.kind == ParamSpec::Kind::kModel ? "model" : "call",
                           py::arg("type") = type, py::arg("choices") = p.choices,
                           py::arg("default") = p.default_value, py::arg("doc") = p.doc));
  }
  return py::dict(py::arg("name") = spec.name, py::arg("summary") = spec.summary,
                  py::arg("inputs") = TensorSpecs(spec.inputs),
                  py::arg("outputs") = TensorSpecs(spec.outputs),
                  py::arg("weights") = TensorSpecs(spec.weights), py::arg("params") = params,
                  py::arg("stateful") = spec.stateful);
}

// A keyword value as parameter text: str as it is, numbers by str().
std::string ParamText(py::handle value) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::bool_>(value)) throw py::type_error("a parameter is not a bool");
  return py::str(value).cast<std::string>();
}

// The named tensors and parameters of a call's keywords: an input's name
// takes an array (valid_lens: int32 / int64, the rest float32), a call
// parameter's a value; any other name is a TypeError.
struct CallArgs {
  std::vector<NamedTensor> inputs;
  Params params;
  std::vector<py::object> keep;
};

CallArgs Arguments(const OpSpec& spec, const py::kwargs& kwargs) {
  CallArgs call;
  call.keep.reserve(kwargs.size());
  for (const auto& [key, value] : kwargs) {
    const std::string name = key.cast<std::string>();
    const TensorSpec* input = spec.input(name);
    const ParamSpec* param = spec.param(name);
    if (input != nullptr) {
      if (value.is_none()) continue;
      call.keep.emplace_back();
      if (input->dtypes[0] == DataType::kFloat32) {
        call.inputs.emplace_back(name, InputView(value, name.c_str(), &call.keep.back()));
        continue;
      }
      const ValidLens lens = LensView(value, &call.keep.back());
      std::vector<int64_t> shape = {lens.dims[0]};
      if (lens.kind == ValidLens::Kind::kPerQuery) shape.push_back(lens.dims[1]);
      if (lens.kind == ValidLens::Kind::kNone) continue;
      call.inputs.push_back(lens.is_int64
                                ? NamedTensor(name, static_cast<const int64_t*>(lens.data), shape)
                                : NamedTensor(name, static_cast<const int32_t*>(lens.data), shape));
    } else if (param != nullptr && param->kind == ParamSpec::Kind::kCall) {
      call.params[name] = ParamText(value);
    } else {
      throw py::type_error(spec.name + "() got an unexpected keyword argument '" + name + "'");
    }
  }
  return call;
}

Params ModelParams(const py::kwargs& kwargs) {
  Params params;
  for (const auto& [key, value] : kwargs) params[key.cast<std::string>()] = ParamText(value);
  return params;
}

std::unique_ptr<Op> CreateOp(const std::string& name, const py::object& weights,
                             const py::kwargs& kwargs) {
  std::vector<NamedTensor> named;
  std::vector<py::object> keep;
  if (!weights.is_none()) {
    const py::dict dict = weights.cast<py::dict>();
    keep.reserve(dict.size());
    for (const auto& [key, value] : dict) {
      const std::string weight = key.cast<std::string>();
      keep.emplace_back();
      named.emplace_back(weight, InputView(value, weight.c_str(), &keep.back()));
    }
  }
  std::unique_ptr<Op> op;
  ThrowIfError(Op::Create(name, ModelParams(kwargs), named, &op));
  return op;
}

constexpr const char* kOpDoc = R"(Op(name, weights=None, **model_params)

A catalogue entry ready to call (attnscore.catalogue() lists them): an op,
a model from its weights (a dict of float32 arrays by their state_dict
names), or a KV cache (its sizes as model parameters). Op.load(path,
**model_params) reads a model's .safetensors file, its kind and
hyperparameters from the file's __metadata__ when it has them.
op(engine, return_weights=False, **inputs_and_params) runs it: inputs by
their catalogue names (queries=, keys=, values=, valid_lens=, x=), call
parameters by theirs (causal=, scale=); it returns the first output, or
(output, attention_weights) with return_weights. op.check(engine, ...)
returns the outputs' shapes without running.)";

}  // namespace

void BindCatalogue(py::module_& m) {
  m.def(
      "catalogue",
      [] {
        py::list entries;
        for (const OpSpec& spec : Catalogue()) entries.append(SpecDict(spec));
        return entries;
      },
      "Every op and model attnscore serves, each a dict: name, summary, inputs, outputs, "
      "weights, params and whether it keeps state between calls.");

  py::class_<Op, std::unique_ptr<Op>>(m, "Op", kOpDoc)
      .def(py::init(&CreateOp), py::arg("name"), py::arg("weights") = py::none())
      .def_static(
          "load",
          [](const py::object& path, const py::kwargs& kwargs) {
            const std::string bytes =
                py::module_::import("os").attr("fsencode")(path).cast<std::string>();
            std::unique_ptr<Op> op;
            ThrowIfError(Op::Load(bytes, ModelParams(kwargs), &op));
            return op;
          },
          py::arg("path"))
      .def_property_readonly("name", [](const Op& op) { return op.spec().name; })
      .def_property_readonly("spec", [](const Op& op) { return SpecDict(op.spec()); })
      .def_property_readonly("model_params", [](const Op& op) { return op.model_params(); })
      .def_property_readonly("fixed_dims", [](const Op& op) { return op.fixed_dims(); })
      .def(
          "check",
          [](const Op& op, const Engine& engine, const py::kwargs& kwargs) {
            const CallArgs call = Arguments(op.spec(), kwargs);
            std::vector<std::vector<int64_t>> shapes;
            ThrowIfError(op.Check(engine, call.inputs, call.params, &shapes));
            py::dict result;
            for (size_t i = 0; i < shapes.size(); ++i) {
              result[py::str(op.spec().outputs[i].name)] = py::tuple(py::cast(shapes[i]));
            }
            return result;
          },
          py::arg("engine"))
      .def(
          "__call__",
          [](const Op& op, const Engine& engine, bool return_weights,
             const py::kwargs& kwargs) -> py::object {
            const CallArgs call = Arguments(op.spec(), kwargs);
            std::vector<std::vector<int64_t>> shapes;
            ThrowIfError(op.Check(engine, call.inputs, call.params, &shapes));
            const size_t count = return_weights && shapes.size() > 1 ? 2 : 1;
            std::vector<py::object> arrays(count);
            std::vector<NamedTensor> outputs;
            for (size_t i = 0; i < count; ++i) {
              outputs.emplace_back(op.spec().outputs[i].name, NewOutput(shapes[i], &arrays[i]));
            }
            int64_t elements = 0;
            for (const std::vector<int64_t>& shape : shapes) {
              elements = std::max(elements, Elements({&shape}));
            }
            ThrowIfError(Interruptible(elements).Run(
                [&] { return op.Run(engine, call.inputs, call.params, outputs); }));
            if (count == 2) return py::make_tuple(arrays[0], arrays[1]);
            return arrays[0];
          },
          py::arg("engine"), py::arg("return_weights") = false)
      .def("__repr__", [](const Op& op) {
        std::string text = "attnscore.Op('" + op.spec().name + "'";
        for (const auto& [name, value] : op.model_params()) text += ", " + name + "=" + value;
        return text + ")";
      });
}

}  // namespace attnscore::python
