// Engine creation: options, the process-wide ISA cap, the runtime report.
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
  EXPECT_NE(text.find("highway targets supported:"), std::string::npos) << text;
  EXPECT_NE(text.find("onednn version: 2."), std::string::npos) << text;
  EXPECT_NE(text.find("threads: 1"), std::string::npos) << text;
}

}  // namespace
}  // namespace attnscore::test
