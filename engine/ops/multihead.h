// Multi-head attention (docs/semantics.md section 5): the dot-product
// attention of section 2 per query head, K and V shared by groups of heads.
#ifndef ATTNSCORE_OPS_MULTIHEAD_H_
#define ATTNSCORE_OPS_MULTIHEAD_H_

#include "attnscore/multihead_options.h"
#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore::ops {

// Engine::MultiHeadAttention without the call scope (threads, denormals).
// Q (B, N, Hq, D), K (B, M, Hkv, D), V (B, M, Hkv, Dv), out (B, N, Hq, Dv),
// attention_weights (B, Hq, N, M) or empty; Hq a multiple of Hkv.
Status MultiHeadAttention(const EngineOptions& options, ConstTensor queries, ConstTensor keys,
                          ConstTensor values, const ValidLens& valid_lens,
                          const MultiHeadOptions& multihead, Tensor out,
                          Tensor attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MULTIHEAD_H_
