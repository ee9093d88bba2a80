// Concat attention (docs/semantics.md section 4), the seq2seq tutorial's Attn:
//   scores[b, i, :] = attn.weight · [q[b, i]; k[b, i]] + attn.bias      (M values)
//   W = masked_softmax(scores, valid_lens);  applied = W V
//   out[b, i] = attn_combine.weight · [q[b, i]; applied[b, i]] + attn_combine.bias
#ifndef ATTNSCORE_OPS_CONCAT_H_
#define ATTNSCORE_OPS_CONCAT_H_

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

// The model's parameters, each linear layer split into its column blocks
// and packed once for the forward pass.
struct ConcatParams {
  int64_t query_size = 0, key_size = 0, value_rows = 0, value_size = 0, output_size = 0;
  // attn.weight and attn_combine.weight transposed, (Dq + Dk, M) and
  // (Dq + Dv, O): x · score is the score layer of x = [q; k] without its bias.
  // Their first Dq rows are the blocks that multiply q, the rest those that
  // multiply k (applied).
  std::vector<float> score, combine;
  std::vector<float> score_bias;    // (M)
  std::vector<float> combine_bias;  // (O)

  const float* score_q() const { return score.data(); }
  const float* score_k() const { return score.data() + query_size * value_rows; }
  const float* combine_q() const { return combine.data(); }
  const float* combine_applied() const { return combine.data() + query_size * output_size; }
};

// Checks and packs attn.weight (M, Dq + Dk), attn.bias (M),
// attn_combine.weight (O, Dq + Dv) and attn_combine.bias (O).
Status MakeConcatParams(int64_t query_size, ConstTensor attn_weight, ConstTensor attn_bias,
                        ConstTensor combine_weight, ConstTensor combine_bias, ConcatParams* params);

// The same from a .safetensors state_dict holding exactly those tensors.
Status LoadConcatParams(const std::string& path, int64_t query_size, ConcatParams* params);

// The checks of a forward pass's Q, K and V (shapes, strides), and the shape
// of its outputs. The valid lengths are checked with the outputs.
Status CheckConcatInputs(const ConcatParams& params, const ConstTensor& queries,
                         const ConstTensor& keys, const ConstTensor& values,
                         internal::AttentionShape* shape);

// ConcatAttention::Forward without the call scope (threads, denormals).
Status ConcatForward(const internal::CallContext& call, const ConcatParams& params,
                     ConstTensor queries, ConstTensor keys, ConstTensor values,
                     const ValidLens& valid_lens, Tensor out, Tensor attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_CONCAT_H_
