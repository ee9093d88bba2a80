// Tensors of the Open Inference Protocol's REST/JSON form (KServe v2):
// {"name", "shape", "datatype", "data"}, and the three datatypes the ops
// take. docs/serving.md lists them per model.
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

// One input tensor of a request, its data converted from JSON numbers.
struct InputTensor {
  std::string name;
  std::string datatype;        // "FP32", "INT32" or "INT64"
  std::vector<int64_t> shape;  // each dim >= 0, at most kMaxRank dims
  std::vector<float> floats;   // FP32 data, C order
  std::vector<int64_t> ints;   // INT32 / INT64 data, C order

  // A C-order view of `floats` (FP32 only).
  ConstTensor View() const;
  // `ints` as valid lengths: shape [B] per batch entry, [B, N] per query.
  // InvalidArgument naming the input for another datatype or rank.
  Status Lens(ValidLens* lens) const;
};

// The request's "inputs" array, each entry checked: a name given once, a
// shape of at most kMaxRank non-negative dims whose product the data's
// length equals (flat, or nested as the shape), a datatype of the three,
// numbers that fit it (finite float32; integers within INT32 or INT64).
// InvalidArgument naming the input and what is wrong.
Status ParseInputs(const nlohmann::json& request, std::vector<InputTensor>* inputs);

// The names in the request's "outputs" array ([{"name": ...}]), or empty when
// it has none. InvalidArgument when it is malformed.
Status ParseRequestedOutputs(const nlohmann::json& request, std::vector<std::string>* names);

// An FP32 output tensor of `dims`: floats written as the shortest decimal that
// reads back as the same double, so a client that parses the JSON number and
// rounds it to float32 gets the engine's bits; NaN and infinities as null
// (JSON has no such numbers).
nlohmann::json OutputTensor(const std::string& name, const std::vector<int64_t>& dims,
                            const std::vector<float>& data);

// "[2, 10, 4]", for messages.
std::string ShapeText(const std::vector<int64_t>& shape);

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_TENSORS_H_
