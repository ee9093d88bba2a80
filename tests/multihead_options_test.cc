// The options of Engine::MultiHeadAttention past the mask and the scale
// (docs/semantics.md section 5.1): logit soft-capping on every path the op
// takes (the grouped row path over whole rows and over key blocks, the gemm
// path a capped call takes where the tile path would run, bf16 mode,
// heads-first views), against float64 math written from the definition,
// outputs and weights; the cap's refusals; the same bits for any thread
// count; KvCache::Attend's cap in each precision. Then the kernel itself
// (kernels::SoftCap) against std::tanh.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/soft_cap.h"
#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MultiHeadOptionsTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MultiHeadOptionsTest);
class SoftCapKernelTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(SoftCapKernelTest);

Result RunOp(const Engine& engine, const Shape& s, const Inputs& in, const ValidLens& lens,
             const Form& form, bool want_weights = true) {
  return RunMultiHead(engine, s, in, lens, OptionsOf(s, form), want_weights);
}

// Scores of standard deviation 6 (scale 1.5 on D 16 of N(0, 1)) against a
// cap of 1: the cap moves every weight, so a path that skipped it would be
// far off.
constexpr double kScale = 1.5, kCap = 1.0;

TEST_P(MultiHeadOptionsTest, SoftCapMatchesTheReferenceOnEveryPathLengthKindAndMask) {
  // N = 2 and 3: the grouped row path (the third with keys cut into
  // blocks); N = 9 and 70: the gemm path (the tile path's shapes, which
  // take the gemm path when capped; 70 causal cuts entries into blocks).
  const std::vector<Shape> shapes = {{2, 2, 11, 4, 4, 16, 5},
                                     {2, 3, 40, 8, 2, 16, 16},
                                     {1, 2, 3000, 2, 1, 64, 16},
                                     {2, 9, 13, 4, 2, 16, 8},
                                     {1, 70, 70, 2, 1, 16, 4}};
  ForEachShapeLengthKindAndMask(
      shapes, 300,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        const Form form{causal, kScale, kCap};
        const ValidLens valid = LensOf(lens, per_query, s.batch, s.queries);
        const Result r = RunOp(DefaultEngine(), s, in, valid, form);
        std::vector<double> weights;
        const std::vector<double> out = Reference(s, in, lens, per_query, form, &weights);
        EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
        EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
        // Without the weights output (the gemm path's probabilities then live
        // in its scratch, capped there).
        const Result alone = RunOp(DefaultEngine(), s, in, valid, form, /*want_weights=*/false);
        EXPECT_LE(MaxAbsDiff(alone.out.data(), out), OutTolerance(in.v));
      });
}

// The cap where the weights output has strided columns (the gemm path
// through its row buffer) and where a query of the key-block row path has
// length 0 (uniform weights over all M keys, uncapped: it has no scores).
TEST(MultiHeadOptionsEdges, SoftCapWithStridedWeightsAndAZeroLength) {
  const Form form{Causal::kNone, kScale, kCap};
  {
    const Shape s{2, 9, 13, 4, 2, 16, 8};
    const Inputs in(s, 81);
    std::vector<float> out(s.out(), kSentinel), weights(s.weights(), kSentinel);
    // (B, Hq, N, M) in memory laid out (B, Hq, M, N): unit stride along N.
    const Tensor w(weights.data(), {s.batch, s.heads, s.queries, s.keys},
                   {s.heads * s.keys * s.queries, s.keys * s.queries, 1, s.queries});
    ASSERT_TRUE(DefaultEngine()
                    .MultiHeadAttention(
                        ConstTensor(in.q.data(), {s.batch, s.queries, s.heads, s.depth}),
                        ConstTensor(in.k.data(), {s.batch, s.keys, s.kv_heads, s.depth}),
                        ConstTensor(in.v.data(), {s.batch, s.keys, s.kv_heads, s.value_dim}),
                        ValidLens::None(), OptionsOf(s, form),
                        Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}), w)
                    .ok());
    std::vector<double> want_weights;
    const std::vector<double> want = Reference(s, in, {}, false, form, &want_weights);
    EXPECT_LE(MaxAbsDiff(out.data(), want), OutTolerance(in.v));
    std::vector<float> dense(weights.size());  // back to (B, Hq, N, M)
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh)
      for (int64_t i = 0; i < s.queries; ++i)
        for (int64_t j = 0; j < s.keys; ++j)
          dense[static_cast<size_t>((bh * s.queries + i) * s.keys + j)] =
              weights[static_cast<size_t>((bh * s.keys + j) * s.queries + i)];
    EXPECT_LE(MaxAbsDiff(dense.data(), want_weights), kWeightTolerance);
  }
  {
    const Shape s{1, 2, 3000, 2, 1, 64, 16};
    const Inputs in(s, 83);
    const std::vector<int64_t> lens = {0, 2999};
    const Result r = RunOp(DefaultEngine(), s, in, LensOf(lens, true, s.batch, s.queries), form);
    std::vector<double> weights;
    const std::vector<double> out = Reference(s, in, lens, true, form, &weights);
    EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
    EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
  }
}

// A cap far above every score leaves the scores as they are, up to the
// cap's rounding (tanh(x) = x for tiny x); the cap of 0 is no cap.
TEST_P(MultiHeadOptionsTest, ACapAboveEveryScoreChangesNothingAndZeroIsNone) {
  const Shape s{2, 5, 30, 4, 2, 16, 8};
  const Inputs in(s, 41);
  std::vector<double> weights;
  const std::vector<double> out =
      Reference(s, in, {}, false, Form{Causal::kNone, kScale, 0}, &weights);
  for (double cap : {0.0, 1e6}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    const Result r =
        RunOp(DefaultEngine(), s, in, ValidLens::None(), Form{Causal::kNone, kScale, cap});
    EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
    EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
  }
}

// Heads-first memory viewed as (B, N, H, D) by strides: dense copies of each
// head (the gemm path) or rows read in place (the row path), both capped.
TEST_P(MultiHeadOptionsTest, SoftCapOverHeadsFirstViewsGivesTheTokenMajorBits) {
  for (const Shape& s : {Shape{2, 2, 20, 4, 2, 16, 8}, Shape{2, 9, 20, 4, 2, 16, 8}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 51);
    const Form form{Causal::kBottomRight, kScale, kCap};
    const Result token_major = RunOp(DefaultEngine(), s, in, ValidLens::None(), form);
    EXPECT_EQ(RunHeadsFirst(DefaultEngine(), s, in, OptionsOf(s, form)), token_major.out);
  }
}

// bf16 mode rounds Q, K, V and the weights for its matmuls, and caps the
// fp32 scores: against float64 math on the rounded Q, K and V, within the
// weights' rounding (each within 2^-9 of itself, relative, so the output
// within 2^-9 · max |V|).
TEST(MultiHeadOptionsBf16, SoftCapInBf16ModeMatchesTheReferenceOnRoundedInputs) {
  EngineOptions options;
  options.precision = Precision::kBf16;
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());
  const Shape s{2, 40, 50, 4, 2, 16, 8};
  Inputs in(s, 61);
  for (std::vector<float>* x : {&in.q, &in.k, &in.v}) {
    for (float& e : *x) e = RoundedToBf16(e);
  }
  const Form form{Causal::kTopLeft, kScale, kCap};
  std::vector<double> weights;
  const std::vector<double> out = Reference(s, in, {}, false, form, &weights);
  for (bool want_weights : {true, false}) {
    SCOPED_TRACE(want_weights ? "with weights" : "without weights");
    const Result r = RunOp(*engine, s, in, ValidLens::None(), form, want_weights);
    if (want_weights) {
      EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
    }
    EXPECT_LE(MaxAbsDiff(r.out.data(), out), std::pow(2.0, -9) * (OutTolerance(in.v) / 1e-5));
  }
}

TEST(MultiHeadOptionsThreads, SoftCapGivesTheSameBitsForAnyThreadCount) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  for (const Shape& s : {Shape{1, 1, 3000, 8, 2, 64, 64}, Shape{4, 1, 300, 8, 4, 64, 64},
                         Shape{2, 64, 300, 4, 4, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 71);
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 13);
    const ValidLens valid = LensOf(lens, true, s.batch, s.queries);
    const Form form{Causal::kBottomRight, kScale, kCap};
    const Result one = RunOp(DefaultEngine(), s, in, valid, form);
    const Result both = RunOp(*two, s, in, valid, form);
    EXPECT_EQ(one.out, both.out);
    EXPECT_EQ(one.weights, both.weights);
  }
}

// A cap that is negative, NaN or infinite is refused by name, and nothing
// is written.
TEST(MultiHeadOptionsErrors, RefusesABadSoftCapNamingItAndWritesNothing) {
  const Shape s{2, 3, 5, 4, 2, 8, 6};
  const Inputs in(s, 3);
  for (float cap :
       {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> out(s.out(), kSentinel), weights(s.weights(), kSentinel);
    MultiHeadOptions options;
    options.softcap = cap;
    const Status status = DefaultEngine().MultiHeadAttention(
        ConstTensor(in.q.data(), {s.batch, s.queries, s.heads, s.depth}),
        ConstTensor(in.k.data(), {s.batch, s.keys, s.kv_heads, s.depth}),
        ConstTensor(in.v.data(), {s.batch, s.keys, s.kv_heads, s.value_dim}), ValidLens::None(),
        options, Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}),
        Tensor(weights.data(), {s.batch, s.heads, s.queries, s.keys}));
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "MultiHeadAttention: softcap is " + std::to_string(cap) +
                                    "; it must be finite and >= 0 (0: no cap)");
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
    EXPECT_TRUE(
        std::all_of(weights.begin(), weights.end(), [](float x) { return x == kSentinel; }));
    MultiHeadShapes shapes;
    EXPECT_EQ(DefaultEngine()
                  .CheckMultiHeadAttention(
                      ConstTensor(in.q.data(), {s.batch, s.queries, s.heads, s.depth}),
                      ConstTensor(in.k.data(), {s.batch, s.keys, s.kv_heads, s.depth}),
                      ConstTensor(in.v.data(), {s.batch, s.keys, s.kv_heads, s.value_dim}),
                      ValidLens::None(), options, &shapes)
                  .code(),
              StatusCode::kInvalidArgument);
  }
}

// KvCache::Attend with a scale and a cap: in fp32, the op's bits on the same
// keys (bottom-right, the same options); in bf16, float64 math on the
// rounded keys and values; in int8, within its coding's error of float64
// math on the keys as given, where the uncapped scores would be far off.
TEST(MultiHeadOptionsKvCache, AttendCapsItsScoresInEveryPrecision) {
  const Shape s{2, 3, 40, 4, 2, 16, 16};
  const Inputs in(s, 91);
  const Form form{Causal::kBottomRight, kScale, kCap};
  KvCacheAttendOptions options;
  options.scale = static_cast<float>(kScale);
  options.softcap = static_cast<float>(kCap);
  // float64 math on K and V as the precision holds them (int8: as given).
  const auto reference = [&](const Inputs& held, const Form& f, std::vector<double>* weights) {
    return Reference(s, held, {}, false, f, weights);
  };
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    SCOPED_TRACE(PrecisionName(precision));
    const std::unique_ptr<KvCache> cache = FilledCache(s, in, precision);
    Result r{std::vector<float>(s.out(), kSentinel), std::vector<float>(s.weights(), kSentinel)};
    ASSERT_TRUE(cache
                    ->Attend(DefaultEngine(),
                             ConstTensor(in.q.data(), {s.batch, s.queries, s.heads, s.depth}),
                             options,
                             Tensor(r.out.data(), {s.batch, s.queries, s.heads, s.value_dim}),
                             Tensor(r.weights.data(), {s.batch, s.heads, s.queries, s.keys}))
                    .ok());
    std::vector<double> weights;
    if (precision == Precision::kFp32) {
      const Result op = RunOp(DefaultEngine(), s, in, ValidLens::None(), form);
      EXPECT_EQ(r.out, op.out);
      EXPECT_EQ(r.weights, op.weights);
    } else if (precision == Precision::kBf16) {
      Inputs rounded = in;
      for (std::vector<float>* x : {&rounded.k, &rounded.v}) {
        for (float& e : *x) e = RoundedToBf16(e);
      }
      const std::vector<double> out = reference(rounded, form, &weights);
      EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
      EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
    } else {
      const std::vector<double> out = reference(in, form, &weights);
      std::vector<double> uncapped_weights;
      const std::vector<double> uncapped =
          reference(in, Form{Causal::kBottomRight, kScale, 0}, &uncapped_weights);
      const double error = MaxAbsDiff(r.out.data(), out);
      EXPECT_LE(error, 0.05);  // V ~ N(0, 9): 8-bit codes err about 1% of it
      std::vector<float> capped_out(r.out);
      EXPECT_GT(MaxAbsDiff(capped_out.data(), uncapped), 10 * error);
    }
  }
  // A bad cap is refused by name, nothing written.
  const std::unique_ptr<KvCache> cache = FilledCache(s, in, Precision::kFp32);
  options.softcap = -1.0f;
  std::vector<float> out(s.out(), kSentinel);
  const Status refused = cache->Attend(
      DefaultEngine(), ConstTensor(in.q.data(), {s.batch, s.queries, s.heads, s.depth}), options,
      Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}));
  EXPECT_EQ(refused.message(),
            "KvCache: softcap is -1.000000; it must be finite and >= 0 (0: no cap)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
}

// The kernel on each target: c · tanh(x / c) within a few float ulps of
// c times the double tanh of the float quotient (6 ulps), across magnitudes from
// subnormal to the largest float, at every offset of a vector; ±Inf gives
// ±c and NaN stays NaN.
TEST_P(SoftCapKernelTest, CapsEachScoreAsTanhDoes) {
  std::vector<float> x;
  for (float magnitude : {1e-40f, 1e-20f, 1e-3f, 0.1f, 0.5f, 0.9f, 1.0f, 1.7f, 3.0f, 8.0f, 20.0f,
                          90.0f, 1e10f, std::numeric_limits<float>::max()}) {
    x.push_back(magnitude);
    x.push_back(-magnitude);
  }
  const std::vector<float> random = RandomFloats(37, 5, 6.0f);
  x.insert(x.end(), random.begin(), random.end());
  x.push_back(0.0f);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  for (float cap : {0.5f, 1.0f, 30.0f}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{5}}) {
      std::vector<float> y(x.begin() + static_cast<int64_t>(offset), x.end());
      kernels::SoftCap(y.data(), y.size(), cap);
      for (size_t j = 0; j < y.size(); ++j) {
        const float in = x[j + offset];
        SCOPED_TRACE("x " + std::to_string(in) + " cap " + std::to_string(cap));
        if (std::isnan(in)) {
          EXPECT_TRUE(std::isnan(y[j]));
          continue;
        }
        const double expected = cap * std::tanh(static_cast<double>(in / cap));
        // Highway's tanh errs up to 4 ulps; the quotient and the product
        // round once each.
        const double ulps = 6 * std::numeric_limits<float>::epsilon() * std::abs(expected);
        EXPECT_NEAR(y[j], expected, ulps + 1e-44);
        EXPECT_LE(std::abs(y[j]), cap);
      }
    }
  }
}

}  // namespace
}  // namespace attnscore::test
