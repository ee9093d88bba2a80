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

namespace attnscore::ops {

// The checks of DotProductAttention's Q, K and V (shapes, strides), and the
// shape of its outputs. The valid lengths are checked with the outputs.
Status CheckDotProductInputs(const ConstTensor& queries, const ConstTensor& keys,
                             const ConstTensor& values, internal::AttentionShape* shape);

// Engine::DotProductAttention without the call scope (threads, denormals).
Status DotProductAttention(const internal::CallContext& call, ConstTensor queries, ConstTensor keys,
                           ConstTensor values, const ValidLens& valid_lens, Tensor out,
                           Tensor attention_weights);

// What a query's product with a key becomes before the masks and the
// softmax (docs/semantics.md section 5.1): s = scale · q·k, then, with a
// soft cap c > 0, c · tanh(s / c) (kernels::SoftCap).
// With `sinks`, each row's softmax also has a sink logit z in its
// denominator (section 5.5): weights e^{s_j} / (Σ_j e^{s_j} + e^z), summing
// to less than 1, and no value. Row (g, i) of a call of G groups of R rows
// (the grouped row path's: a K/V head's query heads) takes
// sinks[g · sink_group_step + i · sink_row_step]; a call of one head's
// queries takes steps 0, sinks[0] for every row.
struct ScoreForm {
  float scale;
  float softcap = 0.0f;  // 0: none
  const float* sinks = nullptr;  // none
  int64_t sink_group_step = 0, sink_row_step = 0;

  const float* Sink(int64_t g, int64_t i) const {
    return sinks ? sinks + g * sink_group_step + i * sink_row_step : nullptr;
  }
};

// The checked op's computation, for the ops built on it (multi-head runs one
// per head): views checked as the op checks them, lengths resolved, scores
// made as `form` says.
Status RunDotProduct(const internal::CallContext& call, const ConstTensor& queries,
                     const ConstTensor& keys, const ConstTensor& values,
                     const internal::RowLengths& lens, const ScoreForm& form, const Tensor& out,
                     const Tensor& attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_DOT_PRODUCT_H_
