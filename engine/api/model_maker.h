// What every public model (AdditiveAttention, ConcatAttention,
// BilinearAttention, MultiHeadAttention) shares: how it is made, by Create
// from the caller's arrays or by Load from a file (ModelMaker, a friend of
// each, so that their constructors stay private), its checks and the call
// its Forward runs in.
#ifndef ATTNSCORE_API_MODEL_MAKER_H_
#define ATTNSCORE_API_MODEL_MAKER_H_

#include <memory>
#include <string>

#include "api/engine_access.h"
#include "api/output_shapes.h"
#include "attnscore/engine.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"

namespace attnscore::internal {

struct ModelMaker {
  // `call` ("AdditiveAttention::Load") refuses a null `model`, then fill()
  // sets the model's parameters; an exception (out of memory) becomes a
  // Status. *model is set only on success.
  template <class Model, class Fill>
  static Status Make(const char* call, std::unique_ptr<Model>* model, Fill fill) {
    if (model == nullptr) return Status::InvalidArgument(std::string(call) + ": model is null");
    return Guarded(call, [&] {
      auto params = std::make_unique<typename Model::Params>();
      ATTNSCORE_RETURN_IF_ERROR(fill(params.get()));
      model->reset(new Model(std::move(params)));
      return Status::Ok();
    });
  }
};

// A (B, N, M) model's Check: check(params, q, k, v, &shape), then the
// valid lengths against the shape, into *shapes.
template <class Params, class Check>
Status CheckModelInputs(const char* op, Check check, const Params& params, const ConstTensor& q,
                        const ConstTensor& k, const ConstTensor& v, const ValidLens& valid_lens,
                        OutputShapes* shapes) {
  return ReportOutputShapes(valid_lens, op, shapes,
                            [&](AttentionShape* shape) { return check(params, q, k, v, shape); });
}

// A model's Forward: forward(call, args...) in a call of `engine`.
template <class Forward, class... Args>
Status RunModel(const Engine& engine, const char* op, Forward forward, const Args&... args) {
  return RunCall(EngineAccess::Context(engine), op,
                 [&](const CallContext& call) { return forward(call, args...); });
}

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_MODEL_MAKER_H_
