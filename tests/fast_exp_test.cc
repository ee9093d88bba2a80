// The accuracy contract of ExpNonPositive (engine/kernels/fast_exp-inl.h),
// measured on every target against exp in double.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/fast_exp.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class FastExpTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(FastExpTest);

// Every 7th float bit pattern from -0 down to -87.5, in blocks (the sweep has
// 160 million values; holding them all would take over a GB per process).
template <class Visit>
void SweepNonPositive(Visit visit) {
  constexpr size_t kBlock = 1 << 20;
  std::vector<float> x, y(kBlock);
  x.reserve(kBlock);
  uint32_t low;
  const float limit = -87.5f;
  std::memcpy(&low, &limit, sizeof(low));
  auto flush = [&] {
    kernels::ExpNonPositiveArray(x.data(), x.size(), y.data());
    for (size_t i = 0; i < x.size(); ++i) visit(x[i], y[i]);
    x.clear();
  };
  for (uint64_t bits = 0x80000000u; bits <= low; bits += 7) {
    float f;
    const auto b32 = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b32, sizeof(f));
    x.push_back(f);
    if (x.size() == kBlock) flush();
  }
  x.push_back(limit);
  x.push_back(-1e-30f);
  flush();
}

TEST_P(FastExpTest, ErrorWithinTheStatedBound) {
  double worst_near = 0, worst_far = 0, worst_tiny_abs = 0;
  SweepNonPositive([&](float x, float y) {
    const double want = std::exp(static_cast<double>(x));
    if (want < 0x1p-126) {  // flushed range: only the absolute error matters
      worst_tiny_abs = std::max(worst_tiny_abs, std::abs(y - want));
      return;
    }
    const double rel = std::abs(y - want) / want;
    double& worst = x >= -20.0f ? worst_near : worst_far;
    worst = std::max(worst, rel);
  });
  char text[64];
  std::snprintf(text, sizeof(text), "%.3g / %.3g", worst_near, worst_far);
  RecordProperty("max_rel_error_above_and_below_minus20", text);
  EXPECT_LE(worst_near, 1.6e-6);
  EXPECT_LE(worst_far, 6e-6);
  EXPECT_LE(worst_tiny_abs, 1.2e-38);
}

TEST_P(FastExpTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float x[] = {0.0f, -0.0f, -inf, -200.0f, -87.4f, -1.0f};
  float y[6];
  kernels::ExpNonPositiveArray(x, 6, y);
  EXPECT_NEAR(y[0], 1.0f, 2e-7f);
  EXPECT_NEAR(y[1], 1.0f, 2e-7f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_GE(y[4], 0.0f);  // exp(-87.4) ~ 1.1e-38: 0 or subnormal outside engine calls
  EXPECT_LT(y[4], 0x1p-126f);
  EXPECT_NEAR(y[5], std::exp(-1.0), 4e-7);
}

}  // namespace
}  // namespace attnscore::test
