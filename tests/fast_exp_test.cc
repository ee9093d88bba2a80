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

// Every 7th float bit pattern from -0 down to -87.5, plus the ends.
std::vector<float> SweepNonPositive() {
  std::vector<float> x;
  uint32_t low;
  const float limit = -87.5f;
  std::memcpy(&low, &limit, sizeof(low));
  for (uint32_t bits = 0x80000000u; bits <= low; bits += 7) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  x.push_back(limit);
  x.push_back(-1e-30f);
  return x;
}

TEST_P(FastExpTest, ErrorWithinTheStatedBound) {
  static const std::vector<float> x = SweepNonPositive();
  std::vector<float> y(x.size());
  kernels::ExpNonPositiveArray(x.data(), x.size(), y.data());
  double worst_near = 0, worst_far = 0, worst_tiny_abs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    if (want < 0x1p-126) {  // flushed range: only the absolute error matters
      worst_tiny_abs = std::max(worst_tiny_abs, std::abs(y[i] - want));
      continue;
    }
    const double rel = std::abs(y[i] - want) / want;
    (x[i] >= -20.0f ? worst_near : worst_far) = std::max(x[i] >= -20.0f ? worst_near : worst_far, rel);
  }
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
