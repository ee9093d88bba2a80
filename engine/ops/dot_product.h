// Scaled dot-product attention (REFERENCE.md section 2).
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_H_

#include "attnscore/engine.h"

namespace attnscore::ops {

// Engine::DotProductAttention without the call scope (threads, denormals).
Status DotProductAttention(const EngineOptions& options, ConstTensor queries,
                           ConstTensor keys, ConstTensor values,
                           const ValidLens& valid_lens, Tensor out,
                           Tensor weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_H_
