// AdditiveAttention, the public model: its parameters and the call scope
// around ops/additive.
#include "attnscore/additive.h"

#include <memory>
#include <new>
#include <utility>

#include "api/engine_access.h"
#include "api/model_maker.h"
#include "api/output_shapes.h"
#include "base/call_scope.h"
#include "ops/additive.h"

namespace attnscore {

struct AdditiveAttention::Params : ops::AdditiveParams {};

AdditiveAttention::AdditiveAttention(std::unique_ptr<Params> params) : params_(std::move(params)) {}
AdditiveAttention::~AdditiveAttention() = default;

int64_t AdditiveAttention::query_size() const { return params_->query_size; }
int64_t AdditiveAttention::key_size() const { return params_->key_size; }
int64_t AdditiveAttention::hidden_size() const { return params_->hidden; }

Status AdditiveAttention::Create(ConstTensor w_q, ConstTensor w_k, ConstTensor w_v,
                                 std::unique_ptr<AdditiveAttention>* model) {
  return internal::ModelMaker::Make("AdditiveAttention::Create", model, [&](Params* params) {
    return ops::MakeAdditiveParams(w_q, w_k, w_v, params);
  });
}

Status AdditiveAttention::Load(const std::string& path, std::unique_ptr<AdditiveAttention>* model) {
  return internal::ModelMaker::Make("AdditiveAttention::Load", model, [&](Params* params) {
    return ops::LoadAdditiveParams(path, params);
  });
}

Status AdditiveAttention::Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                const ValidLens& valid_lens, OutputShapes* shapes) const {
  return internal::CheckModelInputs("AdditiveAttention", ops::CheckAdditiveInputs, *params_,
                                    queries, keys, values, valid_lens, shapes);
}

Status AdditiveAttention::Forward(const Engine& engine, ConstTensor queries, ConstTensor keys,
                                  ConstTensor values, const ValidLens& valid_lens, Tensor out,
                                  Tensor attention_weights) const {
  return internal::RunModel(engine, "AdditiveAttention", ops::AdditiveForward, *params_, queries,
                            keys, values, valid_lens, out, attention_weights);
}

}  // namespace attnscore
