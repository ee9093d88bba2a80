// Additive attention's parameters (ops/additive.h): checked and copied
// from the caller's arrays, or loaded from a state_dict file.
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "io/safetensors.h"
#include "ops/additive.h"
#include "ops/model_params.h"

namespace attnscore::ops {
namespace {

using internal::CheckTensor;
using internal::kAnyDim;

constexpr const char* kOp = "AdditiveAttention";

// The "state_dict" names, as PyTorch's module calls its parameters.
constexpr const char* kQueryWeight = "W_q.weight";
constexpr const char* kKeyWeight = "W_k.weight";
constexpr const char* kScoreWeight = "w_v.weight";

}  // namespace

Status MakeAdditiveParams(ConstTensor w_q, ConstTensor w_k, ConstTensor w_v,
                          AdditiveParams* params) {
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kQueryWeight, w_q, {kAnyDim, kAnyDim}, "(H, Dq)"));
  const int64_t hidden = w_q.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kKeyWeight, w_k, {hidden, kAnyDim}, "(H, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kScoreWeight, w_v, {1, hidden}, "(1, H)"));
  for (auto [name, view] : {std::pair{kQueryWeight, w_q}, {kKeyWeight, w_k}, {kScoreWeight, w_v}}) {
    ATTNSCORE_RETURN_IF_ERROR(CheckFinite(kOp, name, view));
  }
  params->query_size = w_q.dims[1];
  params->key_size = w_k.dims[1];
  params->hidden = hidden;
  params->w_q_t = CopyMatrix(w_q, /*transpose=*/true);
  params->w_k = CopyMatrix(w_k, /*transpose=*/false);
  params->w_v = CopyMatrix(w_v, /*transpose=*/false);
  double sum = 0;
  for (float w : params->w_v) sum += w;
  params->w_sum = static_cast<float>(sum);
  return Status::Ok();
}

Status LoadAdditiveParams(const std::string& path, AdditiveParams* params) {
  std::vector<io::SafetensorsTensor> tensors;
  ATTNSCORE_RETURN_IF_ERROR(io::ReadSafetensors(path, &tensors));
  ATTNSCORE_RETURN_IF_ERROR(CheckOnlyTensors(
      path, tensors, {kQueryWeight, kKeyWeight, kScoreWeight}, "an additive attention"));
  const io::SafetensorsTensor *w_q = nullptr, *w_k = nullptr, *w_v = nullptr;
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kQueryWeight, {-1, -1}, &w_q));
  const int64_t hidden = w_q->shape[0];
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kKeyWeight, {hidden, -1}, &w_k));
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kScoreWeight, {1, hidden}, &w_v));
  Status s = MakeAdditiveParams(ViewOf(*w_q), ViewOf(*w_k), ViewOf(*w_v), params);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return s;
}

}  // namespace attnscore::ops
