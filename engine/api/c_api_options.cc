// The C API's options as the C++ ones (attnscore/c_api.h).
#include <string>

#include "api/c_api_internal.h"
#include "attnscore/multihead_options.h"

namespace attnscore::c_api {
namespace {

// `call`'s argument `name`, an attnscore_causal value, as the C++ enum;
// refused outside the enum.
Status CausalOf(const char* call, const char* name, int32_t value, attnscore::Causal* causal) {
  if (value < ATTNSCORE_CAUSAL_NONE || value > ATTNSCORE_CAUSAL_BOTTOM_RIGHT) {
    return Status::InvalidArgument(std::string(call) + ": " + name +
                                   " is outside attnscore_causal");
  }
  *causal = static_cast<attnscore::Causal>(value);
  return Status::Ok();
}

}  // namespace

ConstTensor HeadFloats(const float* floats, const attnscore_tensor_view* queries) {
  if (floats == nullptr) return ConstTensor();
  const int rank = queries != nullptr ? queries->rank : 0;
  return ConstTensor(floats, {rank == 4 ? queries->dims[2] : rank == 3 ? queries->dims[1] : 0});
}

Status MultiHeadOptionsOf(const char* call, const attnscore_multihead_options* options,
                          const attnscore_tensor_view* queries, attnscore::MultiHeadOptions* out) {
  *out = attnscore::MultiHeadOptions();
  if (options == nullptr) return Status::Ok();
  out->sinks = HeadFloats(options->sinks, queries);
  out->alibi_slopes = HeadFloats(options->alibi_slopes, queries);
  if (options->bias != nullptr) out->bias = In(options->bias);
  out->scale = options->scale;
  out->softcap = options->softcap;
  if (options->windowed != 0 && options->windowed != 1) {
    return Status::InvalidArgument(std::string(call) + ": options->windowed is " +
                                   std::to_string(options->windowed) + "; want 0 or 1");
  }
  if (options->windowed == 1) out->window = {options->window_left, options->window_right};
  return CausalOf(call, "options->causal", options->causal, &out->causal);
}

}  // namespace attnscore::c_api
