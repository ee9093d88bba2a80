// Additive attention (d2l's AdditiveAttention; docs/semantics.md section 3):
//
//   scores[b, i, j] = w_v · tanh(W_q q[b, i] + W_k k[b, j])
//   out = masked_softmax(scores, valid_lens) V
//
// The model holds its parameters (copied and packed at creation); Forward runs
// on an Engine and, like every engine call, writes nothing unless it
// succeeds. A model is immutable and may be shared by many threads.
//
//   std::unique_ptr<attnscore::AdditiveAttention> model;
//   Status s = attnscore::AdditiveAttention::Load("model.safetensors", &model);
//   s = model->Forward(*engine, queries, keys, values, lens, out);
#ifndef ATTNSCORE_ADDITIVE_H_
#define ATTNSCORE_ADDITIVE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "attnscore/engine.h"
#include "attnscore/export.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

namespace internal {
struct ModelMaker;  // engine/api: makes every model
}  // namespace internal

class ATTNSCORE_API AdditiveAttention {
 public:
  // Parameters in PyTorch's nn.Linear layout (out × in), no biases:
  // w_q (H, Dq), w_k (H, Dk), w_v (1, H). Any strides; copied.
  static Status Create(ConstTensor w_q, ConstTensor w_k, ConstTensor w_v,
                       std::unique_ptr<AdditiveAttention>* model);

  // The same parameters from a .safetensors file of the module's state_dict:
  // float32 tensors "W_q.weight", "W_k.weight" and "w_v.weight", and no
  // others. Errors name the file and the offending tensor.
  static Status Load(const std::string& path, std::unique_ptr<AdditiveAttention>* model);

  ~AdditiveAttention();
  AdditiveAttention(const AdditiveAttention&) = delete;
  AdditiveAttention& operator=(const AdditiveAttention&) = delete;

  int64_t query_size() const;   // Dq
  int64_t key_size() const;     // Dk
  int64_t hidden_size() const;  // H

  // Every check Forward makes of its inputs, without running it, and the
  // shapes of its outputs (see Engine::CheckDotProductAttention).
  Status Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
               const ValidLens& valid_lens, OutputShapes* shapes) const;

  // Q: (B, N, Dq), K: (B, M, Dk), V: (B, M, Dv), out: (B, N, Dv).
  // `attention_weights`, when not empty, receives the softmax (B, N, M).
  Status Forward(const Engine& engine, ConstTensor queries, ConstTensor keys, ConstTensor values,
                 const ValidLens& valid_lens, Tensor out,
                 Tensor attention_weights = Tensor()) const;

 private:
  friend struct internal::ModelMaker;
  struct Params;
  explicit AdditiveAttention(std::unique_ptr<Params> params);
  std::unique_ptr<Params> params_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_ADDITIVE_H_
