// The models a server serves: the built-in ops (masked_softmax,
// dot_product_attention) and one model per .safetensors file of a folder.
// Each runs a request's parsed inputs on an Engine through the public API
// and answers the protocol's model metadata (docs/serving.md).
#ifndef ATTNSCORE_SERVER_MODELS_H_
#define ATTNSCORE_SERVER_MODELS_H_

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "tensors.h"

namespace attnscore::server {

// A tensor a model takes or returns: datatypes accepted, shape with -1 for
// free dims, and whether a request may leave it out.
struct TensorSpec {
  std::string name;
  std::vector<std::string> datatypes;
  std::vector<int64_t> shape;
  bool optional = false;
};

class Model {
 public:
  virtual ~Model() = default;

  const std::string& name() const { return name_; }
  // "masked_softmax", "dot_product_attention", "additive" or "concat".
  const std::string& kind() const { return kind_; }
  // The protocol's model metadata: name, versions, platform, inputs, outputs.
  nlohmann::json Metadata() const;

  // Runs `inputs` (by name; unknown, missing, mistyped ones refused) and
  // returns the `requested` outputs in the model's order (the first output
  // when none is named). InvalidArgument for anything the request got wrong,
  // including outputs of more than `max_output_elements` floats in all.
  virtual Status Infer(const Engine& engine, const std::vector<InputTensor>& inputs,
                       const std::vector<RequestedOutput>& requested, int64_t max_output_elements,
                       std::vector<OutputData>* outputs) const = 0;

 protected:
  Model(std::string name, std::string kind, std::vector<TensorSpec> inputs,
        std::vector<TensorSpec> outputs)
      : name_(std::move(name)),
        kind_(std::move(kind)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {}

  // Which outputs to return, by position in outputs_: absent, or as JSON or
  // binary.
  enum class Want { kNo, kJson, kBinary };
  // A request's inputs by their spec's position (null when an optional one
  // is absent), after the name and datatype checks; which outputs it wants;
  // and its valid lengths, from the input at `lens_input` when given.
  Status Bind(const std::vector<InputTensor>& inputs, const std::vector<RequestedOutput>& requested,
              size_t lens_input, std::vector<const InputTensor*>* matched,
              std::vector<Want>* wanted, ValidLens* lens) const;

 private:
  Status Match(const std::vector<InputTensor>& inputs,
               std::vector<const InputTensor*>* matched) const;
  Status Select(const std::vector<RequestedOutput>& requested, std::vector<Want>* wanted) const;

  std::string name_;
  std::string kind_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

using ModelMap = std::map<std::string, std::unique_ptr<Model>>;

// The built-ins, then one model per `*.safetensors` in `folder` (when not
// empty), named after the file without its extension. A file's kind comes
// from its tensor names; a sidecar NAME.json gives what the file cannot say:
// {"query_size": Dq} for concat. Any file that does not load fails the whole
// call with a message naming it.
Status LoadModels(const std::string& folder, ModelMap* models);

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_MODELS_H_
