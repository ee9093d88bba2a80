// Scaled dot-product attention (docs/semantics.md section 2).
#ifndef ATTNSCORE_OPS_DOT_PRODUCT_H_
#define ATTNSCORE_OPS_DOT_PRODUCT_H_

#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"
#include "base/checks.h"
#include "base/valid_lens.h"
#include "ops/score_form.h"

namespace attnscore::ops {

// The checks of DotProductAttention's Q, K and V (shapes, strides), and the
// shape of its outputs. The valid lengths are checked with the outputs.
Status CheckDotProductInputs(const ConstTensor& queries, const ConstTensor& keys,
                             const ConstTensor& values, internal::AttentionShape* shape);

// Engine::DotProductAttention without the call scope (threads, denormals).
Status DotProductAttention(const internal::CallContext& call, ConstTensor queries, ConstTensor keys,
                           ConstTensor values, const ValidLens& valid_lens, Tensor out,
                           Tensor attention_weights);

// The checked op's computation, for the ops built on it (multi-head runs one
// per head): views checked as the op checks them, lengths resolved, scores
// made as `form` says.
Status RunDotProduct(const internal::CallContext& call, const ConstTensor& queries,
                     const ConstTensor& keys, const ConstTensor& values,
                     const internal::RowLengths& lens, const ScoreForm& form, const Tensor& out,
                     const Tensor& attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_H_
