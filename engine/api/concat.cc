// ConcatAttention, the public model: its parameters and the call scope
// around ops/concat.
#include "attnscore/concat.h"

#include <memory>
#include <utility>

#include "api/engine_access.h"
#include "api/model_maker.h"
#include "api/output_shapes.h"
#include "base/call_scope.h"
#include "ops/concat.h"

namespace attnscore {

struct ConcatAttention::Params : ops::ConcatParams {};

ConcatAttention::ConcatAttention(std::unique_ptr<Params> params) : params_(std::move(params)) {}
ConcatAttention::~ConcatAttention() = default;

int64_t ConcatAttention::query_size() const { return params_->query_size; }
int64_t ConcatAttention::key_size() const { return params_->key_size; }
int64_t ConcatAttention::value_rows() const { return params_->value_rows; }
int64_t ConcatAttention::value_size() const { return params_->value_size; }
int64_t ConcatAttention::output_size() const { return params_->output_size; }

Status ConcatAttention::Create(int64_t query_size, ConstTensor attn_weight, ConstTensor attn_bias,
                               ConstTensor combine_weight, ConstTensor combine_bias,
                               std::unique_ptr<ConcatAttention>* model) {
  return internal::ModelMaker::Make("ConcatAttention::Create", model, [&](Params* params) {
    return ops::MakeConcatParams(query_size, attn_weight, attn_bias, combine_weight, combine_bias,
                                 params);
  });
}

Status ConcatAttention::Load(const std::string& path, int64_t query_size,
                             std::unique_ptr<ConcatAttention>* model) {
  return internal::ModelMaker::Make("ConcatAttention::Load", model, [&](Params* params) {
    return ops::LoadConcatParams(path, query_size, params);
  });
}

Status ConcatAttention::Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
                              const ValidLens& valid_lens, OutputShapes* shapes) const {
  return internal::CheckModelInputs("ConcatAttention", ops::CheckConcatInputs, *params_, queries,
                                    keys, values, valid_lens, shapes);
}

Status ConcatAttention::Forward(const Engine& engine, ConstTensor queries, ConstTensor keys,
                                ConstTensor values, const ValidLens& valid_lens, Tensor out,
                                Tensor attention_weights) const {
  return internal::RunModel(engine, "ConcatAttention", ops::ConcatForward, *params_, queries, keys,
                            values, valid_lens, out, attention_weights);
}

}  // namespace attnscore
