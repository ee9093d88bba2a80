// What the models (AdditiveAttention, ConcatAttention) share: checking and
// copying the caller's parameters, checking a state_dict's tensor names,
// and the shape of a forward pass.
#ifndef ATTNSCORE_OPS_MODEL_PARAMS_H_
#define ATTNSCORE_OPS_MODEL_PARAMS_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"
#include "base/valid_lens.h"
#include "io/safetensors.h"
#include "matmul/matmul.h"

namespace attnscore::ops {

// Fails on NaN or Inf in a checked rank-1 or rank-2 view, naming the index:
// a parameter that is not finite means a corrupt or diverged model, better
// reported than served.
Status CheckFinite(const char* op, const char* name, const ConstTensor& param);

// A checked rank-2 view (rows, cols) copied in C order, or as its transpose
// (cols, rows) when `transpose`; a rank-1 view (n) counts as (1, n).
std::vector<float> CopyMatrix(const ConstTensor& param, bool transpose);

// Fails on a tensor whose name is not in `names`, so that another model's
// file, or a whole checkpoint, does not load by accident.
Status CheckOnlyTensors(const std::string& path, const std::vector<io::SafetensorsTensor>& tensors,
                        std::initializer_list<const char*> names, const char* model);

// A view of a loaded tensor (rank 1 or 2).
ConstTensor ViewOf(const io::SafetensorsTensor& tensor);

// The plan of a linear layer over a batch of (rows, in) matrices `x`:
// x · w (+ bias) with w a dense (in, out) matrix (the layer's weight
// transposed), into dense (rows, out) matrices, or into `y`'s strides when
// `y` is given. Entries stored one after another run as one matrix.
Status LinearPlan(const ConstTensor& x, int64_t out, bool bias, const ConstTensor* y,
                  std::shared_ptr<const matmul::Plan>* plan);

// A model's forward pass: check(params, q, k, v, lens, out, attention_weights)
// first, then the lengths are resolved (M = V's rows) and a Pass built from
// the same arguments makes every plan (Prepare) before anything is written
// (Run).
template <class Pass, class Params, class Check>
Status RunForward(Check check, const internal::CallContext& call, const Params& params,
                  const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                  const ValidLens& valid_lens, const Tensor& out, const Tensor& attention_weights) {
  ATTNSCORE_RETURN_IF_ERROR(check(params, q, k, v, valid_lens, out, attention_weights));
  internal::RowLengths lens;
  ATTNSCORE_RETURN_IF_ERROR(internal::RowLengths::Resolve(valid_lens, q.dims[0], q.dims[1],
                                                          v.dims[1], call.workspace, &lens));
  Pass pass(call, params, q, k, v, lens, out, attention_weights);
  ATTNSCORE_RETURN_IF_ERROR(pass.Prepare());
  return pass.Run();
}

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MODEL_PARAMS_H_
