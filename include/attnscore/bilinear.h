// The bilinear ("general") score, the chapter's exercise of queries and keys
// of different sizes (docs/semantics.md section 6):
//
//   scores[b, i, j] = Q[b, i]ᵀ W K[b, j],  W (Dq, Dk);  W = masked_softmax(scores);  out = W V
//
// with no 1/sqrt(d) scale. Run as a projection Q W (oneDNN) and the
// dot-product path. The model holds W (copied); Forward runs on an Engine
// and writes nothing unless it succeeds. Immutable; may be shared by threads.
//
//   std::unique_ptr<attnscore::BilinearAttention> model;
//   Status s = attnscore::BilinearAttention::Load("bilinear.safetensors", &model);
//   s = model->Forward(*engine, queries, keys, values, lens, out, attention_weights);
#ifndef ATTNSCORE_BILINEAR_H_
#define ATTNSCORE_BILINEAR_H_

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

class ATTNSCORE_API BilinearAttention {
 public:
  // w: (Dq, Dk), any strides, copied; finite.
  static Status Create(ConstTensor w, std::unique_ptr<BilinearAttention>* model);
  // The same from a .safetensors state_dict holding float32 "W.weight"
  // (Dq, Dk) and nothing else (an nn.Linear(Dk, Dq, bias=False) named W).
  static Status Load(const std::string& path, std::unique_ptr<BilinearAttention>* model);

  ~BilinearAttention();
  BilinearAttention(const BilinearAttention&) = delete;
  BilinearAttention& operator=(const BilinearAttention&) = delete;

  int64_t query_size() const;  // Dq
  int64_t key_size() const;    // Dk

  // Every check Forward makes of its inputs, and its outputs' shapes.
  Status Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
               const ValidLens& valid_lens, OutputShapes* shapes) const;

  // Q: (B, N, Dq), K: (B, M, Dk), V: (B, M, Dv), out: (B, N, Dv);
  // `attention_weights`, when not empty, (B, N, M).
  Status Forward(const Engine& engine, ConstTensor queries, ConstTensor keys, ConstTensor values,
                 const ValidLens& valid_lens, Tensor out,
                 Tensor attention_weights = Tensor()) const;

 private:
  friend struct internal::ModelMaker;
  struct Params;
  explicit BilinearAttention(std::unique_ptr<Params> params);
  std::unique_ptr<Params> params_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_BILINEAR_H_
