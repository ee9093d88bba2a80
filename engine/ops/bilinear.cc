// The bilinear score (docs/semantics.md section 6): the queries projected by
// W into key space, Q' = Q W (B, N, Dk), then softmax(Q' Kᵀ) V by the dot
// product's paths (ops/dot_product_paths.h) with scale 1.
#include "ops/bilinear.h"

#include <memory>
#include <vector>

#include "base/valid_lens.h"
#include "base/workspace.h"
#include "ops/dot_product.h"
#include "ops/model_params.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "BilinearAttention";
constexpr const char* kWeight = "W.weight";
using internal::CheckTensor;
using internal::kAnyDim;

}  // namespace

Status MakeBilinearParams(ConstTensor w, BilinearParams* params) {
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, kWeight, w, {kAnyDim, kAnyDim}, "(Dq, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckFinite(kOp, kWeight, w));
  params->query_size = w.dims[0];
  params->key_size = w.dims[1];
  params->w = CopyMatrix(w, /*transpose=*/false);
  return Status::Ok();
}

Status LoadBilinearParams(const std::string& path, BilinearParams* params) {
  std::vector<io::SafetensorsTensor> tensors;
  ATTNSCORE_RETURN_IF_ERROR(io::ReadSafetensors(path, &tensors));
  ATTNSCORE_RETURN_IF_ERROR(CheckOnlyTensors(path, tensors, {kWeight}, "a bilinear attention"));
  const io::SafetensorsTensor* w = nullptr;
  ATTNSCORE_RETURN_IF_ERROR(io::FindTensor(path, tensors, kWeight, {-1, -1}, &w));
  Status s = MakeBilinearParams(ViewOf(*w), params);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return s;
}

Status CheckBilinearInputs(const BilinearParams& m, const ConstTensor& q, const ConstTensor& k,
                           const ConstTensor& v, internal::AttentionShape* shape) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, m.query_size}, "(B, N, Dq)"));
  const int64_t batch = q.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", k, {batch, kAnyDim, m.key_size}, "(B, M, Dk)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", v, {batch, k.dims[1], kAnyDim}, "(B, M, Dv)"));
  *shape = {batch, q.dims[1], k.dims[1], v.dims[2], "(B, N, Dv)"};
  return Status::Ok();
}

Status BilinearForward(const internal::CallContext& call, const BilinearParams& m, ConstTensor q,
                       ConstTensor k, ConstTensor v, const ValidLens& valid_lens, Tensor out,
                       Tensor attention) {
  internal::AttentionShape shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckBilinearInputs(m, q, k, v, &shape));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckAttentionOutputs(
      kOp, {{"queries", q}, {"keys", k}, {"values", v}}, shape, valid_lens, out, attention));
  internal::RowLengths lens;
  ATTNSCORE_RETURN_IF_ERROR(internal::RowLengths::Resolve(valid_lens, q.dims[0], q.dims[1],
                                                          k.dims[1], call.workspace, &lens));
  std::shared_ptr<const matmul::Plan> project;
  ATTNSCORE_RETURN_IF_ERROR(LinearPlan(q, m.key_size, /*bias=*/false, nullptr, &project));
  float* const projected = call.workspace.Floats(
      internal::ScratchSlot::kProjections, static_cast<size_t>(q.dims[0] * q.dims[1] * m.key_size));
  ATTNSCORE_RETURN_IF_ERROR(project->Run(call.workspace, q.data, m.w.data(), projected));
  return RunDotProduct(call, ConstTensor(projected, {q.dims[0], q.dims[1], m.key_size}), k, v, lens,
                       ScoreForm{/*scale=*/1.0f}, out, attention);
}

}  // namespace attnscore::ops
