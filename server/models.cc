#include "models.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace attnscore::server {
namespace {

using nlohmann::json;

Status Bad(const std::string& message) { return Status::InvalidArgument(message); }

// The most scores (B · N · M, per head) one request may ask for: about 10 s
// of one core at D = 64. A request's bytes bound N and M, not their product,
// and a worker cannot be taken back once it computes.
constexpr int64_t kMaxScores = int64_t{1} << 32;

const char* ProtocolType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "FP32";
    case DataType::kInt32:
      return "INT32";
    case DataType::kInt64:
      return "INT64";
  }
  return "";
}

// The catalogue's tensors as the protocol lists them: a dim the model fixes
// has its size, any other -1.
std::vector<ProtocolTensor> Describe(const std::vector<TensorSpec>& specs,
                                     const std::map<std::string, int64_t>& fixed) {
  std::vector<ProtocolTensor> list;
  for (const TensorSpec& spec : specs) {
    ProtocolTensor t{spec.name, {}, {}, spec.optional};
    for (DataType type : spec.dtypes) t.datatypes.push_back(ProtocolType(type));
    for (const std::string& dim : spec.dims) {
      const auto size = fixed.find(dim);
      t.shape.push_back(size == fixed.end() ? -1 : size->second);
    }
    list.push_back(std::move(t));
  }
  return list;
}

int64_t Elements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// A request's input as the Op's named tensor: floats in place; integers
// (kept as int64 whatever their datatype) as int64.
NamedTensor Named(const InputTensor& input) {
  if (input.datatype == "FP32") return NamedTensor(input.name, input.View());
  return NamedTensor(input.name, input.IntData(), input.shape);
}

// A sidecar is a few parameters; a larger file is not one.
constexpr off_t kMaxSidecarBytes = 1 << 20;

// The text of `path` if it is a regular file (opened with O_NONBLOCK, so a
// FIFO or a device cannot hold the start up, then checked with fstat);
// *found false when there is no such file.
Status ReadSmallFile(const std::string& path, std::string* text, bool* found) {
  *found = false;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IoError(path + ": " + std::strerror(errno));
  }
  *found = true;
  struct stat info {};
  Status status;
  if (fstat(fd, &info) != 0) {
    status = Status::IoError(path + ": " + std::strerror(errno));
  } else if (!S_ISREG(info.st_mode)) {
    status = Bad(path + ": not a regular file");
  } else if (info.st_size > kMaxSidecarBytes) {
    status = Bad(path + ": " + std::to_string(info.st_size) + " bytes; a sidecar has at most " +
                 std::to_string(kMaxSidecarBytes));
  } else {
    text->resize(static_cast<size_t>(info.st_size));
    size_t got = 0;
    while (got < text->size()) {
      const ssize_t n = read(fd, text->data() + got, text->size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = Status::IoError(path + ": " + (n < 0 ? std::strerror(errno) : "file shrank"));
        break;
      }
      got += static_cast<size_t>(n);
    }
  }
  close(fd);
  return status;
}

// NAME.json beside NAME.safetensors, as model parameters; none when absent.
Status Sidecar(const std::string& path, Params* params) {
  std::string text;
  bool found = false;
  ATTNSCORE_RETURN_IF_ERROR(ReadSmallFile(path, &text, &found));
  if (!found) return Status::Ok();
  const json sidecar = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!sidecar.is_object()) return Bad(path + ": not a JSON object");
  for (const auto& item : sidecar.items()) {
    const json& value = item.value();
    if (value.is_number_integer()) {
      (*params)[item.key()] = std::to_string(value.get<int64_t>());
    } else if (value.is_string()) {
      (*params)[item.key()] = value.get<std::string>();
    } else {
      return Bad(path + ": '" + item.key() + "' is " + value.dump() +
                 "; want an integer or a string");
    }
  }
  return Status::Ok();
}

bool IsModelName(const std::string& name) {
  return !name.empty() && name.find_first_not_of('.') != std::string::npos &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
         });
}

// The model of folder/stem.safetensors, or why there is none.
Status LoadFile(const std::string& folder, const std::string& stem, std::shared_ptr<const Op>* op) {
  const std::string path = folder + "/" + stem + ".safetensors";
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return Status::IoError(path + ": " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) return Bad(path + ": not a regular file");
  Params params;
  ATTNSCORE_RETURN_IF_ERROR(Sidecar(folder + "/" + stem + ".json", &params));
  std::unique_ptr<Op> loaded;
  Status s = Op::Load(path, params, &loaded);
  if (!s.ok() && s.message().find("query_size") != std::string::npos &&
      !params.count("query_size")) {
    s = Status(s.code(), s.message() + "; give it in the file's __metadata__ or in " + folder +
                             "/" + stem + ".json as {\"query_size\": Dq}");
  }
  ATTNSCORE_RETURN_IF_ERROR(s);
  *op = std::move(loaded);
  return Status::Ok();
}

}  // namespace

Model::Model(std::string name, std::shared_ptr<const Op> op)
    : name_(std::move(name)),
      op_(std::move(op)),
      inputs_(Describe(op_->spec().inputs, op_->fixed_dims())),
      outputs_(Describe(op_->spec().outputs, op_->fixed_dims())) {}

Model::Model(std::string name, std::string not_ready_reason)
    : name_(std::move(name)), reason_(std::move(not_ready_reason)) {}

json Model::Metadata() const {
  auto specs = [](const std::vector<ProtocolTensor>& list) {
    json entries = json::array();
    for (const ProtocolTensor& spec : list) {
      json entry = {{"name", spec.name}, {"datatype", spec.datatypes[0]}, {"shape", spec.shape}};
      if (spec.datatypes.size() > 1) entry["parameters"] = {{"datatypes", spec.datatypes}};
      if (spec.optional) entry["optional"] = true;
      entries.push_back(std::move(entry));
    }
    return entries;
  };
  json parameters = {{"kind", op_->spec().name}};
  for (const auto& [key, value] : op_->model_params()) parameters[key] = value;
  return {{"name", name_},
          {"versions", {"1"}},
          {"platform", "attnscore"},
          {"parameters", std::move(parameters)},
          {"inputs", specs(inputs_)},
          {"outputs", specs(outputs_)}};
}

Status Model::Infer(const Engine& engine, const std::vector<InputTensor>& inputs,
                    const json& parameters, const std::vector<RequestedOutput>& requested,
                    int64_t max_output_elements, std::vector<OutputData>* outputs) const {
  std::vector<const InputTensor*> matched;
  std::vector<Want> wanted;
  Params params;
  ATTNSCORE_RETURN_IF_ERROR(Match(inputs, &matched));
  ATTNSCORE_RETURN_IF_ERROR(Select(requested, &wanted));
  ATTNSCORE_RETURN_IF_ERROR(CallParams(parameters, &params));
  std::vector<NamedTensor> named;
  for (const InputTensor* input : matched) {
    if (input != nullptr) named.push_back(Named(*input));
  }
  std::vector<std::vector<int64_t>> shapes;
  ATTNSCORE_RETURN_IF_ERROR(op_->Check(engine, named, params, &shapes));
  const std::vector<int64_t>& weights = shapes.back();  // the weights, or the softmax
  const int64_t scores = Elements(weights);
  if (scores > kMaxScores) {
    return Bad("the request asks for " + std::to_string(scores) + " scores (B * N * M" +
               (weights.size() == 4 ? " * heads" : "") + "); this server computes at most " +
               std::to_string(kMaxScores) + " in one request");
  }
  // The op always writes its first output; it is returned only when asked for.
  int64_t elements = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i == 0 || wanted[i] != Want::kNo) elements += Elements(shapes[i]);
  }
  if (elements > max_output_elements) {
    return Bad("the requested outputs hold " + std::to_string(elements) +
               " floats; this server returns at most " + std::to_string(max_output_elements) +
               " (a quarter of --max-request-bytes)");
  }
  std::vector<std::vector<float>> data(shapes.size());
  std::vector<NamedTensor> views;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i != 0 && wanted[i] == Want::kNo) continue;
    data[i].resize(static_cast<size_t>(Elements(shapes[i])));
    views.emplace_back(outputs_[i].name, data[i].data(), shapes[i]);
  }
  ATTNSCORE_RETURN_IF_ERROR(op_->Run(engine, named, params, views));
  outputs->clear();
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (wanted[i] == Want::kNo) continue;
    outputs->push_back(
        {outputs_[i].name, shapes[i], std::move(data[i]), wanted[i] == Want::kBinary});
  }
  return Status::Ok();
}

Status Model::CallParams(const json& parameters, Params* params) const {
  if (parameters.is_null()) return Status::Ok();
  for (const auto& item : parameters.items()) {
    if (item.key() == "binary_data_output") continue;  // the protocol's own
    const ParamSpec* spec = op_->spec().param(item.key());
    if (spec == nullptr || spec->kind != ParamSpec::Kind::kCall) {
      std::string known;
      for (const ParamSpec& p : op_->spec().params) {
        if (p.kind == ParamSpec::Kind::kCall) known += ", " + p.name;
      }
      return Bad("model '" + name_ + "' takes no parameter '" + item.key() +
                 "'; it takes binary_data_output" + known);
    }
    const json& value = item.value();
    if (value.is_string()) {
      (*params)[item.key()] = value.get<std::string>();
    } else if (value.is_number()) {
      (*params)[item.key()] = value.dump();
    } else {
      return Bad("parameter '" + item.key() + "' is " + value.dump() +
                 "; want a string or a number");
    }
  }
  return Status::Ok();
}

Status Model::Match(const std::vector<InputTensor>& inputs,
                    std::vector<const InputTensor*>* matched) const {
  matched->assign(inputs_.size(), nullptr);
  std::string expected;
  for (const ProtocolTensor& spec : inputs_) expected += (expected.empty() ? "" : ", ") + spec.name;
  for (const InputTensor& input : inputs) {
    const auto spec = std::find_if(inputs_.begin(), inputs_.end(),
                                   [&](const ProtocolTensor& s) { return s.name == input.name; });
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
                                   [&](const ProtocolTensor& s) { return s.name == name; });
    if (spec == outputs_.end()) {
      std::string known;
      for (const ProtocolTensor& s : outputs_) known += (known.empty() ? "" : ", ") + s.name;
      return Bad("model '" + name_ + "' has no output '" + name + "'; its outputs are " + known);
    }
    (*wanted)[spec - outputs_.begin()] = output.binary ? Want::kBinary : Want::kJson;
  }
  return Status::Ok();
}

std::shared_ptr<const Model> MakeModel(const std::string& folder, const std::string& name) {
  for (const OpSpec& spec : Catalogue()) {
    // A cache's state has no place in a request: stateful entries are not served.
    if (spec.name != name || spec.is_model() || spec.stateful) continue;
    std::unique_ptr<Op> op;
    if (Status s = Op::Create(spec.name, {}, {}, &op); !s.ok()) {
      return std::make_shared<Model>(name, s.message());
    }
    return std::make_shared<Model>(spec.name, std::move(op));
  }
  const std::string path = folder + "/" + name + ".safetensors";
  struct stat info {};
  if (folder.empty() || !IsModelName(name) || lstat(path.c_str(), &info) != 0) return nullptr;
  std::shared_ptr<const Op> op;
  if (Status s = LoadFile(folder, name, &op); !s.ok()) {
    return std::make_shared<Model>(name, s.message());
  }
  return std::make_shared<Model>(name, std::move(op));
}

Status LoadModels(const std::string& folder, ModelMap* models) {
  models->clear();
  for (const OpSpec& spec : Catalogue()) {
    if (spec.is_model() || spec.stateful) continue;
    (*models)[spec.name] = MakeModel("", spec.name);
  }
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
      // Not listed at all: no URL can name it.
      std::fprintf(stderr,
                   "attnscore-server: skipping %s/%s%s: a model name takes letters, digits, "
                   "'_', '-' and '.' only, not all dots\n",
                   folder.c_str(), stem.c_str(), suffix.c_str());
      continue;
    }
    if (models->count(stem) != 0) {
      std::fprintf(stderr, "attnscore-server: %s/%s%s is not served: '%s' is a built-in's name\n",
                   folder.c_str(), stem.c_str(), suffix.c_str(), stem.c_str());
      continue;
    }
    std::shared_ptr<const Model> model = MakeModel(folder, stem);
    if (model == nullptr) continue;  // gone since the folder was read
    (*models)[stem] = model;
    if (!model->ready()) {
      std::fprintf(stderr, "attnscore-server: model '%s' is not ready: %s\n", stem.c_str(),
                   model->not_ready_reason().c_str());
    }
  }
  return Status::Ok();
}

}  // namespace attnscore::server
