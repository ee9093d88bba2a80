#include "cli/run.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/common.h"
#include "cli/flags.h"
#include "cli/outputs.h"
#include "npy/npy.h"

namespace attnscore::cli {
namespace {

// "(2, 3)", and "(4,)" for rank 1, as numpy prints a shape.
std::string ShapeOf(const npy::NpyArray& a) {
  std::string s = "(";
  for (size_t d = 0; d < a.shape.size(); ++d) {
    s += (d ? ", " : "") + std::to_string(a.shape[d]);
  }
  return s + (a.shape.size() == 1 ? ",)" : ")");
}

// Every op needs each dim >= 1; an empty one is named with its file.
Status CheckNoEmptyDim(const std::string& flag, const std::string& path, const npy::NpyArray& a) {
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] == 0) {
      return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(a) + " has dim " +
                                     std::to_string(d) + " of size 0; every dim must be >= 1");
    }
  }
  return Status::Ok();
}

// Reads the .npy file `flag` names for the input `spec`: float32 of the
// spec's rank, or int32 / int64 (valid lengths) of rank min_rank to its
// dims. `*tensor` then borrows `*array`'s bytes. Errors name the flag and
// the file.
Status ReadInput(const Args& args, const std::string& flag, const TensorSpec& spec,
                 npy::NpyArray* array, NamedTensor* tensor) {
  const std::string path = args.get(flag);
  ATTNSCORE_RETURN_IF_ERROR(npy::ReadNpy(path, array));
  const size_t rank = array->shape.size(), max_rank = spec.dims.size();
  if (spec.dtypes[0] == DataType::kFloat32) {
    if (array->dtype != npy::DType::kFloat32) {
      return Status::InvalidArgument(flag + " " + path + ": dtype is " +
                                     npy::DTypeName(array->dtype) + "; want float32");
    }
    if (rank != max_rank) {
      return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(*array) +
                                     " has rank " + std::to_string(rank) + "; want rank " +
                                     std::to_string(max_rank));
    }
    ATTNSCORE_RETURN_IF_ERROR(CheckNoEmptyDim(flag, path, *array));
    *tensor = NamedTensor(spec.name, array->data<float>(), array->shape);
    return Status::Ok();
  }
  const bool is64 = array->dtype == npy::DType::kInt64;
  if (!is64 && array->dtype != npy::DType::kInt32) {
    return Status::InvalidArgument(flag + " " + path + ": dtype is " +
                                   npy::DTypeName(array->dtype) + "; want int32 or int64");
  }
  if (rank < static_cast<size_t>(spec.min_rank) || rank > max_rank) {
    std::string want;  // "(B,) or (B, N)", from the spec's dims
    for (size_t r = static_cast<size_t>(spec.min_rank); r <= max_rank; ++r) {
      std::string dims;
      for (size_t d = 0; d < r; ++d) dims += (d ? ", " : "") + spec.dims[d];
      want += (want.empty() ? "(" : " or (") + dims + (r == 1 ? ",)" : ")");
    }
    return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(*array) + " has rank " +
                                   std::to_string(rank) + "; want " + want);
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckNoEmptyDim(flag, path, *array));
  *tensor = is64 ? NamedTensor(spec.name, array->data<int64_t>(), array->shape)
                 : NamedTensor(spec.name, array->data<int32_t>(), array->shape);
  return Status::Ok();
}

// The flags `run OP` takes and needs, from the entry's spec.
void RunFlags(const OpSpec& spec, std::set<std::string>* allowed, std::set<std::string>* required) {
  *allowed = {"--out", "--threads", "--isa", "--precision", "--info"};
  if (RunWritesWeights(spec)) allowed->insert("--weights-out");
  *required = {"--out"};
  for (const TensorSpec& input : spec.inputs) {
    allowed->insert(TensorFlag(input.name));
    if (RunNeeds(spec, input)) required->insert(TensorFlag(input.name));
  }
  // A model file's __metadata__ may give its parameters: none is required.
  for (const ParamSpec& param : spec.params) allowed->insert(ParamFlag(param.name));
  if (spec.is_model()) allowed->insert("--model"), required->insert("--model");
}

// Loads --model (or makes the op) with the model parameters its flags give,
// the others taken from the inputs' sizes. A model that cannot take a size
// an input gave says which input gave it.
Status MakeOp(const Args& args, const OpSpec& spec, const std::vector<NamedTensor>& inputs,
              std::unique_ptr<Op>* op) {
  Params params;
  std::map<std::string, std::string> derived;  // parameter -> what set it
  ATTNSCORE_RETURN_IF_ERROR(FlagParams(args, spec, ParamSpec::Kind::kModel, &params));
  for (const ParamSpec& p : spec.params) {
    const DerivedFrom* from = DerivedParam(spec, p.name);
    if (p.kind != ParamSpec::Kind::kModel || params.count(p.name) || from == nullptr) continue;
    for (const NamedTensor& t : inputs) {
      if (t.name != from->input) continue;
      params[p.name] = std::to_string(t.dims[from->dim]);
      derived[p.name] = TensorFlag(t.name) + " " + args.get(TensorFlag(t.name)) + " has " +
                        from->label + " = " + params[p.name];
    }
  }
  if (!spec.is_model()) return Op::Create(spec.name, params, {}, op);
  params["kind"] = spec.name;
  const Status s = Op::Load(args.get("--model"), params, op);
  if (s.ok()) return s;
  for (const auto& [name, what] : derived) {
    if (s.message().find(name) != std::string::npos) {
      return Status(s.code(), what + ", which the model cannot take: " + s.message());
    }
  }
  for (const ParamSpec& p : spec.params) {
    if (s.message().find("needs the model parameter " + p.name) != std::string::npos) {
      return Status(s.code(), s.message() + "; give it with " + ParamFlag(p.name));
    }
  }
  return s;
}

}  // namespace

int RunCommand(const Args& args) {
  const std::string word = args.words.size() > 1 ? args.words[1] : "";
  const OpSpec* spec = FindEntry(word);
  if (spec == nullptr) {
    return Fail(
        Status::InvalidArgument("run wants an op: " + EntryNames() + ", got '" + word + "'"));
  }
  std::set<std::string> allowed, required;
  RunFlags(*spec, &allowed, &required);
  Status s = CheckFlags(args, allowed, required, "run " + word);
  std::vector<npy::NpyArray> arrays(spec->inputs.size());
  std::vector<NamedTensor> inputs;
  Params call_params;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Op> op;
  if (s.ok()) s = FlagParams(args, *spec, ParamSpec::Kind::kCall, &call_params);
  std::vector<Output> paths;
  for (const char* flag : {"--out", "--weights-out"}) {
    if (args.has(flag)) paths.push_back({flag, args.get(flag), {}, nullptr});
  }
  if (s.ok()) s = CheckOutputPaths(paths);
  if (s.ok()) s = MakeEngine(args, EntryWord(*spec), &engine);
  for (size_t i = 0; s.ok() && i < spec->inputs.size(); ++i) {
    const std::string flag = TensorFlag(spec->inputs[i].name);
    if (!args.has(flag)) continue;
    inputs.emplace_back();
    s = ReadInput(args, flag, spec->inputs[i], &arrays[i], &inputs.back());
  }
  // Every input is checked, by the op's own checks, before any output is
  // allocated: bad input costs nothing, however large its outputs.
  std::vector<std::vector<int64_t>> shapes;
  if (s.ok()) s = MakeOp(args, *spec, inputs, &op);
  if (s.ok()) s = op->Check(*engine, inputs, call_params, &shapes);
  // The masked softmax's output is its weights: --weights-out writes it again.
  const size_t weights_at = spec->outputs.size() > 1 ? 1 : 0;
  const bool want_weights = args.has("--weights-out");
  if (s.ok()) s = CheckOutputSize("--out", shapes[0]);
  if (s.ok() && want_weights) s = CheckOutputSize("--weights-out", shapes[weights_at]);
  if (!s.ok()) return Fail(s);

  std::vector<std::vector<float>> data(shapes.size());
  std::vector<NamedTensor> outputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i > 0 && !want_weights) continue;
    data[i].resize(static_cast<size_t>(Elements(shapes[i])));
    outputs.emplace_back(spec->outputs[i].name, data[i].data(), shapes[i]);
  }
  s = op->Run(*engine, inputs, call_params, outputs);
  if (s.ok()) {
    std::vector<Output> landing = {{"--out", args.get("--out"), shapes[0], data[0].data()}};
    if (want_weights) {
      landing.push_back({"--weights-out", args.get("--weights-out"), shapes[weights_at],
                         data[weights_at].data()});
    }
    s = LandOutputs(landing);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

}  // namespace attnscore::cli
