// Tensors of the Open Inference Protocol's REST/JSON form (KServe v2):
// {"name", "shape", "datatype", "data"}, and the three datatypes the ops
// take; with the binary tensor data extension, a tensor's data may instead
// follow the JSON as raw little-endian bytes ("parameters":
// {"binary_data_size": bytes}). docs/serving.md lists them per model.
#ifndef ATTNSCORE_SERVER_TENSORS_H_
#define ATTNSCORE_SERVER_TENSORS_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore::server {

// One input tensor of a request, its data converted from JSON numbers, or
// read from the request's raw bytes.
struct InputTensor {
  std::string name;
  std::string datatype;        // "FP32", "INT32" or "INT64"
  std::vector<int64_t> shape;  // each dim >= 0, at most kMaxRank dims
  std::vector<float> floats;   // FP32 data, C order, unless `borrowed`
  std::vector<int64_t> ints;   // INT32 / INT64 data, C order
  // FP32 data read in place from the request's raw bytes (ReadRaw): the
  // request must outlive every use of the tensor.
  const float* borrowed = nullptr;

  // A C-order view of the FP32 data.
  ConstTensor View() const;
  // ints.data(), never null (the engine takes null for a missing tensor).
  const int64_t* IntData() const;
  // `ints` as valid lengths: shape [B] per batch entry, [B, N] per query.
  // InvalidArgument naming the input for another datatype or rank.
  Status Lens(ValidLens* lens) const;
};

// The request's "inputs" array, each entry checked: a name given once, a
// shape of at most kMaxRank non-negative dims whose product the data's
// length equals, a datatype of the three, and data that fits it. Data is a
// JSON array (flat, or nested as the shape) of finite float32 numbers or of
// integers within INT32 / INT64; or, for an input whose parameters give
// binary_data_size, the next that many bytes of `binary` (the body after the
// JSON), which must be used up exactly (and outlive the inputs: ReadRaw may
// read them in place). InvalidArgument naming the input and what is wrong.
Status ParseInputs(const nlohmann::json& request, std::string_view binary,
                   std::vector<InputTensor>* inputs);

// Checks both of the protocol's forms share, each an InvalidArgument naming
// the input: a datatype of the three; `count` data elements for its shape;
// `bytes` of raw data for its shape and datatype (`source` says where the
// size came from, as "binary_data_size 12").
Status CheckDatatype(const InputTensor& tensor);
Status CheckElementCount(const InputTensor& tensor, uint64_t count);
Status CheckRawSize(const InputTensor& tensor, uint64_t bytes, const std::string& source);
// Gives `tensor` its data from raw little-endian C-order bytes, as many as
// CheckRawSize accepted: FP32 bytes that lie on a float's alignment are
// read in place (`borrowed`, so `data` must outlive the tensor's use); other
// bytes are copied. Over gRPC, protobuf has copied them into the message
// already: a second copy cost a 4 MiB decode request about a sixth of its
// server CPU (docs/serving.md).
void ReadRaw(const char* data, InputTensor* tensor);

// An output the request asks for, and whether it wants its data as binary
// (its parameters' binary_data, or the request's binary_data_output).
struct RequestedOutput {
  std::string name;
  bool binary = false;
};

// The request's "outputs" array ([{"name": ..., "parameters": {...}}]), or
// empty when it has none. InvalidArgument when it is malformed.
Status ParseRequestedOutputs(const nlohmann::json& request, std::vector<RequestedOutput>* outputs);

// An output a model computed: float32, C order.
struct OutputData {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> data;
  bool binary = false;
};

// The answer's body for `outputs`: JSON alone, or JSON followed by the binary
// outputs' bytes, in order, with `*json_bytes` the JSON's length (to send as
// Inference-Header-Content-Length); `*json_bytes` is the whole body's length
// when no output is binary. JSON floats are written as the shortest decimal
// that reads back as the same double, so a client that rounds the number to
// float32 gets the engine's bits; NaN and infinities as the strings "NaN",
// "Infinity" and "-Infinity" (JSON has no such numbers; the protocol's
// tensor data takes strings; binary data carries them as they are).
std::string AnswerBody(nlohmann::json answer, const std::vector<OutputData>& outputs,
                       size_t* json_bytes);

// "[2, 10, 4]", for messages.
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_TENSORS_H_
