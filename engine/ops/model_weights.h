// What the models (AdditiveAttention, ConcatAttention) share: checking and
// copying the caller's weights, and checking a state_dict's tensor names.
#ifndef ATTNSCORE_OPS_MODEL_WEIGHTS_H_
#define ATTNSCORE_OPS_MODEL_WEIGHTS_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
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

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MODEL_WEIGHTS_H_
