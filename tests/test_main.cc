// The test binary's main: applies the ISA cap ($ATTNSCORE_ISA, as any engine
// would) before GoogleTest expands the per-target suites, so that under a cap
// they cover exactly the Highway targets the cap allows.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "attnscore/engine.h"

namespace {
// ctest's SKIP_RETURN_CODE for the per-ISA runs (tests/CMakeLists.txt).
constexpr int kSkipped = 77;
}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<attnscore::Engine> engine;
  const attnscore::Status s = attnscore::Engine::Create(attnscore::EngineOptions(), &engine);
  if (!s.ok()) {
    std::fprintf(stderr, "attnscore_tests: %s\n", s.message().c_str());
    // A cap this CPU lacks cannot be tested here; anything else is a failure.
    return s.code() == attnscore::StatusCode::kUnsupported ? kSkipped : 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
