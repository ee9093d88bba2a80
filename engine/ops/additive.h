// Additive attention (docs/semantics.md section 3), d2l's AdditiveAttention:
//   scores[b, i, j] = w_v · tanh(W_q q[b, i] + W_k k[b, j])
//   out = masked_softmax(scores, valid_lens) V
#ifndef ATTNSCORE_OPS_ADDITIVE_H_
#define ATTNSCORE_OPS_ADDITIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"
#include "base/checks.h"

namespace attnscore::ops {

// The model's parameters, packed once for the forward pass.
struct AdditiveParams {
  int64_t query_size = 0, key_size = 0, hidden = 0;
  std::vector<float> w_q_t;  // (Dq, H): Qh = Q · w_q_t, oneDNN's plain layout
  std::vector<float> w_k;    // (H, Dk): Khᵀ = W_k · Kᵀ
  std::vector<float> w_v;    // (H)
  float w_sum = 0;           // Σ w_v: the fast tanh's scores are w_sum − 2·Σ w_v/(1 + A·B)
};

// Checks and packs W_q.weight (H, Dq), W_k.weight (H, Dk), w_v.weight (1, H).
Status MakeAdditiveParams(ConstTensor w_q, ConstTensor w_k, ConstTensor w_v,
                          AdditiveParams* params);

// The same from a .safetensors state_dict holding exactly those tensors.
Status LoadAdditiveParams(const std::string& path, AdditiveParams* params);

// The checks of a forward pass's Q, K and V (shapes, strides), and the shape
// of its outputs. The valid lengths are checked with the outputs.
Status CheckAdditiveInputs(const AdditiveParams& params, const ConstTensor& queries,
                           const ConstTensor& keys, const ConstTensor& values,
                           internal::AttentionShape* shape);

// AdditiveAttention::Forward without the call scope (threads, denormals).
Status AdditiveForward(const internal::CallContext& call, const AdditiveParams& params,
                       ConstTensor queries, ConstTensor keys, ConstTensor values,
                       const ValidLens& valid_lens, Tensor out, Tensor attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_ADDITIVE_H_
