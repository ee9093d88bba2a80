#include "models.h"

#include <dirent.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>

namespace attnscore::server {
namespace {

using nlohmann::json;

Status Bad(const std::string& message) { return Status::InvalidArgument(message); }

const std::vector<std::string> kFloat = {"FP32"};
const std::vector<std::string> kInts = {"INT32", "INT64"};
const std::vector<int64_t> kFree3 = {-1, -1, -1};

TensorSpec LensSpec() { return {"valid_lens", kInts, {-1, -1}, /*optional=*/true}; }

int64_t Elements(const std::array<int64_t, 3>& dims) { return dims[0] * dims[1] * dims[2]; }

std::vector<int64_t> Dims(const std::array<int64_t, 3>& dims) {
  return {dims[0], dims[1], dims[2]};
}

Status CheckOutputSize(int64_t elements, int64_t max_output_elements) {
  if (elements > max_output_elements) {
    return Bad("the requested outputs hold " + std::to_string(elements) +
               " floats; this server returns at most " + std::to_string(max_output_elements) +
               " (a quarter of --max-request-bytes)");
  }
  return Status::Ok();
}

// The most scores (B · N · M) one request may ask for: about 10 s of one
// core at D = 64. A request's bytes bound N and M, not their product, and a
// worker cannot be taken back once it computes.
constexpr int64_t kMaxScores = int64_t{1} << 32;

// An attention op or model: inputs queries, keys, values, valid_lens;
// outputs output and, on request, attention_weights.
class AttentionModel : public Model {
 public:
  using CheckFn = std::function<Status(const Engine&, ConstTensor, ConstTensor, ConstTensor,
                                       const ValidLens&, OutputShapes*)>;
  using RunFn = std::function<Status(const Engine&, ConstTensor, ConstTensor, ConstTensor,
                                     const ValidLens&, Tensor, Tensor)>;

  AttentionModel(std::string name, std::string kind, std::vector<int64_t> query_shape,
                 std::vector<int64_t> key_shape, std::vector<int64_t> value_shape,
                 std::vector<int64_t> out_shape, CheckFn check, RunFn run)
      : Model(std::move(name), std::move(kind),
              {{"queries", kFloat, std::move(query_shape)},
               {"keys", kFloat, std::move(key_shape)},
               {"values", kFloat, std::move(value_shape)},
               LensSpec()},
              {{"output", kFloat, std::move(out_shape)}, {"attention_weights", kFloat, kFree3}}),
        check_(std::move(check)),
        run_(std::move(run)) {}

  Status Infer(const Engine& engine, const std::vector<InputTensor>& inputs,
               const std::vector<RequestedOutput>& requested, int64_t max_output_elements,
               std::vector<OutputData>* outputs) const override {
    std::vector<const InputTensor*> in;
    std::vector<Want> wanted;
    ValidLens lens;
    Status s = Bind(inputs, requested, /*lens_input=*/3, &in, &wanted, &lens);
    if (!s.ok()) return s;
    const ConstTensor q = in[0]->View(), k = in[1]->View(), v = in[2]->View();
    OutputShapes shapes;
    if (!(s = check_(engine, q, k, v, lens, &shapes)).ok()) return s;
    const int64_t scores = Elements(shapes.attention_weights);
    if (scores > kMaxScores) {
      return Bad("the request asks for " + std::to_string(scores) +
                 " scores (B * N * M); this server computes at most " + std::to_string(kMaxScores) +
                 " in one request");
    }
    const bool want_weights = wanted[1] != Want::kNo;
    const int64_t weights = want_weights ? Elements(shapes.attention_weights) : 0;
    s = CheckOutputSize(Elements(shapes.out) + weights, max_output_elements);
    if (!s.ok()) return s;

    // The op always writes `output`; it is returned only when asked for.
    std::vector<float> out(Elements(shapes.out)), attention(weights);
    const auto& o = shapes.out;
    const auto& w = shapes.attention_weights;
    Tensor weights_view;
    if (want_weights) weights_view = Tensor(attention.data(), {w[0], w[1], w[2]});
    s = run_(engine, q, k, v, lens, Tensor(out.data(), {o[0], o[1], o[2]}), weights_view);
    if (!s.ok()) return s;
    outputs->clear();
    if (wanted[0] != Want::kNo) {
      outputs->push_back({"output", Dims(o), std::move(out), wanted[0] == Want::kBinary});
    }
    if (want_weights) {
      outputs->push_back(
          {"attention_weights", Dims(w), std::move(attention), wanted[1] == Want::kBinary});
    }
    return Status::Ok();
  }

 private:
  CheckFn check_;
  RunFn run_;
};

class MaskedSoftmaxModel : public Model {
 public:
  MaskedSoftmaxModel()
      : Model("masked_softmax", "masked_softmax", {{"x", kFloat, kFree3}, LensSpec()},
              {{"output", kFloat, kFree3}}) {}

  Status Infer(const Engine& engine, const std::vector<InputTensor>& inputs,
               const std::vector<RequestedOutput>& requested, int64_t max_output_elements,
               std::vector<OutputData>* outputs) const override {
    std::vector<const InputTensor*> in;
    std::vector<Want> wanted;
    ValidLens lens;
    Status s = Bind(inputs, requested, /*lens_input=*/1, &in, &wanted, &lens);
    if (!s.ok()) return s;
    const ConstTensor x = in[0]->View();
    OutputShapes shapes;
    if (!(s = engine.CheckMaskedSoftmax(x, lens, &shapes)).ok()) return s;
    if (!(s = CheckOutputSize(Elements(shapes.out), max_output_elements)).ok()) return s;
    std::vector<float> y(Elements(shapes.out));
    const auto& d = shapes.out;
    s = engine.MaskedSoftmax(x, lens, Tensor(y.data(), {d[0], d[1], d[2]}));
    if (!s.ok()) return s;
    outputs->clear();
    outputs->push_back({"output", Dims(d), std::move(y), wanted[0] == Want::kBinary});
    return Status::Ok();
  }
};

std::unique_ptr<Model> DotProductModel() {
  return std::make_unique<AttentionModel>(
      "dot_product_attention", "dot_product_attention", kFree3, kFree3, kFree3, kFree3,
      [](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
         OutputShapes* shapes) { return engine.CheckDotProductAttention(q, k, v, lens, shapes); },
      [](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
         Tensor out,
         Tensor weights) { return engine.DotProductAttention(q, k, v, lens, out, weights); });
}

// A model class (AdditiveAttention, ConcatAttention) served under `name`;
// the AttentionModel owns it through the shared pointer its functions hold.
template <typename Net>
std::unique_ptr<Model> NetModel(const std::string& name, const std::string& kind,
                                std::shared_ptr<const Net> net, std::vector<int64_t> query_shape,
                                std::vector<int64_t> key_shape, std::vector<int64_t> value_shape,
                                std::vector<int64_t> out_shape) {
  return std::make_unique<AttentionModel>(
      name, kind, std::move(query_shape), std::move(key_shape), std::move(value_shape),
      std::move(out_shape),
      [net](const Engine&, ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens,
            OutputShapes* shapes) { return net->Check(q, k, v, lens, shapes); },
      [net](const Engine& engine, ConstTensor q, ConstTensor k, ConstTensor v,
            const ValidLens& lens, Tensor out,
            Tensor weights) { return net->Forward(engine, q, k, v, lens, out, weights); });
}

// The tensor names in a .safetensors header: an 8-byte little-endian length,
// then that many bytes of JSON whose keys (but "__metadata__") are tensors.
// The header is read whole only when under 100 MB (the format's own cap).
Status TensorNames(const std::string& path, std::set<std::string>* names) {
  std::ifstream file(path, std::ios::binary);
  unsigned char size_bytes[8];
  if (!file.read(reinterpret_cast<char*>(size_bytes), 8)) {
    return Status::IoError(path + ": cannot read a .safetensors header");
  }
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = size << 8 | size_bytes[i];
  if (size > 100'000'000) return Bad(path + ": header of " + std::to_string(size) + " bytes");
  std::string header(size, '\0');
  if (!file.read(header.data(), static_cast<std::streamsize>(size))) {
    return Bad(path + ": the header is shorter than its length says");
  }
  const json parsed = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return Bad(path + ": the header is not a JSON object");
  for (const auto& item : parsed.items()) {
    if (item.key() != "__metadata__") names->insert(item.key());
  }
  return Status::Ok();
}

// NAME.json beside NAME.safetensors, or an empty object when there is none.
Status Sidecar(const std::string& path, json* sidecar) {
  std::ifstream file(path);
  if (!file) {
    *sidecar = json::object();
    return Status::Ok();
  }
  *sidecar = json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (!sidecar->is_object()) return Bad(path + ": not a JSON object");
  for (const auto& item : sidecar->items()) {
    if (item.key() != "query_size") {
      return Bad(path + ": unknown key '" + item.key() + "'; the sidecar takes query_size");
    }
  }
  return Status::Ok();
}

Status LoadFile(const std::string& folder, const std::string& stem, std::unique_ptr<Model>* model) {
  const std::string path = folder + "/" + stem + ".safetensors";
  std::set<std::string> names;
  Status s = TensorNames(path, &names);
  if (!s.ok()) return s;
  json sidecar;
  const std::string sidecar_path = folder + "/" + stem + ".json";
  if (!(s = Sidecar(sidecar_path, &sidecar)).ok()) return s;

  const std::set<std::string> additive = {"W_q.weight", "W_k.weight", "w_v.weight"};
  const std::set<std::string> concat = {"attn.weight", "attn.bias", "attn_combine.weight",
                                        "attn_combine.bias"};
  if (names == additive) {
    std::unique_ptr<AdditiveAttention> net;
    if (!(s = AdditiveAttention::Load(path, &net)).ok()) return s;
    std::shared_ptr<const AdditiveAttention> shared(std::move(net));
    *model = NetModel(stem, "additive", shared, {-1, -1, shared->query_size()},
                      {-1, -1, shared->key_size()}, kFree3, kFree3);
    return Status::Ok();
  }
  if (names == concat) {
    const auto query_size = sidecar.find("query_size");
    if (query_size == sidecar.end() || !query_size->is_number_integer() ||
        query_size->get<int64_t>() <= 0) {
      return Bad(path + " is concat attention: " + sidecar_path +
                 " must give its query size, {\"query_size\": Dq}");
    }
    std::unique_ptr<ConcatAttention> net;
    if (!(s = ConcatAttention::Load(path, query_size->get<int64_t>(), &net)).ok()) return s;
    std::shared_ptr<const ConcatAttention> shared(std::move(net));
    *model = NetModel(
        stem, "concat", shared, {-1, -1, shared->query_size()}, {-1, -1, shared->key_size()},
        {-1, shared->value_rows(), shared->value_size()}, {-1, -1, shared->output_size()});
    return Status::Ok();
  }
  std::string listed;
  for (const std::string& name : names) listed += (listed.empty() ? "" : ", ") + name;
  return Bad(path + ": tensors {" + listed +
             "} are no model this server knows (additive: W_q.weight, W_k.weight, w_v.weight; "
             "concat: attn.weight, attn.bias, attn_combine.weight, attn_combine.bias)");
}

bool IsModelName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

}  // namespace

json Model::Metadata() const {
  auto specs = [](const std::vector<TensorSpec>& list) {
    json entries = json::array();
    for (const TensorSpec& spec : list) {
      json entry = {{"name", spec.name}, {"datatype", spec.datatypes[0]}, {"shape", spec.shape}};
      if (spec.datatypes.size() > 1) entry["parameters"] = {{"datatypes", spec.datatypes}};
      if (spec.optional) entry["optional"] = true;
      entries.push_back(std::move(entry));
    }
    return entries;
  };
  return {{"name", name_},
          {"versions", {"1"}},
          {"platform", "attnscore"},
          {"parameters", {{"kind", kind_}}},
          {"inputs", specs(inputs_)},
          {"outputs", specs(outputs_)}};
}

Status Model::Bind(const std::vector<InputTensor>& inputs,
                   const std::vector<RequestedOutput>& requested, size_t lens_input,
                   std::vector<const InputTensor*>* matched, std::vector<Want>* wanted,
                   ValidLens* lens) const {
  Status s = Match(inputs, matched);
  if (s.ok()) s = Select(requested, wanted);
  if (s.ok() && (*matched)[lens_input] != nullptr) s = (*matched)[lens_input]->Lens(lens);
  return s;
}

Status Model::Match(const std::vector<InputTensor>& inputs,
                    std::vector<const InputTensor*>* matched) const {
  matched->assign(inputs_.size(), nullptr);
  std::string expected;
  for (const TensorSpec& spec : inputs_) expected += (expected.empty() ? "" : ", ") + spec.name;
  for (const InputTensor& input : inputs) {
    const auto spec = std::find_if(inputs_.begin(), inputs_.end(),
                                   [&](const TensorSpec& s) { return s.name == input.name; });
    if (spec == inputs_.end()) {
      return Bad("model '" + name_ + "' has no input '" + input.name + "'; its inputs are " +
                 expected);
    }
    if (std::find(spec->datatypes.begin(), spec->datatypes.end(), input.datatype) ==
        spec->datatypes.end()) {
      std::string want;
      for (const std::string& d : spec->datatypes) want += (want.empty() ? "" : " or ") + d;
      return Bad("input '" + input.name + "' has datatype " + input.datatype + "; want " + want);
    }
    (*matched)[spec - inputs_.begin()] = &input;
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if ((*matched)[i] == nullptr && !inputs_[i].optional) {
      return Bad("model '" + name_ + "' needs input '" + inputs_[i].name + "'");
    }
  }
  return Status::Ok();
}

Status Model::Select(const std::vector<RequestedOutput>& requested,
                     std::vector<Want>* wanted) const {
  wanted->assign(outputs_.size(), Want::kNo);
  if (requested.empty()) {
    (*wanted)[0] = Want::kJson;
    return Status::Ok();
  }
  for (const RequestedOutput& output : requested) {
    const std::string& name = output.name.empty() ? outputs_[0].name : output.name;
    const auto spec = std::find_if(outputs_.begin(), outputs_.end(),
                                   [&](const TensorSpec& s) { return s.name == name; });
    if (spec == outputs_.end()) {
      std::string known;
      for (const TensorSpec& s : outputs_) known += (known.empty() ? "" : ", ") + s.name;
      return Bad("model '" + name_ + "' has no output '" + name + "'; its outputs are " + known);
    }
    (*wanted)[spec - outputs_.begin()] = output.binary ? Want::kBinary : Want::kJson;
  }
  return Status::Ok();
}

Status LoadModels(const std::string& folder, ModelMap* models) {
  models->clear();
  (*models)["masked_softmax"] = std::make_unique<MaskedSoftmaxModel>();
  (*models)["dot_product_attention"] = DotProductModel();
  if (folder.empty()) return Status::Ok();
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) {
    return Status::IoError("--models " + folder + ": " + std::strerror(errno));
  }
  std::vector<std::string> stems;
  const std::string suffix = ".safetensors";
  while (const dirent* entry = readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.size() > suffix.size() &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0) {
      stems.push_back(file.substr(0, file.size() - suffix.size()));
    }
  }
  closedir(dir);
  std::sort(stems.begin(), stems.end());
  for (const std::string& stem : stems) {
    if (!IsModelName(stem)) {
      return Bad(folder + "/" + stem + suffix +
                 ": a model name takes letters, digits, '_', '-' and '.' only");
    }
    if (models->count(stem) != 0) {
      return Bad(folder + "/" + stem + suffix + ": '" + stem + "' is a built-in model's name");
    }
    std::unique_ptr<Model> model;
    Status s = LoadFile(folder, stem, &model);
    if (!s.ok()) return s;
    (*models)[stem] = std::move(model);
  }
  return Status::Ok();
}

}  // namespace attnscore::server
