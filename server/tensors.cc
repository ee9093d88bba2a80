#include "tensors.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

namespace attnscore::server {
namespace {

using nlohmann::json;

Status Bad(const std::string& message) { return Status::InvalidArgument(message); }

// The element count of `shape`, saturated at 2^50 (more than any request
// holds), so that it never overflows.
uint64_t ElementCount(const std::vector<int64_t>& shape) {
  constexpr uint64_t kCap = uint64_t{1} << 50;
  uint64_t count = 1;
  for (int64_t dim : shape) {
    const uint64_t d = static_cast<uint64_t>(dim);
    if (d == 0) return 0;
    count = count > kCap / d ? kCap : count * d;
  }
  return count;
}

// Appends the numbers of `data`, row-major, to `*flat`. `data` is the flat
// array, or arrays nested as `shape` from dim `depth` on.
Status Flatten(const json& data, const std::vector<int64_t>& shape, size_t depth,
               const std::string& name, std::vector<const json*>* flat) {
  for (const json& item : data) {
    if (item.is_array()) {
      if (depth + 1 >= shape.size() || static_cast<int64_t>(item.size()) != shape[depth + 1]) {
        return Bad("input '" + name + "': nested data does not follow its shape " +
                   ShapeText(shape));
      }
      Status s = Flatten(item, shape, depth + 1, name, flat);
      if (!s.ok()) return s;
    } else {
      flat->push_back(&item);
    }
  }
  return Status::Ok();
}

Status ToFloat(const json& number, const std::string& name, size_t index, float* value) {
  if (!number.is_number()) {
    return Bad("input '" + name + "': data[" + std::to_string(index) + "] is " +
               number.type_name() + ", not a number");
  }
  const double d = number.get<double>();
  const float f = static_cast<float>(d);
  if (!std::isfinite(f)) {
    return Bad("input '" + name + "': data[" + std::to_string(index) + "] = " + number.dump() +
               " is outside float32's range");
  }
  *value = f;
  return Status::Ok();
}

Status ToInt(const json& number, const std::string& name, size_t index, bool is_int32,
             int64_t* value) {
  const std::string where = "input '" + name + "': data[" + std::to_string(index) + "]";
  if (!number.is_number_integer()) {
    return Bad(where + " is " + (number.is_number() ? number.dump() : number.type_name()) +
               ", not an integer");
  }
  const int64_t low =
      is_int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  const int64_t high =
      is_int32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  if (number.is_number_unsigned() && number.get<uint64_t>() > static_cast<uint64_t>(high)) {
    return Bad(where + " = " + number.dump() + " does not fit " + (is_int32 ? "INT32" : "INT64"));
  }
  const int64_t v = number.get<int64_t>();
  if (v < low || v > high) {
    return Bad(where + " = " + number.dump() + " does not fit " + (is_int32 ? "INT32" : "INT64"));
  }
  *value = v;
  return Status::Ok();
}

// Reads `tensor`'s data from the next `bytes` of `*binary`, advancing it.
Status ReadBinary(int64_t bytes, std::string_view* binary, InputTensor* tensor) {
  ATTNSCORE_RETURN_IF_ERROR(CheckRawSize(*tensor, static_cast<uint64_t>(bytes),
                                         "binary_data_size " + std::to_string(bytes)));
  if (static_cast<uint64_t>(bytes) > binary->size()) {
    return Bad("input '" + tensor->name + "' has binary_data_size " + std::to_string(bytes) +
               " but only " + std::to_string(binary->size()) + " bytes of binary data are left");
  }
  ReadRaw(binary->data(), tensor);
  binary->remove_prefix(bytes);
  return Status::Ok();
}

Status ParseInput(const json& entry, size_t position, std::string_view* binary,
                  InputTensor* tensor) {
  const std::string where = "inputs[" + std::to_string(position) + "]";
  if (!entry.is_object()) return Bad(where + " is not an object");
  const auto name = entry.find("name");
  if (name == entry.end() || !name->is_string()) return Bad(where + " has no string 'name'");
  tensor->name = name->get<std::string>();
  const std::string label = "input '" + tensor->name + "'";

  const auto datatype = entry.find("datatype");
  if (datatype == entry.end() || !datatype->is_string()) {
    return Bad(label + " has no string 'datatype'");
  }
  tensor->datatype = datatype->get<std::string>();
  ATTNSCORE_RETURN_IF_ERROR(CheckDatatype(*tensor));

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) return Bad(label + " has no 'shape' array");
  if (shape->size() > static_cast<size_t>(kMaxRank)) {
    return Bad(label + " has " + std::to_string(shape->size()) + " dims; at most " +
               std::to_string(kMaxRank) + " are taken");
  }
  for (const json& dim : *shape) {
    // At most 2^62: a dim an int64 holds with room for the products of
    // the checks that follow.
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0 ||
        (dim.is_number_unsigned() && dim.get<uint64_t>() > (uint64_t{1} << 62))) {
      return Bad(label + " has shape " + shape->dump() +
                 "; dims must be integers from 0 to 2^62 (4611686018427387904)");
    }
    tensor->shape.push_back(dim.get<int64_t>());
  }

  const auto parameters = entry.find("parameters");
  if (parameters != entry.end()) {
    if (!parameters->is_object()) return Bad(label + ": 'parameters' is not an object");
    const auto size = parameters->find("binary_data_size");
    if (size != parameters->end()) {
      if (!size->is_number_integer() || size->get<int64_t>() < 0) {
        return Bad(label + ": binary_data_size must be an integer >= 0");
      }
      if (entry.contains("data")) return Bad(label + " has both 'data' and binary_data_size");
      return ReadBinary(size->get<int64_t>(), binary, tensor);
    }
  }
  const auto data = entry.find("data");
  if (data == entry.end() || !data->is_array()) return Bad(label + " has no 'data' array");
  std::vector<const json*> flat;
  flat.reserve(data->size());
  if (tensor->shape.empty() && !data->empty() && data->front().is_array()) {
    return Bad(label + ": nested data does not follow its shape []");
  }
  if (!data->empty() && data->front().is_array() &&
      static_cast<int64_t>(data->size()) != tensor->shape[0]) {
    return Bad(label + ": nested data does not follow its shape " + ShapeText(tensor->shape));
  }
  Status s = Flatten(*data, tensor->shape, 0, tensor->name, &flat);
  if (!s.ok()) return s;
  ATTNSCORE_RETURN_IF_ERROR(CheckElementCount(*tensor, flat.size()));
  if (tensor->datatype == "FP32") {
    tensor->floats.resize(flat.size());
    for (size_t i = 0; i < flat.size(); ++i) {
      s = ToFloat(*flat[i], tensor->name, i, &tensor->floats[i]);
      if (!s.ok()) return s;
    }
  } else {
    const bool is_int32 = tensor->datatype == "INT32";
    tensor->ints.resize(flat.size());
    for (size_t i = 0; i < flat.size(); ++i) {
      s = ToInt(*flat[i], tensor->name, i, is_int32, &tensor->ints[i]);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckDatatype(const InputTensor& tensor) {
  if (tensor.datatype == "FP32" || tensor.datatype == "INT32" || tensor.datatype == "INT64") {
    return Status::Ok();
  }
  return Bad("input '" + tensor.name + "' has datatype '" + tensor.datatype +
             "'; want FP32, INT32 or INT64");
}

Status CheckElementCount(const InputTensor& tensor, uint64_t count) {
  if (ElementCount(tensor.shape) == count) return Status::Ok();
  return Bad("input '" + tensor.name + "' has shape " + ShapeText(tensor.shape) + " but " +
             std::to_string(count) + " data elements");
}

Status CheckRawSize(const InputTensor& tensor, uint64_t bytes, const std::string& source) {
  const uint64_t expected = ElementCount(tensor.shape) * (tensor.datatype == "INT64" ? 8 : 4);
  if (expected == bytes) return Status::Ok();
  return Bad("input '" + tensor.name + "' has shape " + ShapeText(tensor.shape) + " and datatype " +
             tensor.datatype + " (" + std::to_string(expected) + " bytes) but " + source);
}

void ReadRaw(const char* data, InputTensor* tensor) {
  const uint64_t count = ElementCount(tensor->shape);
  if (tensor->datatype == "FP32") {
    if (count > 0 && reinterpret_cast<uintptr_t>(data) % alignof(float) == 0) {
      tensor->borrowed = reinterpret_cast<const float*>(data);
      return;
    }
    tensor->floats.resize(count);
    std::memcpy(tensor->floats.data(), data, count * sizeof(float));
  } else if (tensor->datatype == "INT32") {
    std::vector<int32_t> values(count);
    std::memcpy(values.data(), data, count * sizeof(int32_t));
    tensor->ints.assign(values.begin(), values.end());
  } else {
    tensor->ints.resize(count);
    std::memcpy(tensor->ints.data(), data, count * sizeof(int64_t));
  }
}

// An empty tensor's data: the engine takes a null pointer for a missing
// tensor, so one with a zero dim points here (nothing is read).
const float kNoFloats[1] = {0.0f};
const int64_t kNoInts[1] = {0};

const int64_t* InputTensor::IntData() const { return ints.empty() ? kNoInts : ints.data(); }

ConstTensor InputTensor::View() const {
  ConstTensor view;
  view.data = borrowed != nullptr ? borrowed : floats.empty() ? kNoFloats : floats.data();
  view.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.dims[d] = shape[d];
    view.strides[d] = stride;
    stride *= shape[d] == 0 ? 1 : shape[d];
  }
  return view;
}

Status InputTensor::Lens(ValidLens* lens) const {
  if (datatype != "INT32" && datatype != "INT64") {
    return Bad("input '" + name + "' has datatype " + datatype + "; want INT32 or INT64");
  }
  if (shape.size() == 1) {
    *lens = ValidLens::PerBatch(IntData(), shape[0]);
  } else if (shape.size() == 2) {
    *lens = ValidLens::PerQuery(IntData(), shape[0], shape[1]);
  } else {
    return Bad("input '" + name + "' has shape " + ShapeText(shape) +
               " but must be [B], one length per batch entry, or [B, N], one per query");
  }
  return Status::Ok();
}

Status ParseInputs(const json& request, std::string_view binary, std::vector<InputTensor>* inputs) {
  if (!request.is_object()) return Bad("the request body is not a JSON object");
  const auto entries = request.find("inputs");
  if (entries == request.end() || !entries->is_array()) {
    return Bad("the request has no 'inputs' array");
  }
  std::set<std::string> seen;
  inputs->assign(entries->size(), InputTensor());
  for (size_t i = 0; i < entries->size(); ++i) {
    Status s = ParseInput((*entries)[i], i, &binary, &(*inputs)[i]);
    if (!s.ok()) return s;
    if (!seen.insert((*inputs)[i].name).second) {
      return Bad("input '" + (*inputs)[i].name + "' is given twice");
    }
  }
  if (!binary.empty()) {
    return Bad(std::to_string(binary.size()) +
               " bytes of binary data follow the JSON that no input's binary_data_size claims");
  }
  return Status::Ok();
}

Status ParseRequestedOutputs(const json& request, std::vector<RequestedOutput>* outputs) {
  outputs->clear();
  bool all_binary = false;
  const auto parameters = request.find("parameters");
  if (parameters != request.end()) {
    if (!parameters->is_object()) return Bad("the request's 'parameters' is not an object");
    const auto flag = parameters->find("binary_data_output");
    if (flag != parameters->end()) {
      if (!flag->is_boolean()) return Bad("binary_data_output must be true or false");
      all_binary = flag->get<bool>();
    }
  }
  const auto entries = request.find("outputs");
  if (entries == request.end()) {
    if (all_binary) outputs->push_back({"", true});  // the default output, as binary
    return Status::Ok();
  }
  if (!entries->is_array()) return Bad("'outputs' is not an array");
  for (const json& entry : *entries) {
    const auto name = entry.is_object() ? entry.find("name") : entry.end();
    if (!entry.is_object() || name == entry.end() || !name->is_string()) {
      return Bad("'outputs' entries must be objects with a string 'name'");
    }
    RequestedOutput output{name->get<std::string>(), all_binary};
    const auto options = entry.find("parameters");
    if (options != entry.end()) {
      const auto flag = options->is_object() ? options->find("binary_data") : options->end();
      if (!options->is_object() || (flag != options->end() && !flag->is_boolean())) {
        return Bad("output '" + output.name + "': parameters.binary_data must be true or false");
      }
      if (flag != options->end()) output.binary = flag->get<bool>();
    }
    outputs->push_back(std::move(output));
  }
  return Status::Ok();
}

std::string AnswerBody(json answer, const std::vector<OutputData>& outputs, size_t* json_bytes) {
  json entries = json::array();
  size_t binary_bytes = 0;
  for (const OutputData& output : outputs) {
    json entry = {{"name", output.name}, {"datatype", "FP32"}, {"shape", output.dims}};
    if (output.binary) {
      const size_t bytes = output.data.size() * sizeof(float);
      entry["parameters"] = {{"binary_data_size", bytes}};
      binary_bytes += bytes;
    } else {
      json values = json::array();
      values.get_ref<json::array_t&>().reserve(output.data.size());
      for (float f : output.data) {
        if (std::isfinite(f)) {
          values.push_back(static_cast<double>(f));
        } else {
          // JSON has no such numbers; the protocol's tensor data takes
          // strings, and these are the spellings float() reads.
          values.push_back(std::isnan(f) ? "NaN" : f > 0 ? "Infinity" : "-Infinity");
        }
      }
      entry["data"] = std::move(values);
    }
    entries.push_back(std::move(entry));
  }
  answer["outputs"] = std::move(entries);
  std::string body = answer.dump(-1, ' ', false, json::error_handler_t::replace);
  *json_bytes = body.size();
  body.reserve(body.size() + binary_bytes);
  for (const OutputData& output : outputs) {
    if (output.binary) {
      body.append(reinterpret_cast<const char*>(output.data.data()),
                  output.data.size() * sizeof(float));
    }
  }
  return body;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d) text += ", ";
    text += std::to_string(shape[d]);
  }
  return text + "]";
}

}  // namespace attnscore::server
