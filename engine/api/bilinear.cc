// BilinearAttention, the public model: its parameter and the call scope
// around ops/bilinear.
#include "attnscore/bilinear.h"

#include <memory>
#include <utility>

#include "api/engine_access.h"
#include "api/model_maker.h"
#include "api/output_shapes.h"
#include "base/call_scope.h"
#include "ops/bilinear.h"

namespace attnscore {

struct BilinearAttention::Params : ops::BilinearParams {};

BilinearAttention::BilinearAttention(std::unique_ptr<Params> params) : params_(std::move(params)) {}
BilinearAttention::~BilinearAttention() = default;

int64_t BilinearAttention::query_size() const { return params_->query_size; }
int64_t BilinearAttention::key_size() const { return params_->key_size; }

Status BilinearAttention::Create(ConstTensor w, std::unique_ptr<BilinearAttention>* model) {
  return internal::ModelMaker::Make("BilinearAttention::Create", model, [&](Params* params) {
    return ops::MakeBilinearParams(w, params);
  });
}

Status BilinearAttention::Load(const std::string& path, std::unique_ptr<BilinearAttention>* model) {
  return internal::ModelMaker::Make("BilinearAttention::Load", model, [&](Params* params) {
    return ops::LoadBilinearParams(path, params);
  });
}

Status BilinearAttention::Check(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                const ValidLens& valid_lens, OutputShapes* shapes) const {
  return internal::CheckModelInputs("BilinearAttention", ops::CheckBilinearInputs, *params_,
                                    queries, keys, values, valid_lens, shapes);
}

Status BilinearAttention::Forward(const Engine& engine, ConstTensor queries, ConstTensor keys,
                                  ConstTensor values, const ValidLens& valid_lens, Tensor out,
                                  Tensor attention_weights) const {
  return internal::RunModel(engine, "BilinearAttention", ops::BilinearForward, *params_, queries,
                            keys, values, valid_lens, out, attention_weights);
}

}  // namespace attnscore
