// The C API's statuses and the catalogue's generic call (attnscore/c_api.h):
// every op and model as one handle type, attnscore_op.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/c_api_internal.h"
#include "attnscore/c_api.h"
#include "attnscore/catalogue.h"

struct attnscore_op {
  std::unique_ptr<attnscore::Op> op;
};

namespace attnscore::c_api {

attnscore_status kOutOfMemory{ATTNSCORE_INTERNAL, "out of memory for the status"};

attnscore_status* ToC(const Status& status) {
  if (status.ok()) return nullptr;
  auto* s = new (std::nothrow) attnscore_status;
  if (s == nullptr) return &kOutOfMemory;
  s->code = static_cast<attnscore_status_code>(status.code());
  try {
    s->message = status.message();
  } catch (...) {
    s->message.clear();
  }
  return s;
}

attnscore_status* Invalid(const char* call, const char* what) {
  return ToC(Status::InvalidArgument(std::string(call) + ": " + what));
}

namespace {

// The C parameters as the C++ map; a null name or value is refused.
Status ParamsOf(const char* call, const attnscore_param* params, size_t count, Params* out) {
  if (params == nullptr && count > 0) {
    return Status::InvalidArgument(std::string(call) + ": params is null but param_count is " +
                                   std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    if (params[i].name == nullptr || params[i].value == nullptr) {
      return Status::InvalidArgument(std::string(call) + ": params[" + std::to_string(i) +
                                     "] has a null name or value");
    }
    (*out)[params[i].name] = params[i].value;
  }
  return Status::Ok();
}

// The C named tensors as the C++ ones; a null name or a dtype outside the
// enum is refused.
Status TensorsOf(const char* call, const char* what, const attnscore_named_tensor* tensors,
                 size_t count, std::vector<NamedTensor>* out) {
  if (tensors == nullptr && count > 0) {
    return Status::InvalidArgument(std::string(call) + ": " + what + " is null but its count is " +
                                   std::to_string(count));
  }
  for (size_t i = 0; i < count; ++i) {
    const attnscore_named_tensor& t = tensors[i];
    const std::string at = std::string(what) + "[" + std::to_string(i) + "]";
    if (t.name == nullptr)
      return Status::InvalidArgument(std::string(call) + ": " + at + " has no name");
    if (t.dtype < ATTNSCORE_FLOAT32 || t.dtype > ATTNSCORE_INT64) {
      return Status::InvalidArgument(std::string(call) + ": " + at +
                                     " has a dtype outside attnscore_dtype");
    }
    NamedTensor named;
    named.name = t.name;
    named.dtype = static_cast<DataType>(t.dtype);
    named.data = t.data;
    named.rank = t.rank;
    for (int d = 0; d < kMaxRank; ++d) named.dims[d] = t.dims[d], named.strides[d] = t.strides[d];
    out->push_back(std::move(named));
  }
  return Status::Ok();
}

}  // namespace
}  // namespace attnscore::c_api

using attnscore::Params;
using attnscore::Status;
using attnscore::c_api::Guarded;
using attnscore::c_api::Invalid;
using attnscore::c_api::ParamsOf;
using attnscore::c_api::TensorsOf;

extern "C" {

size_t attnscore_catalogue_size(void) { return attnscore::Catalogue().size(); }

const char* attnscore_catalogue_name(size_t index) {
  const auto& entries = attnscore::Catalogue();
  return index < entries.size() ? entries[index].name.c_str() : nullptr;
}

attnscore_status* attnscore_op_create(const char* name, const attnscore_param* params,
                                      size_t param_count, const attnscore_named_tensor* weights,
                                      size_t weight_count, attnscore_op** op) {
  constexpr const char* kCall = "attnscore_op_create";
  if (name == nullptr || op == nullptr) return Invalid(kCall, "name and op must not be null");
  return Guarded(kCall, [&] {
    Params cpp_params;
    std::vector<attnscore::NamedTensor> named;
    ATTNSCORE_RETURN_IF_ERROR(ParamsOf(kCall, params, param_count, &cpp_params));
    ATTNSCORE_RETURN_IF_ERROR(TensorsOf(kCall, "weights", weights, weight_count, &named));
    std::unique_ptr<attnscore::Op> made;
    ATTNSCORE_RETURN_IF_ERROR(attnscore::Op::Create(name, cpp_params, named, &made));
    *op = new attnscore_op{std::move(made)};
    return Status::Ok();
  });
}

attnscore_status* attnscore_op_load(const char* path, const attnscore_param* params,
                                    size_t param_count, attnscore_op** op) {
  constexpr const char* kCall = "attnscore_op_load";
  if (path == nullptr || op == nullptr) return Invalid(kCall, "path and op must not be null");
  return Guarded(kCall, [&] {
    Params cpp_params;
    ATTNSCORE_RETURN_IF_ERROR(ParamsOf(kCall, params, param_count, &cpp_params));
    std::unique_ptr<attnscore::Op> made;
    ATTNSCORE_RETURN_IF_ERROR(attnscore::Op::Load(path, cpp_params, &made));
    *op = new attnscore_op{std::move(made)};
    return Status::Ok();
  });
}

void attnscore_op_destroy(attnscore_op* op) { delete op; }

const char* attnscore_op_name(const attnscore_op* op) {
  return op == nullptr ? "" : op->op->spec().name.c_str();
}

const char* attnscore_op_model_param(const attnscore_op* op, const char* name) {
  if (op == nullptr || name == nullptr) return nullptr;
  const auto found = op->op->model_params().find(name);
  return found == op->op->model_params().end() ? nullptr : found->second.c_str();
}

int64_t attnscore_op_fixed_dim(const attnscore_op* op, const char* dim) {
  if (op == nullptr || dim == nullptr) return 0;
  const auto found = op->op->fixed_dims().find(dim);
  return found == op->op->fixed_dims().end() ? 0 : found->second;
}

size_t attnscore_op_output_count(const attnscore_op* op) {
  return op == nullptr ? 0 : op->op->spec().outputs.size();
}

const char* attnscore_op_output_name(const attnscore_op* op, size_t index) {
  if (op == nullptr || index >= op->op->spec().outputs.size()) return nullptr;
  return op->op->spec().outputs[index].name.c_str();
}

attnscore_status* attnscore_op_check(const attnscore_op* op, const attnscore_engine* engine,
                                     const attnscore_named_tensor* inputs, size_t input_count,
                                     const attnscore_param* params, size_t param_count,
                                     attnscore_shape* shapes, size_t shape_count) {
  constexpr const char* kCall = "attnscore_op_check";
  if (op == nullptr || engine == nullptr) return Invalid(kCall, "op and engine must not be null");
  if (shapes == nullptr && shape_count > 0) return Invalid(kCall, "shapes is null");
  return Guarded(kCall, [&] {
    Params cpp_params;
    std::vector<attnscore::NamedTensor> named;
    ATTNSCORE_RETURN_IF_ERROR(ParamsOf(kCall, params, param_count, &cpp_params));
    ATTNSCORE_RETURN_IF_ERROR(TensorsOf(kCall, "inputs", inputs, input_count, &named));
    std::vector<std::vector<int64_t>> found;
    ATTNSCORE_RETURN_IF_ERROR(op->op->Check(*engine->engine, named, cpp_params, &found));
    for (size_t i = 0; i < found.size() && i < shape_count; ++i) {
      shapes[i] = attnscore_shape{};
      shapes[i].rank = static_cast<int32_t>(found[i].size());
      std::memcpy(shapes[i].dims, found[i].data(), found[i].size() * sizeof(int64_t));
    }
    return Status::Ok();
  });
}

attnscore_status* attnscore_op_run(const attnscore_op* op, const attnscore_engine* engine,
                                   const attnscore_named_tensor* inputs, size_t input_count,
                                   const attnscore_param* params, size_t param_count,
                                   const attnscore_named_tensor* outputs, size_t output_count) {
  constexpr const char* kCall = "attnscore_op_run";
  if (op == nullptr || engine == nullptr) return Invalid(kCall, "op and engine must not be null");
  return Guarded(kCall, [&] {
    Params cpp_params;
    std::vector<attnscore::NamedTensor> named_inputs, named_outputs;
    ATTNSCORE_RETURN_IF_ERROR(ParamsOf(kCall, params, param_count, &cpp_params));
    ATTNSCORE_RETURN_IF_ERROR(TensorsOf(kCall, "inputs", inputs, input_count, &named_inputs));
    ATTNSCORE_RETURN_IF_ERROR(TensorsOf(kCall, "outputs", outputs, output_count, &named_outputs));
    return op->op->Run(*engine->engine, named_inputs, cpp_params, named_outputs);
  });
}

}  // extern "C"
