// How every public model (AdditiveAttention, ConcatAttention,
// BilinearAttention, MultiHeadAttention) is made, by Create from the
// caller's arrays or by Load from a file: a friend of each, so that their
// constructors stay private.
#ifndef ATTNSCORE_API_MODEL_MAKER_H_
#define ATTNSCORE_API_MODEL_MAKER_H_

#include <memory>
#include <string>

#include "attnscore/status.h"
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

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_MODEL_MAKER_H_
