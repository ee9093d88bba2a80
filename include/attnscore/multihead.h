// d2l's MultiHeadAttention module (docs/semantics.md section 5.2):
//
//   out = W_o · concat_h(attention_h(W_q q, W_k k, W_v v)) (+ biases)
//
// each head h the scaled dot-product attention over features
// [h·d, (h+1)·d) of the projections, d = num_hiddens / num_heads. The model
// holds its parameters (copied at creation); Forward runs on an Engine and,
// like every engine call, writes nothing unless it succeeds. A model is
// immutable and may be shared by many threads.
//
//   std::unique_ptr<attnscore::MultiHeadAttention> model;
//   Status s = attnscore::MultiHeadAttention::Load("mha.safetensors", /*num_heads=*/8, &model);
//   s = model->Forward(*engine, queries, keys, values, lens, Causal::kNone, out, weights);
#ifndef ATTNSCORE_MULTIHEAD_H_
#define ATTNSCORE_MULTIHEAD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "attnscore/engine.h"
#include "attnscore/export.h"
#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

namespace internal {
struct ModelMaker;  // engine/api: makes every model
}  // namespace internal

// The module's parameters in PyTorch's nn.Linear layout (out × in), any
// strides: W_q (H, Dq), W_k (H, Dk), W_v (H, Dv), W_o (H, H), H = num_hiddens.
// The biases (H) each are all given (bias=True) or all left empty.
struct MultiHeadWeights {
  ConstTensor w_q, w_k, w_v, w_o;
  ConstTensor b_q, b_k, b_v, b_o;
};

class ATTNSCORE_API MultiHeadAttention {
 public:
  // num_heads must divide num_hiddens. Copied.
  static Status Create(int64_t num_heads, const MultiHeadWeights& weights,
                       std::unique_ptr<MultiHeadAttention>* model);

  // The same from a .safetensors file of the module's state_dict: float32
  // "W_q.weight", "W_k.weight", "W_v.weight", "W_o.weight" and, for a module
  // built with bias=True, the four ".bias"; no others. The heads are not in
  // the file, so they are given. Errors name the file and the tensor.
  static Status Load(const std::string& path, int64_t num_heads,
                     std::unique_ptr<MultiHeadAttention>* model);

  ~MultiHeadAttention();
  MultiHeadAttention(const MultiHeadAttention&) = delete;
  MultiHeadAttention& operator=(const MultiHeadAttention&) = delete;

  int64_t num_heads() const;
  int64_t num_hiddens() const;  // H
  int64_t query_size() const;   // Dq
  int64_t key_size() const;     // Dk
  int64_t value_size() const;   // Dv
  bool has_bias() const;

  // Every check Forward makes of its inputs, without running it, and the
  // shapes of its outputs (see Engine::CheckDotProductAttention): out
  // (B, N, H) in shapes->out[0..2] and the weights (B, num_heads, N, M).
  Status Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
               const ValidLens& valid_lens, Causal causal, MultiHeadShapes* shapes) const;

  // Q: (B, N, Dq), K: (B, M, Dk), V: (B, M, Dv), out: (B, N, H). valid_lens
  // (B,) or (B, N) apply to every head; `causal` cuts them as in
  // Engine::MultiHeadAttention. `attention_weights`, when not empty,
  // receives the softmax (B, num_heads, N, M).
  Status Forward(const Engine& engine, ConstTensor queries, ConstTensor keys, ConstTensor values,
                 const ValidLens& valid_lens, Causal causal, Tensor out,
                 Tensor attention_weights = Tensor()) const;

 private:
  friend struct internal::ModelMaker;
  struct Params;
  explicit MultiHeadAttention(std::unique_ptr<Params> params);
  std::unique_ptr<Params> params_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_MULTIHEAD_H_
