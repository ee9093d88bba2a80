// Concat attention (the seq2seq tutorial's Attn module; docs/semantics.md section 4):
//
//   scores[b, i, :] = attn.weight · [q[b, i]; k[b, i]] + attn.bias      (M values)
//   W = masked_softmax(scores, valid_lens);  applied = W V
//   out[b, i] = attn_combine.weight · [q[b, i]; applied[b, i]] + attn_combine.bias
//
// The model holds its parameters (copied and packed at creation); Forward runs
// on an Engine and, like every engine call, writes nothing unless it
// succeeds. A model is immutable and may be shared by many threads.
//
//   std::unique_ptr<attnscore::ConcatAttention> model;
//   Status s = attnscore::ConcatAttention::Load("attn.safetensors", /*query_size=*/32, &model);
//   s = model->Forward(*engine, queries, keys, values, lens, out, attention_weights);
#ifndef ATTNSCORE_CONCAT_H_
#define ATTNSCORE_CONCAT_H_

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

class ATTNSCORE_API ConcatAttention {
 public:
  // Parameters in PyTorch's nn.Linear layout (out × in): attn_weight
  // (M, Dq + Dk), attn_bias (M), combine_weight (O, Dq + Dv), combine_bias (O).
  // The weights alone cannot tell where q ends in [q; k], so the query size
  // Dq is given; Dk and Dv are what remains. Any strides; copied.
  static Status Create(int64_t query_size, ConstTensor attn_weight, ConstTensor attn_bias,
                       ConstTensor combine_weight, ConstTensor combine_bias,
                       std::unique_ptr<ConcatAttention>* model);

  // The same from a .safetensors file of the module's state_dict: float32
  // tensors "attn.weight", "attn.bias", "attn_combine.weight" and
  // "attn_combine.bias", and no others. Errors name the file and the tensor.
  static Status Load(const std::string& path, int64_t query_size,
                     std::unique_ptr<ConcatAttention>* model);

  ~ConcatAttention();
  ConcatAttention(const ConcatAttention&) = delete;
  ConcatAttention& operator=(const ConcatAttention&) = delete;

  int64_t query_size() const;   // Dq
  int64_t key_size() const;     // Dk
  int64_t value_rows() const;   // M, the tutorial's value_size1
  int64_t value_size() const;   // Dv, the tutorial's value_size2
  int64_t output_size() const;  // O

  // Every check Forward makes of its inputs, without running it, and the
  // shapes of its outputs (see Engine::CheckDotProductAttention).
  Status Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
               const ValidLens& valid_lens, OutputShapes* shapes) const;

  // Q: (B, N, Dq), K: (B, N, Dk) (one key per query), V: (B, M, Dv),
  // out: (B, N, O). valid_lens mask the M positions. `attention_weights`,
  // when not empty, receives the softmax (B, N, M).
  Status Forward(const Engine& engine, ConstTensor queries, ConstTensor keys, ConstTensor values,
                 const ValidLens& valid_lens, Tensor out,
                 Tensor attention_weights = Tensor()) const;

 private:
  friend struct internal::ModelMaker;
  struct Params;
  explicit ConcatAttention(std::unique_ptr<Params> params);
  std::unique_ptr<Params> params_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_CONCAT_H_
