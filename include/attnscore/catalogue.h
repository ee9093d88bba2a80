// The catalogue: every op and model attnscore serves, each described once
// (its inputs, outputs, weights and parameters), and one generic call over
// named tensors. The CLI, the server, Python and the C API are driven by it,
// so an entry added here reaches all of them (docs/architecture.md).
//
//   std::unique_ptr<attnscore::Op> op;
//   Status s = attnscore::Op::Create("dot_product_attention", {}, {}, &op);
//   s = op->Run(*engine, {{"queries", q}, {"keys", k}, {"values", v}}, {}, {{"output", out}});
//
// The generic call makes the typed call's checks, with its messages, and
// runs the same code: Op::Run of "dot_product_attention" is
// Engine::DotProductAttention. The typed calls stay.
#ifndef ATTNSCORE_CATALOGUE_H_
#define ATTNSCORE_CATALOGUE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/engine.h"
#include "attnscore/export.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"

namespace attnscore {

enum class DataType { kFloat32, kInt32, kInt64 };

// "float32", "int32", "int64".
ATTNSCORE_API const char* DataTypeName(DataType type);

// A tensor an entry takes or gives. `dims` names each dim ("B", "N", "M",
// "D", "Hq", ...); dims of one name are one size across an entry's tensors.
// A tensor may have from `min_rank` to dims.size() dims, its leading ones
// (valid_lens: (B,) or (B, N)).
struct TensorSpec {
  std::string name;
  std::vector<DataType> dtypes;  // the first is the usual one
  std::vector<std::string> dims;
  int min_rank = 0;
  bool optional = false;  // an input that may be absent, an output given on request
  std::string doc;
};

// A parameter, passed as text. A model parameter is fixed when the model is
// made (num_heads, query_size); a call parameter comes with each call
// (causal, scale). An empty default means required.
struct ParamSpec {
  enum class Kind { kModel, kCall };
  enum class Type { kInt, kFloat, kChoice };
  std::string name;
  Kind kind = Kind::kCall;
  Type type = Type::kInt;
  std::vector<std::string> choices;  // kChoice's values
  std::string default_value;
  std::string doc;
};

struct ATTNSCORE_API OpSpec {
  std::string name;     // "dot_product_attention", "additive", ...
  std::string summary;  // one line: what it computes
  std::vector<TensorSpec> inputs;
  // outputs[0] is always written; the others only when a caller passes them.
  std::vector<TensorSpec> outputs;
  // A model's state_dict tensors (PyTorch's names); empty for an op.
  std::vector<TensorSpec> weights;
  std::vector<ParamSpec> params;
  // Keeps data between calls (the KV cache): each Run changes it.
  bool stateful = false;

  bool is_model() const { return !weights.empty(); }
  const TensorSpec* input(const std::string& input_name) const;
  const TensorSpec* output(const std::string& output_name) const;
  const ParamSpec* param(const std::string& param_name) const;
};

// Every entry, in a fixed order: the ops (masked_softmax,
// dot_product_attention, multihead_attention, kv_cache_attend), then the
// models (additive, concat, bilinear, multihead).
ATTNSCORE_API const std::vector<OpSpec>& Catalogue();
// The entry named `name`, or null.
ATTNSCORE_API const OpSpec* FindOp(const std::string& name);

// A named view for the generic call: float32 with any strides, or int32 /
// int64 (valid lengths) in C order. Inputs are read, outputs written.
struct ATTNSCORE_API NamedTensor {
  std::string name;
  DataType dtype = DataType::kFloat32;
  void* data = nullptr;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};  // in elements

  NamedTensor() = default;
  NamedTensor(std::string tensor_name, const ConstTensor& view);
  NamedTensor(std::string tensor_name, const Tensor& view);
  // C-order data of `shape` (at most kMaxRank dims): float32, or int32 or
  // int64 valid lengths.
  NamedTensor(std::string tensor_name, const float* floats, const std::vector<int64_t>& shape);
  NamedTensor(std::string tensor_name, const int32_t* ints, const std::vector<int64_t>& shape);
  NamedTensor(std::string tensor_name, const int64_t* ints, const std::vector<int64_t>& shape);
};

using Params = std::map<std::string, std::string>;

// A catalogue entry ready to call: an op, or a model with its weights, or a
// KV cache with its memory. Immutable but for a stateful entry's data; Run
// of a stateless entry may be called from many threads at once.
class ATTNSCORE_API Op {
 public:
  // `name` is an entry's; `params` its model parameters (unknown ones
  // refused); `weights` a model's tensors by their spec's names (copied).
  static Status Create(const std::string& name, const Params& params,
                       const std::vector<NamedTensor>& weights, std::unique_ptr<Op>* op);
  // A model from a .safetensors state_dict. Its kind is params["kind"] when
  // given, else the file's __metadata__ "kind", else the one whose weights
  // the file's tensor names are; its model parameters come from `params`,
  // else from the metadata (num_heads, query_size, as strings).
  static Status Load(const std::string& path, const Params& params, std::unique_ptr<Op>* op);
  ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  const OpSpec& spec() const;
  // The model parameters in force, as text.
  const Params& model_params() const;
  // The sizes the model fixes, by dim name ("Dq": 6, "H": 8); empty for an op.
  const std::map<std::string, int64_t>& fixed_dims() const;

  // Every check Run makes of `inputs` and `params`, without running, and
  // each output's shape in spec().outputs' order.
  Status Check(const Engine& engine, const std::vector<NamedTensor>& inputs, const Params& params,
               std::vector<std::vector<int64_t>>* output_shapes) const;
  // Runs the entry: writes outputs[0]'s tensor, and any other output passed.
  Status Run(const Engine& engine, const std::vector<NamedTensor>& inputs, const Params& params,
             const std::vector<NamedTensor>& outputs) const;

  struct Impl;

 private:
  explicit Op(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_CATALOGUE_H_
