// Attention sinks on the multi-head op and the KvCache (docs/semantics.md
// section 5.5): head h's logit z_h joins each of its softmaxes'
// denominators. Against float64 math written from that definition, outputs
// and weights, on every path the op takes (the grouped row path over whole
// rows and key blocks, the gemm path a call with sinks takes where the tile
// path would run, the windowed prefill), with each kind of lengths and each
// causal mask, and with every other option at once; a sink of -Inf and of
// +Inf; strided sinks; the same bits for any thread count; the cache in
// each precision; the refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MultiHeadSinksTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MultiHeadSinksTest);

// Logits around the scores' scale, one far above them (weights near 0, not
// exactly) and one far below (no effect within float).
std::vector<float> SinksFor(int64_t heads) {
  const float pattern[] = {0.5f, -1.0f, 2.0f, 9.0f, -30.0f, 1.0f, 0.0f, 3.5f};
  std::vector<float> sinks(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) sinks[static_cast<size_t>(h)] = pattern[h % 8];
  return sinks;
}

// N = 1 to 3: the grouped row path (M 3,000: key blocks); N = 9 and 70: the
// gemm path (the tile path's shapes); with a window, its prefill.
const std::vector<Shape> kShapes = {{2, 1, 11, 4, 4, 16, 5},
                                    {2, 3, 40, 8, 2, 16, 16},
                                    {1, 2, 3000, 2, 1, 64, 16},
                                    {2, 9, 13, 4, 2, 16, 8},
                                    {1, 70, 70, 2, 1, 16, 4}};

TEST_P(MultiHeadSinksTest, MatchTheReferenceOnEveryPathLengthKindAndMask) {
  ForEachShapeLengthKindAndMask(
      kShapes, 700,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        Form form{causal};
        form.sinks = SinksFor(s.heads);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, form);
      });
}

// Window, soft cap and sinks at once, with GQA, on every path.
TEST_P(MultiHeadSinksTest, AllOptionsTogetherMatchTheReference) {
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({1, 300, 320, 4, 2, 16, 8});
  ForEachShapeLengthKindAndMask(
      shapes, 800,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        Form form{causal, 1.5, 1.0};
        form.window_left = 37;
        form.window_right = 2;
        form.sinks = SinksFor(s.heads);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, form);
      });
}

// A sink of -Inf weighs nothing: the call without sinks, within float
// rounding. One of +Inf takes the whole mass: weights 0 and output 0. So do
// valid scores that are all -Inf (here: a -Inf query against finite keys).
TEST(MultiHeadSinksEdges, InfiniteSinksAndAllMinusInfScores) {
  for (const Shape& s : {Shape{1, 2, 3000, 2, 1, 64, 16}, Shape{2, 9, 13, 4, 2, 16, 8},
                         Shape{1, 2, 40, 2, 2, 16, 8}}) {
    SCOPED_TRACE(s.Name());
    Inputs in(s, 61);
    Form none;
    std::vector<double> weights;
    const std::vector<double> plain = Reference(s, in, {}, false, none, &weights);
    Form below;
    below.sinks.assign(static_cast<size_t>(s.heads), -INFINITY);
    const Result r = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, below));
    EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
    EXPECT_LE(MaxAbsDiff(r.out.data(), plain), OutTolerance(in.v));
    Form above;
    above.sinks.assign(static_cast<size_t>(s.heads), INFINITY);
    const Result zero =
        RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, above));
    EXPECT_TRUE(std::all_of(zero.out.begin(), zero.out.end(), [](float x) { return x == 0.0f; }));
    EXPECT_TRUE(
        std::all_of(zero.weights.begin(), zero.weights.end(), [](float x) { return x == 0.0f; }));
    // Query 0's head 0 all -Inf (scores -Inf with a finite sink): weights 0, output 0.
    std::fill(in.q.begin(), in.q.begin() + s.depth, -INFINITY);
    std::fill(in.k.begin(), in.k.end(), 1.0f);
    Form finite;
    finite.sinks.assign(static_cast<size_t>(s.heads), 0.0f);
    const Result cut =
        RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, finite));
    for (int64_t c = 0; c < s.value_dim; ++c) EXPECT_EQ(cut.out[static_cast<size_t>(c)], 0.0f);
    for (int64_t j = 0; j < s.keys; ++j) EXPECT_EQ(cut.weights[static_cast<size_t>(j)], 0.0f);
  }
}

// Sinks read by their stride; the same bits for 1 and 2 threads.
TEST(MultiHeadSinksForms, StridedSinksAndAnyThreadCount) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  for (const Shape& s : {Shape{1, 1, 3000, 8, 2, 64, 64}, Shape{2, 64, 300, 4, 4, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 71);
    Form form{Causal::kBottomRight};
    form.sinks = SinksFor(s.heads);
    const Result one = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    const Result both = RunMultiHead(*two, s, in, ValidLens::None(), OptionsOf(s, form));
    EXPECT_EQ(one.out, both.out);
    EXPECT_EQ(one.weights, both.weights);
    std::vector<float> spread(2 * form.sinks.size(), NAN);
    for (size_t h = 0; h < form.sinks.size(); ++h) spread[2 * h] = form.sinks[h];
    MultiHeadOptions strided = OptionsOf(s, form);
    strided.sinks = ConstTensor(spread.data(), {s.heads}, {2});
    std::vector<float> out(s.out());
    ASSERT_TRUE(DefaultEngine()
                    .MultiHeadAttention(
                        QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v), ValidLens::None(),
                        strided, Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}))
                    .ok());
    EXPECT_EQ(out, one.out);
  }
}

// KvCache::Attend with sinks: fp32 the op's bits (bottom-right), bf16
// float64 math on the rounded K and V, int8 within its coding's error.
TEST(MultiHeadSinksKvCache, AttendWeighsTheSinksInEveryPrecision) {
  const Shape s{2, 3, 40, 4, 2, 16, 16};
  const Inputs in(s, 91);
  Form form{Causal::kBottomRight};
  form.sinks = SinksFor(s.heads);
  KvCacheAttendOptions options;
  options.sinks = OptionsOf(s, form).sinks;
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    SCOPED_TRACE(PrecisionName(precision));
    const std::unique_ptr<KvCache> cache = FilledCache(s, in, precision);
    ASSERT_TRUE(cache);
    Result r{std::vector<float>(s.out(), kSentinel), std::vector<float>(s.weights(), kSentinel)};
    ASSERT_TRUE(cache
                    ->Attend(DefaultEngine(), QueriesOf(s, in.q), options,
                             Tensor(r.out.data(), {s.batch, s.queries, s.heads, s.value_dim}),
                             Tensor(r.weights.data(), {s.batch, s.heads, s.queries, s.keys}))
                    .ok());
    std::vector<double> weights;
    if (precision == Precision::kFp32) {
      const Result op = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
      EXPECT_EQ(r.out, op.out);
      EXPECT_EQ(r.weights, op.weights);
    } else if (precision == Precision::kBf16) {
      Inputs rounded = in;
      for (std::vector<float>* x : {&rounded.k, &rounded.v}) {
        for (float& e : *x) e = RoundedToBf16(e);
      }
      const std::vector<double> out = Reference(s, rounded, {}, false, form, &weights);
      EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
      EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
    } else {
      const std::vector<double> out = Reference(s, in, {}, false, form, &weights);
      EXPECT_LE(MaxAbsDiff(r.out.data(), out), 0.05);  // V ~ N(0, 9): codes err ~1% of it
      Form plain{Causal::kBottomRight};
      std::vector<double> plain_weights;
      const std::vector<double> unsunk = Reference(s, in, {}, false, plain, &plain_weights);
      EXPECT_GT(MaxAbsDiff(r.out.data(), unsunk), 0.5);  // the sinks matter here
    }
  }
}

// Sinks of the wrong shape, NaN, or overlapping an output are refused by
// name, nothing written; by the op and by the cache.
TEST(MultiHeadSinksErrors, RefusesBadSinksNamingThemAndWritesNothing) {
  const Shape s{2, 3, 5, 4, 2, 8, 6};
  const Inputs in(s, 3);
  std::vector<float> sinks = {0.0f, 1.0f, NAN, 2.0f, 0.0f};
  std::vector<float> out(s.out(), kSentinel);
  const Tensor out_view(out.data(), {s.batch, s.queries, s.heads, s.value_dim});
  const auto run = [&](const ConstTensor& bad) {
    MultiHeadOptions options;
    options.sinks = bad;
    return DefaultEngine()
        .MultiHeadAttention(QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v),
                            ValidLens::None(), options, out_view)
        .message();
  };
  EXPECT_EQ(run(ConstTensor(sinks.data(), {5})),
            "MultiHeadAttention: sinks has shape (5) but must be (Hq,) = (4)");
  EXPECT_EQ(run(ConstTensor(sinks.data(), {4})),
            "MultiHeadAttention: sinks[2] is NaN; a sink is a logit (-Inf: none)");
  std::fill(out.begin(), out.end(), 0.0f);
  EXPECT_EQ(run(ConstTensor(out.data(), {4})), "MultiHeadAttention: out overlaps sinks");
  std::fill(out.begin(), out.end(), kSentinel);
  const std::unique_ptr<KvCache> cache = FilledCache(s, in, Precision::kFp32);
  ASSERT_TRUE(cache);
  KvCacheAttendOptions options;
  options.sinks = ConstTensor(sinks.data(), {4});
  EXPECT_EQ(cache->Attend(DefaultEngine(), QueriesOf(s, in.q), options, out_view).message(),
            "KvCache: sinks[2] is NaN; a sink is a logit (-Inf: none)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
}

}  // namespace
}  // namespace attnscore::test
