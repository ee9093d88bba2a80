// MultiHeadAttention, the public model: its parameters and the call scope
// around ops/multihead.
#include "attnscore/multihead.h"

#include <memory>
#include <utility>

#include "api/engine_access.h"
#include "api/model_maker.h"
#include "base/call_scope.h"
#include "ops/multihead.h"

namespace attnscore {

struct MultiHeadAttention::Params : ops::MultiHeadParams {};

MultiHeadAttention::MultiHeadAttention(std::unique_ptr<Params> params)
    : params_(std::move(params)) {}
MultiHeadAttention::~MultiHeadAttention() = default;

int64_t MultiHeadAttention::num_heads() const { return params_->heads; }
int64_t MultiHeadAttention::num_hiddens() const { return params_->hidden; }
int64_t MultiHeadAttention::query_size() const { return params_->query_size; }
int64_t MultiHeadAttention::key_size() const { return params_->key_size; }
int64_t MultiHeadAttention::value_size() const { return params_->value_size; }
bool MultiHeadAttention::has_bias() const { return params_->bias; }

Status MultiHeadAttention::Create(int64_t num_heads, const MultiHeadWeights& w,
                                  std::unique_ptr<MultiHeadAttention>* model) {
  return internal::ModelMaker::Make("MultiHeadAttention::Create", model, [&](Params* params) {
    return ops::MakeMultiHeadParams(num_heads, {w.w_q, w.b_q}, {w.w_k, w.b_k}, {w.w_v, w.b_v},
                                    {w.w_o, w.b_o}, params);
  });
}

Status MultiHeadAttention::Load(const std::string& path, int64_t num_heads,
                                std::unique_ptr<MultiHeadAttention>* model) {
  return internal::ModelMaker::Make("MultiHeadAttention::Load", model, [&](Params* params) {
    return ops::LoadMultiHeadParams(path, num_heads, params);
  });
}

Status MultiHeadAttention::Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                 const ValidLens& valid_lens, Causal causal,
                                 MultiHeadShapes* shapes) const {
  if (shapes == nullptr) return Status::InvalidArgument("MultiHeadAttention: shapes is null");
  ATTNSCORE_RETURN_IF_ERROR(
      ops::CheckMultiHeadInputs(*params_, queries, keys, values, valid_lens, causal));
  const int64_t batch = queries.dims[0], n = queries.dims[1];
  shapes->out = {batch, n, params_->hidden, 0};
  shapes->attention_weights = {batch, params_->heads, n, keys.dims[1]};
  return Status::Ok();
}

Status MultiHeadAttention::Forward(const Engine& engine, ConstTensor queries, ConstTensor keys,
                                   ConstTensor values, const ValidLens& valid_lens, Causal causal,
                                   Tensor out, Tensor attention_weights) const {
  return internal::RunModel(engine, "MultiHeadAttention", ops::MultiHeadForward, *params_, queries,
                            keys, values, valid_lens, causal, out, attention_weights);
}

}  // namespace attnscore
