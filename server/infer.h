// One inference request, HTTP aside: its body (the JSON request, then any
// binary tensor data) run on a model, and the answer's status and body.
// Service puts it behind POST /v2/models/NAME/infer; the fuzzer calls it
// directly (tests/fuzz/server_request_fuzzer.cc).
#ifndef ATTNSCORE_SERVER_INFER_H_
#define ATTNSCORE_SERVER_INFER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "attnscore/attnscore.h"
#include "models.h"

namespace attnscore::server {

struct InferAnswer {
  int status = 200;       // 200; 400 for anything the request got wrong; 500 otherwise
  std::string body;       // the answer, or {"error": message}
  size_t json_bytes = 0;  // the JSON's length: body.size() unless outputs are binary
};

// Runs `body` on `model`: its first `json_bytes` bytes are the request's
// JSON and the rest its binary tensor data (json_bytes = body.size() when
// the request has none). Outputs are bounded to `max_output_elements` floats.
InferAnswer Infer(const Model& model, const Engine& engine, std::string_view body,
                  size_t json_bytes, int64_t max_output_elements);

// {"error": message}, as every error answer's body.
std::string ErrorBody(const std::string& message);

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_INFER_H_
