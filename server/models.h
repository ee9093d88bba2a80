// The models a server serves: the catalogue's stateless ops, built in
// (masked_softmax, dot_product_attention, multihead_attention), and one
// model per .safetensors file of a folder. Each is an attnscore::Op: its
// inputs, outputs and metadata come from the catalogue's entry, and a
// request runs through the Op's generic call (docs/serving.md).
#ifndef ATTNSCORE_SERVER_MODELS_H_
#define ATTNSCORE_SERVER_MODELS_H_

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "tensors.h"

namespace attnscore::server {

// A tensor as the protocol describes it: datatypes accepted, shape with -1
// for free dims, and whether a request may leave it out.
struct ProtocolTensor {
  std::string name;
  std::vector<std::string> datatypes;
  std::vector<int64_t> shape;
  bool optional = false;
};

class Model {
 public:
  // A model served by `op`.
  Model(std::string name, std::shared_ptr<const Op> op);
  // A file the server could not make a model of: listed, never ready.
  Model(std::string name, std::string not_ready_reason);

  const std::string& name() const { return name_; }
  bool ready() const { return op_ != nullptr; }
  // Why the model is not ready ("" when it is).
  const std::string& not_ready_reason() const { return reason_; }
  // The protocol's model metadata: name, versions, platform, inputs, outputs;
  // its parameters give the catalogue's kind and the model's parameters.
  nlohmann::json Metadata() const;

  // Runs `inputs` (by name; unknown, missing, mistyped ones refused) with
  // the request's `parameters` (the entry's call parameters, such as causal
  // and scale) and returns the `requested` outputs in the model's order
  // (the first output when none is named). InvalidArgument for anything
  // the request got wrong, including outputs of more than
  // `max_output_elements` floats in all.
  Status Infer(const Engine& engine, const std::vector<InputTensor>& inputs,
               const nlohmann::json& parameters, const std::vector<RequestedOutput>& requested,
               int64_t max_output_elements, std::vector<OutputData>* outputs) const;

 private:
  // Which outputs to return, by position in outputs_: absent, or as JSON or
  // binary.
  enum class Want { kNo, kJson, kBinary };
  Status Match(const std::vector<InputTensor>& inputs,
               std::vector<const InputTensor*>* matched) const;
  Status Select(const std::vector<RequestedOutput>& requested, std::vector<Want>* wanted) const;
  Status CallParams(const nlohmann::json& parameters, Params* params) const;

  std::string name_;
  std::shared_ptr<const Op> op_;
  std::string reason_;
  std::vector<ProtocolTensor> inputs_;
  std::vector<ProtocolTensor> outputs_;
};

using ModelMap = std::map<std::string, std::shared_ptr<const Model>>;

// The model `name`: a built-in, else folder/name.safetensors, made as
// LoadModels makes it (a file it cannot serve gives a model not ready, with
// the reason); null when it is neither.
std::shared_ptr<const Model> MakeModel(const std::string& folder, const std::string& name);

// The built-ins, then one model per `*.safetensors` in `folder` (when not
// empty), named after the file without its extension. A file's kind comes
// from its header's __metadata__ "kind", else from its tensor names; its
// model parameters (num_heads, query_size) from the metadata or from a
// sidecar NAME.json ({"query_size": Dq}). A file that is no model the
// catalogue knows, or does not load, is listed not ready, with its reason
// printed to stderr: it never stops the server. Only an unreadable folder
// fails the call.
Status LoadModels(const std::string& folder, ModelMap* models);

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_MODELS_H_
