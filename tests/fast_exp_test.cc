// The accuracy contract of ExpOfDifference (engine/kernels/fast_exp-inl.h),
// measured on every target against exp in double.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

#include "kernels/fast_exp.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class FastExpTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(FastExpTest);

// The floats whose bit patterns run from `first` to `last` (inclusive) in
// steps of `step`, then `last` itself and `extra`, in blocks (the
// non-positive sweep has 160 million values; holding them all would take
// over a GB per process).
template <class Visit>
void Sweep(float first, float last, uint32_t step, float extra, Visit visit) {
  constexpr size_t kBlock = 1 << 20;
  std::vector<float> x, y(kBlock);
  x.reserve(kBlock);
  uint32_t from, to;
  std::memcpy(&from, &first, sizeof(from));
  std::memcpy(&to, &last, sizeof(to));
  auto flush = [&] {
    kernels::ExpArray(x.data(), x.size(), y.data());
    for (size_t i = 0; i < x.size(); ++i) visit(x[i], y[i]);
    x.clear();
  };
  for (uint64_t bits = from; bits <= to; bits += step) {
    float f;
    const auto b32 = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b32, sizeof(f));
    x.push_back(f);
    if (x.size() == kBlock) flush();
  }
  x.push_back(last);
  x.push_back(extra);
  flush();
}

// Every 7th float from -0 down to -87.5, where a softmax shifted by its max
// takes exps, and every 97th from 0 up to 14, where the streamed softmax's
// shift by its first scores may take them (masked_softmax-inl.h,
// kMaxShiftedSum).
TEST_P(FastExpTest, ErrorWithinTheStatedBound) {
  double worst_near = 0, worst_far = 0, worst_tiny_abs = 0;
  const auto visit = [&](float x, float y) {
    const double want = std::exp(static_cast<double>(x));
    if (want < 0x1p-126) {  // flushed range: only the absolute error matters
      worst_tiny_abs = std::max(worst_tiny_abs, std::abs(y - want));
      return;
    }
    const double rel = std::abs(y - want) / want;
    double& worst = x >= -20.0f ? worst_near : worst_far;
    worst = std::max(worst, rel);
  };
  Sweep(-0.0f, -87.5f, 7, -1e-30f, visit);
  Sweep(0.0f, 14.0f, 97, 1e-30f, visit);
  char text[64];
  std::snprintf(text, sizeof(text), "%.3g / %.3g", worst_near, worst_far);
  RecordProperty("max_rel_error_in_minus20_to_14_and_below", text);
  EXPECT_LE(worst_near, 1.6e-6);
  EXPECT_LE(worst_far, 6e-6);
  EXPECT_LE(worst_tiny_abs, 1.2e-38);
}

TEST_P(FastExpTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float x[] = {0.0f, -0.0f, -inf, -200.0f, -87.4f, -1.0f, 89.0f, 1e4f, inf, 88.0f};
  float y[std::size(x)];
  kernels::ExpArray(x, std::size(x), y);
  EXPECT_NEAR(y[0], 1.0f, 2e-7f);
  EXPECT_NEAR(y[1], 1.0f, 2e-7f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_GE(y[4], 0.0f);  // exp(-87.4) ~ 1.1e-38: 0 or subnormal outside engine calls
  EXPECT_LT(y[4], 0x1p-126f);
  EXPECT_NEAR(y[5], std::exp(-1.0), 4e-7);
  // Past float's range, +Inf, never a wrapped exponent: a softmax's sum
  // of exps must show that its shift was too low.
  EXPECT_EQ(y[6], inf);
  EXPECT_EQ(y[7], inf);
  EXPECT_EQ(y[8], inf);
  EXPECT_NEAR(y[9], std::exp(88.0), 1e-5 * std::exp(88.0));
}

}  // namespace
}  // namespace attnscore::test
