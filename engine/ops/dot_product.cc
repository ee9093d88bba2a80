// Scaled dot-product attention (docs/semantics.md section 2): checks a
// call, resolves its valid lengths and hands it to the row path, the tile
// path or the gemm path (dot_product_paths.h).
#include "ops/dot_product.h"

#include <cmath>

#include "base/checks.h"
#include "base/valid_lens.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops {
namespace {

using dot_product::kOp;
using internal::CheckTensor;
using internal::kAnyDim;

Status CheckArguments(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                      const ValidLens& lens, const ConstTensor& out, const Tensor& attention) {
  internal::AttentionShape shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckDotProductInputs(q, k, v, &shape));
  return internal::CheckAttentionOutputs(kOp, {{"queries", q}, {"keys", k}, {"values", v}}, shape,
                                         lens, out, attention);
}

}  // namespace

Status CheckDotProductInputs(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                             internal::AttentionShape* shape) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, kAnyDim}, "(B, N, D)"));
  const int64_t batch = q.dims[0], depth = q.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "keys", k, {batch, kAnyDim, depth}, "(B, M, D)"));
  const int64_t keys = k.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "values", v, {batch, keys, kAnyDim}, "(B, M, Dv)"));
  *shape = {batch, q.dims[1], keys, v.dims[2], "(B, N, Dv)"};
  return Status::Ok();
}

Status DotProductAttention(const internal::CallContext& call, ConstTensor q, ConstTensor k,
                           ConstTensor v, const ValidLens& valid_lens, Tensor out,
                           Tensor attention_weights) {
  ATTNSCORE_RETURN_IF_ERROR(CheckArguments(q, k, v, valid_lens, out, attention_weights));
  internal::RowLengths lens;
  ATTNSCORE_RETURN_IF_ERROR(internal::RowLengths::Resolve(valid_lens, q.dims[0], q.dims[1],
                                                          k.dims[1], call.workspace, &lens));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.dims[2])));
  return RunDotProduct(call, q, k, v, lens, ScoreForm{scale}, out, attention_weights);
}

Status RunDotProduct(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                     const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                     const Tensor& out, const Tensor& attention_weights) {
  if (dot_product::UseRowPath(q, k, v, out)) {
    const int64_t key_block =
        dot_product::RowKeyBlock(q.dims[0], q.dims[1], k.dims[1], q.dims[2] + v.dims[2]);
    return dot_product::RowPath(call, q, k, v, lens, form, key_block, out, attention_weights);
  }
  // The tile kernels keep their scores in registers, scaled and nothing
  // else: calls with a cap, terms or sinks take the gemm path.
  if (form.ScaleOnly() && dot_product::UseTilePath(call, q, k, v, !attention_weights.empty())) {
    return dot_product::TilePath(call, q, k, v, lens, form, out, attention_weights);
  }
  // Terms read each row's query from its place: rows must keep their order.
  if (form.HasTerms()) {
    return dot_product::GemmPath(call, q, k, v, lens, form, out, attention_weights);
  }
  return dot_product::SortedGemmPath(call, q, k, v, lens, form, out, attention_weights);
}

}  // namespace attnscore::ops
