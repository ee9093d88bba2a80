// The public OutputShapes of an op whose inputs passed its checks.
#ifndef ATTNSCORE_API_OUTPUT_SHAPES_H_
#define ATTNSCORE_API_OUTPUT_SHAPES_H_

#include <string>

#include "attnscore/engine.h"
#include "attnscore/status.h"
#include "base/checks.h"
#include "base/valid_lens.h"

namespace attnscore::internal {

// Runs check(&shape), which checks the op's tensors, then checks the valid
// lengths against the shape, and then sets *shapes from it.
template <class Check>
Status ReportOutputShapes(const ValidLens& valid_lens, const char* op, OutputShapes* shapes,
                          Check check) {
  if (shapes == nullptr) return Status::InvalidArgument(std::string(op) + ": shapes is null");
  AttentionShape shape{};
  ATTNSCORE_RETURN_IF_ERROR(check(&shape));
  ATTNSCORE_RETURN_IF_ERROR(CheckValidLens(valid_lens, shape.batch, shape.queries, op, {}));
  shapes->out = {shape.batch, shape.queries, shape.out_features};
  shapes->attention_weights = {shape.batch, shape.queries, shape.keys};
  return Status::Ok();
}

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_OUTPUT_SHAPES_H_
