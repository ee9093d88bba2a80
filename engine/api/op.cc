// Op: the catalogue's generic call. Binds a caller's named tensors and text
// parameters to an entry's spec (names, dtypes, ranks; the typed call makes
// every other check), and finds a model file's kind.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/op_impl.h"
#include "base/call_scope.h"
#include "io/safetensors.h"

namespace attnscore {
namespace {

Status Bad(const OpSpec& spec, const std::string& message) {
  return Status::InvalidArgument(spec.name + ": " + message);
}

template <class List>
std::string NamesOf(const List& list) {
  std::string names;
  for (const auto& item : list) names += (names.empty() ? "" : ", ") + item.name;
  return names.empty() ? "none" : names;
}

bool ParseInt(const std::string& text, int64_t* value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty();
}

bool ParseFloat(const std::string& text, float* value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return ec == std::errc() && ptr == end && !text.empty() && std::isfinite(*value);
}

// `params`' names all of `kind` in spec (or `extra`), each value of its type.
Status CheckParams(const OpSpec& spec, const Params& params, ParamSpec::Kind kind,
                   const std::string& extra = "") {
  for (const auto& [name, value] : params) {
    if (name == extra && !extra.empty()) continue;
    const ParamSpec* p = spec.param(name);
    if (p == nullptr || p->kind != kind) {
      std::string known;
      for (const ParamSpec& q : spec.params) {
        if (q.kind == kind) known += (known.empty() ? "" : ", ") + q.name;
      }
      return Bad(spec, "no " + std::string(kind == ParamSpec::Kind::kModel ? "model" : "call") +
                           " parameter '" + name + "'; it takes " +
                           (known.empty() ? "none" : known));
    }
    int64_t i = 0;
    float f = 0;
    const bool ok =
        p->type == ParamSpec::Type::kInt ? ParseInt(value, &i)
        : p->type == ParamSpec::Type::kFloat
            ? ParseFloat(value, &f)
            : std::find(p->choices.begin(), p->choices.end(), value) != p->choices.end();
    if (!ok) {
      std::string want = p->type == ParamSpec::Type::kInt     ? "an integer"
                         : p->type == ParamSpec::Type::kFloat ? "a finite number"
                                                              : "";
      for (const std::string& c : p->choices) want += (want.empty() ? "" : " or ") + c;
      return Bad(spec, "parameter " + name + " is '" + value + "'; want " + want);
    }
  }
  return Status::Ok();
}

// The model parameters as integers (a choice as its index among the
// choices): given, else their defaults; required ones missing are refused.
Status ModelSizes(const OpSpec& spec, const Params& params, internal::ModelSizes* sizes) {
  ATTNSCORE_RETURN_IF_ERROR(CheckParams(spec, params, ParamSpec::Kind::kModel, "kind"));
  for (const ParamSpec& p : spec.params) {
    if (p.kind != ParamSpec::Kind::kModel) continue;
    const auto given = params.find(p.name);
    const std::string text = given != params.end() ? given->second : p.default_value;
    if (text.empty()) return Bad(spec, "needs the model parameter " + p.name + " (" + p.doc + ")");
    int64_t value = 0;
    if (p.type == ParamSpec::Type::kChoice) {
      value = std::find(p.choices.begin(), p.choices.end(), text) - p.choices.begin();
    } else {
      ParseInt(text, &value);
    }
    (*sizes)[p.name] = value;
  }
  return Status::Ok();
}

// A model file's kind: params["kind"], else its metadata's "kind", else the
// model whose weights (all required ones, no unknown ones) its tensors are.
Status FileKind(const std::string& path, const Params& params,
                const std::vector<io::SafetensorsTensor>& tensors,
                const io::SafetensorsMetadata& metadata, const OpSpec** spec) {
  std::string kind;
  if (params.count("kind")) {
    kind = params.at("kind");
  } else if (metadata.count("kind")) {
    kind = metadata.at("kind");
  }
  std::string models;
  for (const OpSpec& entry : Catalogue()) {
    if (entry.is_model()) models += (models.empty() ? "" : ", ") + entry.name;
  }
  if (!kind.empty()) {
    *spec = FindOp(kind);
    if (*spec == nullptr || !(*spec)->is_model()) {
      return Status::InvalidArgument(path + ": kind '" + kind + "' is no model attnscore knows (" +
                                     models + ")");
    }
    return Status::Ok();
  }
  std::set<std::string> names;
  for (const io::SafetensorsTensor& t : tensors) names.insert(t.name);
  for (const OpSpec& entry : Catalogue()) {
    if (!entry.is_model()) continue;
    bool fits = true;
    for (const TensorSpec& w : entry.weights) fits = fits && (w.optional || names.count(w.name));
    for (const std::string& n : names) {
      fits = fits && std::any_of(entry.weights.begin(), entry.weights.end(),
                                 [&](const TensorSpec& w) { return w.name == n; });
    }
    if (fits) {
      *spec = &entry;
      return Status::Ok();
    }
  }
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  std::string known;
  for (const OpSpec& entry : Catalogue()) {
    if (entry.is_model()) known += "; " + entry.name + ": " + NamesOf(entry.weights);
  }
  return Status::InvalidArgument(path + ": tensors {" + listed +
                                 "} and no __metadata__ kind are no model attnscore knows (" +
                                 known.substr(2) + ")");
}

// A named tensor's rank within [1, kMaxRank] and its dtype one of `spec`'s.
Status CheckNamed(const OpSpec& op, const TensorSpec& spec, const NamedTensor& t) {
  if (std::find(spec.dtypes.begin(), spec.dtypes.end(), t.dtype) == spec.dtypes.end()) {
    std::string want;
    for (DataType d : spec.dtypes)
      want += (want.empty() ? "" : " or ") + std::string(DataTypeName(d));
    return Bad(op, spec.name + " is " + DataTypeName(t.dtype) + "; want " + want);
  }
  if (t.rank < 0 || t.rank > kMaxRank) {
    return Bad(op, spec.name + " has rank " + std::to_string(t.rank) + "; at most " +
                       std::to_string(kMaxRank));
  }
  if (t.dtype != DataType::kFloat32) {
    const int max_rank = static_cast<int>(spec.dims.size());
    if (t.rank < spec.min_rank || t.rank > max_rank) {
      std::string want;  // "(B,) or (B, N)"
      for (int rank = spec.min_rank; rank <= max_rank; ++rank) {
        std::string shape;
        for (int d = 0; d < rank; ++d) shape += (d ? ", " : "") + spec.dims[static_cast<size_t>(d)];
        want += (want.empty() ? "(" : " or (") + shape + (rank == 1 ? ",)" : ")");
      }
      return Bad(op, spec.name + " has rank " + std::to_string(t.rank) + "; want " + want);
    }
    int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      if (t.strides[d] != stride && t.dims[d] > 1) {
        return Bad(op, spec.name + " must be contiguous (C order)");
      }
      stride *= t.dims[d];
    }
  }
  return Status::Ok();
}

// `tensors` by the position of their name in `specs`: unknown and repeated
// names refused; `need` the names that must be there.
Status Match(const OpSpec& op, const std::vector<TensorSpec>& specs,
             const std::vector<NamedTensor>& tensors, const char* what,
             std::vector<const NamedTensor*>* matched) {
  matched->assign(specs.size(), nullptr);
  for (const NamedTensor& t : tensors) {
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const TensorSpec& s) { return s.name == t.name; });
    if (spec == specs.end()) {
      return Bad(op, "no " + std::string(what) + " '" + t.name + "'; its " + what + "s are " +
                         NamesOf(specs));
    }
    const size_t at = static_cast<size_t>(spec - specs.begin());
    if ((*matched)[at] != nullptr)
      return Bad(op, std::string(what) + " '" + t.name + "' is given twice");
    ATTNSCORE_RETURN_IF_ERROR(CheckNamed(op, *spec, t));
    (*matched)[at] = &t;
  }
  return Status::Ok();
}

Status BindInputs(const OpSpec& op, const std::vector<NamedTensor>& inputs, const Params& params,
                  BoundCall* call) {
  ATTNSCORE_RETURN_IF_ERROR(Match(op, op.inputs, inputs, "input", &call->inputs));
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (call->inputs[i] == nullptr && !op.inputs[i].optional) {
      return Bad(op, "needs input '" + op.inputs[i].name + "'");
    }
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckParams(op, params, ParamSpec::Kind::kCall));
  if (params.count("causal")) {
    const std::string& causal = params.at("causal");
    call->options.causal = causal == "top-left"       ? Causal::kTopLeft
                           : causal == "bottom-right" ? Causal::kBottomRight
                                                      : Causal::kNone;
  }
  if (params.count("scale")) ParseFloat(params.at("scale"), &call->options.scale);
  if (params.count("softcap")) ParseFloat(params.at("softcap"), &call->options.softcap);
  if (params.count("window_left")) ParseInt(params.at("window_left"), &call->options.window.left);
  if (params.count("window_right")) {
    ParseInt(params.at("window_right"), &call->options.window.right);
  }
  return Status::Ok();
}

// A float32 named tensor as a view of its memory; empty for none.
Tensor FloatView(const NamedTensor* t) {
  Tensor view;
  if (t == nullptr) return view;
  view.data = static_cast<float*>(t->data);
  view.rank = t->rank;
  for (int d = 0; d < kMaxRank; ++d) view.dims[d] = t->dims[d], view.strides[d] = t->strides[d];
  return view;
}

}  // namespace

ConstTensor BoundCall::Floats(size_t input) const { return FloatView(inputs[input]); }

ValidLens BoundCall::Lens(size_t input) const {
  const NamedTensor* t = inputs[input];
  if (t == nullptr) return ValidLens::None();
  const bool is64 = t->dtype == DataType::kInt64;
  if (t->rank == 1) {
    return is64 ? ValidLens::PerBatch(static_cast<const int64_t*>(t->data), t->dims[0])
                : ValidLens::PerBatch(static_cast<const int32_t*>(t->data), t->dims[0]);
  }
  return is64 ? ValidLens::PerQuery(static_cast<const int64_t*>(t->data), t->dims[0], t->dims[1])
              : ValidLens::PerQuery(static_cast<const int32_t*>(t->data), t->dims[0], t->dims[1]);
}

SequenceOffsets BoundCall::Offsets(size_t input) const {
  const NamedTensor* t = inputs[input];
  if (t == nullptr) return SequenceOffsets();
  return {t->data, t->dims[0], t->dtype == DataType::kInt64};
}

Op::Op(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Op::~Op() = default;

const OpSpec& Op::spec() const { return impl_->spec; }
const Params& Op::model_params() const { return impl_->model_params; }
const std::map<std::string, int64_t>& Op::fixed_dims() const { return impl_->fixed_dims; }

Status Op::Create(const std::string& name, const Params& params,
                  const std::vector<NamedTensor>& weights, std::unique_ptr<Op>* op) {
  if (op == nullptr) return Status::InvalidArgument("Op::Create: op is null");
  const OpSpec* spec = FindOp(name);
  if (spec == nullptr) {
    return Status::InvalidArgument("Op::Create: no entry '" + name + "'; the catalogue has " +
                                   NamesOf(Catalogue()));
  }
  return internal::Guarded("Op::Create", [&] {
    internal::ModelSizes sizes;
    ATTNSCORE_RETURN_IF_ERROR(ModelSizes(*spec, params, &sizes));
    if (params.count("kind"))
      return Bad(*spec, "the kind is the entry's name; no 'kind' parameter");
    std::vector<const NamedTensor*> matched;
    ATTNSCORE_RETURN_IF_ERROR(Match(*spec, spec->weights, weights, "weight", &matched));
    std::map<std::string, ConstTensor> views;
    for (size_t i = 0; i < matched.size(); ++i) {
      if (matched[i] != nullptr) views[spec->weights[i].name] = FloatView(matched[i]);
    }
    std::unique_ptr<Impl> impl;
    ATTNSCORE_RETURN_IF_ERROR(internal::MakeOpImpl(*spec, sizes, views, &impl));
    op->reset(new Op(std::move(impl)));
    return Status::Ok();
  });
}

Status Op::Load(const std::string& path, const Params& params, std::unique_ptr<Op>* op) {
  if (op == nullptr) return Status::InvalidArgument("Op::Load: op is null");
  return internal::Guarded("Op::Load", [&] {
    std::vector<io::SafetensorsTensor> tensors;
    io::SafetensorsMetadata metadata;
    ATTNSCORE_RETURN_IF_ERROR(io::ReadSafetensors(path, &tensors, &metadata));
    const OpSpec* spec = nullptr;
    ATTNSCORE_RETURN_IF_ERROR(FileKind(path, params, tensors, metadata, &spec));
    // The file's hyperparameters, where the caller gives none.
    Params merged = params;
    for (const ParamSpec& p : spec->params) {
      if (p.kind == ParamSpec::Kind::kModel && !merged.count(p.name) && metadata.count(p.name)) {
        merged[p.name] = metadata.at(p.name);
      }
    }
    internal::ModelSizes sizes;
    Status s = ModelSizes(*spec, merged, &sizes);
    if (!s.ok()) return Status(s.code(), path + ": " + s.message());
    std::unique_ptr<Impl> impl;
    ATTNSCORE_RETURN_IF_ERROR(internal::LoadOpImpl(*spec, path, sizes, &impl));
    op->reset(new Op(std::move(impl)));
    return Status::Ok();
  });
}

Status Op::Check(const Engine& engine, const std::vector<NamedTensor>& inputs, const Params& params,
                 std::vector<std::vector<int64_t>>* output_shapes) const {
  if (output_shapes == nullptr) return Bad(spec(), "output_shapes is null");
  BoundCall call;
  ATTNSCORE_RETURN_IF_ERROR(BindInputs(spec(), inputs, params, &call));
  return impl_->Check(engine, call, output_shapes);
}

Status Op::Run(const Engine& engine, const std::vector<NamedTensor>& inputs, const Params& params,
               const std::vector<NamedTensor>& outputs) const {
  BoundCall call;
  ATTNSCORE_RETURN_IF_ERROR(BindInputs(spec(), inputs, params, &call));
  std::vector<const NamedTensor*> matched;
  ATTNSCORE_RETURN_IF_ERROR(Match(spec(), spec().outputs, outputs, "output", &matched));
  if (matched[0] == nullptr) return Bad(spec(), "needs output '" + spec().outputs[0].name + "'");
  for (const NamedTensor* output : matched) call.outputs.push_back(FloatView(output));
  return impl_->Run(engine, call);
}

}  // namespace attnscore
