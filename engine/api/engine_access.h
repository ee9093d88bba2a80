// What engine/api's models reach of an Engine: the state their calls run
// with (the engine's options and its workspaces).
#ifndef ATTNSCORE_API_ENGINE_ACCESS_H_
#define ATTNSCORE_API_ENGINE_ACCESS_H_

#include "attnscore/engine.h"
#include "base/call_scope.h"

namespace attnscore::internal {

struct EngineAccess {
  static EngineContext& Context(const Engine& engine);
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_ENGINE_ACCESS_H_
