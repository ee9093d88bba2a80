// The bilinear score (docs/semantics.md section 6): Q W, then the dot
// product's paths with scale 1.
#ifndef ATTNSCORE_OPS_BILINEAR_H_
#define ATTNSCORE_OPS_BILINEAR_H_

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

struct BilinearParams {
  int64_t query_size = 0, key_size = 0;
  std::vector<float> w;  // (Dq, Dk) dense: q · w is qᵀ W
};

Status MakeBilinearParams(ConstTensor w, BilinearParams* params);
Status LoadBilinearParams(const std::string& path, BilinearParams* params);

// The checks of a forward pass's Q, K and V, and the shape of its outputs.
Status CheckBilinearInputs(const BilinearParams& params, const ConstTensor& queries,
                           const ConstTensor& keys, const ConstTensor& values,
                           internal::AttentionShape* shape);

// BilinearAttention::Forward without the call scope.
Status BilinearForward(const internal::CallContext& call, const BilinearParams& params,
                       ConstTensor queries, ConstTensor keys, ConstTensor values,
                       const ValidLens& valid_lens, Tensor out, Tensor attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_BILINEAR_H_
