// What the models (AdditiveAttention, ConcatAttention) share: checking and
// copying the caller's weights, checking a state_dict's tensor names, and
// the shape of a Forward call.
#ifndef ATTNSCORE_OPS_MODEL_WEIGHTS_H_
#define ATTNSCORE_OPS_MODEL_WEIGHTS_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "api/call_scope.h"
#include "attnscore/engine.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "io/safetensors.h"

namespace attnscore::ops {

// Fails on NaN or Inf in a checked rank-1 or rank-2 view, naming the index:
// a weight that is not finite means a corrupt or diverged model, better
// reported than served.
Status CheckFinite(const char* op, const char* name, const ConstTensor& weights);

// A checked rank-2 view (rows, cols) copied in C order, or as its transpose
// (cols, rows) when `transpose`; a rank-1 view (n) counts as (1, n).
std::vector<float> CopyMatrix(const ConstTensor& weights, bool transpose);

// Fails on a tensor whose name is not in `names`, so that another model's
// file, or a whole checkpoint, does not load by accident.
Status CheckOnlyTensors(const std::string& path, const std::vector<io::SafetensorsTensor>& tensors,
                        std::initializer_list<const char*> names, const char* model);

// A view of a loaded tensor (rank 1 or 2).
ConstTensor ViewOf(const io::SafetensorsTensor& tensor);

// A model's Forward, as one engine call: check(model, q, k, v, lens, out,
// weights) first, then a Pass built from the same arguments makes every
// plan (Prepare) before anything is written (Run).
template <class Pass, class Model, class Check>
Status RunForward(const char* op, Check check, const Engine& engine, const Model& model,
                  const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                  const ValidLens& lens, const Tensor& out, const Tensor& weights) {
  CallScope scope(engine.options().threads);
  return Guarded(op, [&] {
    ATTNSCORE_RETURN_IF_ERROR(check(model, q, k, v, lens, out, weights));
    Pass pass(engine.options(), model, q, k, v, lens, out, weights);
    ATTNSCORE_RETURN_IF_ERROR(pass.Prepare());
    return pass.Run();
  });
}

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MODEL_WEIGHTS_H_
