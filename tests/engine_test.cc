// Engine creation: options, the process-wide ISA cap, the runtime report.
#include <fenv.h>
#include <omp.h>
#include <xmmintrin.h>

#include <limits>
#include <string>

#include "test_util.h"

namespace attnscore::test {
namespace {

TEST(Engine, RejectsBadThreadCount) {
  EngineOptions options;
  options.threads = 0;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("threads is 0"), std::string::npos) << s.message();
  EXPECT_EQ(engine, nullptr);
}

TEST(Engine, CreateRejectsANullOutput) {
  const Status s = Engine::Create(EngineOptions(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("engine is null"), std::string::npos) << s.message();
}

TEST(Engine, IsaCapCannotChangeOnceSet) {
  DefaultEngine();  // fixes the cap at "best"
  EngineOptions options;
  options.isa = Isa::kAvx2;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("already 'best'"), std::string::npos) << s.message();
  options.isa = Isa::kBest;
  EXPECT_TRUE(Engine::Create(options, &engine).ok());
}

TEST(Engine, CallsRestoreTheCallersFloatingPointModeAndThreads) {
  // The caller traps invalid operations and runs 3 OpenMP threads; a row with
  // -Inf among its valid scores makes the kernel compute Inf * 0 internally.
  const float x[] = {1.0f, -std::numeric_limits<float>::infinity(), 2.0f, 5.0f};
  float y[4];
  const int64_t lens[] = {3};
  omp_set_num_threads(3);
  feclearexcept(FE_ALL_EXCEPT);
  feenableexcept(FE_INVALID);
  const unsigned before = _mm_getcsr();
  const Status s = DefaultEngine().MaskedSoftmax(ConstTensor(x, {1, 1, 4}),
                                                 ValidLens::PerBatch(lens, 1), Tensor(y, {1, 1, 4}));
  const unsigned after = _mm_getcsr();
  fedisableexcept(FE_INVALID);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(before & ~0x3Fu, after & ~0x3Fu) << "MXCSR modes and masks restored";
  EXPECT_EQ(omp_get_max_threads(), 3);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_NEAR(y[0] + y[2], 1.0f, 1e-6f);
  omp_set_num_threads(1);
}

TEST(Engine, ResultsDoNotDependOnTheCallersRoundingMode) {
  const std::vector<float> x = RandomFloats(3 * 64, 5, 2.0f);
  std::vector<float> nearest(x.size()), upward(x.size());
  const auto run = [&](std::vector<float>* y) {
    ASSERT_TRUE(DefaultEngine()
                    .MaskedSoftmax(ConstTensor(x.data(), {3, 1, 64}), ValidLens::None(),
                                   Tensor(y->data(), {3, 1, 64}))
                    .ok());
  };
  run(&nearest);
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    fesetround(mode);
    run(&upward);
    const int after = fegetround();
    fesetround(FE_TONEAREST);
    EXPECT_EQ(after, mode) << "the caller's rounding mode is restored";
    EXPECT_EQ(nearest, upward) << "rounding mode " << mode;
  }
}

TEST(Engine, IsaNamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512, Isa::kBest}) {
    Isa parsed;
    ASSERT_TRUE(ParseIsa(IsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  Isa parsed;
  EXPECT_FALSE(ParseIsa("avx1024", &parsed));
}

TEST(Engine, DescribeNamesTargetsAndOnednn) {
  const std::string text = DefaultEngine().Describe();
  EXPECT_NE(text.find("highway targets on this cpu:"), std::string::npos) << text;
  EXPECT_NE(text.find("onednn version: 2."), std::string::npos) << text;
  EXPECT_NE(text.find("threads: 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace attnscore::test
