// ALiBi, an additive bias and a boolean mask on the multi-head op
// (docs/semantics.md sections 5.6 and 5.7): after the cap, head h's score
// of key j for the query at p = i + M - N loses slope_h · |p - j|, then
// gains bias[b, h, i, j], and is -Inf where mask[b, h, i, j] is 0. Against
// float64 math written from those definitions, outputs and weights, on
// every path the op takes, with each kind of lengths and each causal mask;
// every option of the op at once; broadcast views; rows the mask empties;
// the same bits for any thread count; the refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MultiHeadBiasTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MultiHeadBiasTest);

// ALiBi's slopes for H heads: 2^(-8 (h + 1) / H), as BLOOM makes them.
std::vector<float> Slopes(int64_t heads) {
  std::vector<float> slopes(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    slopes[static_cast<size_t>(h)] = std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / heads);
  }
  return slopes;
}

// A bias of N(0, 1) values with about one in `masked` of them -Inf (0: none).
std::vector<float> RandomBias(const Shape& s, uint32_t seed, int masked) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(s.weights());
  for (float& x : bias) x = masked > 0 && gen() % masked == 0 ? -INFINITY : normal(gen);
  return bias;
}

std::vector<uint8_t> RandomMask(const Shape& s, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> mask(s.weights());
  for (uint8_t& x : mask) x = gen() % 4 != 0;  // a quarter masked
  return mask;
}

// N = 1 to 3: the grouped row path (M 3,000: key blocks); N = 9 and 70: the
// gemm path (the tile path's shapes).
const std::vector<Shape> kShapes = {{2, 1, 11, 4, 4, 16, 5},
                                    {2, 3, 40, 8, 2, 16, 16},
                                    {1, 2, 3000, 2, 1, 64, 16},
                                    {2, 9, 13, 4, 2, 16, 8},
                                    {1, 70, 70, 2, 1, 16, 4}};

TEST_P(MultiHeadBiasTest, AlibiMatchesTheReferenceOnEveryPathLengthKindAndMask) {
  ForEachShapeLengthKindAndMask(
      kShapes, 900,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        Form form{causal};
        form.alibi_slopes = Slopes(s.heads);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, form);
      });
}

TEST_P(MultiHeadBiasTest, BiasAndMaskMatchTheReferenceOnEveryPathLengthKindAndMask) {
  ForEachShapeLengthKindAndMask(
      kShapes, 1000,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        Form biased{causal};
        biased.bias = RandomBias(s, 5, 7);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, biased);
        Form masked{causal};
        masked.mask = RandomMask(s, 6);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, masked);
      });
}

// Window, ALiBi, soft cap, sinks, bias and mask at once, with GQA, on every
// path (the windowed prefill among them).
TEST_P(MultiHeadBiasTest, EveryOptionAtOnceMatchesTheReference) {
  std::vector<Shape> shapes = kShapes;
  shapes.push_back({1, 300, 320, 4, 2, 16, 8});
  ForEachShapeLengthKindAndMask(
      shapes, 1100,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        Form form{causal, 1.5, 2.0};
        form.window_left = 41;
        form.window_right = 3;
        form.alibi_slopes = Slopes(s.heads);
        form.sinks.assign(static_cast<size_t>(s.heads), 0.5f);
        form.bias = RandomBias(s, 7, 0);
        form.mask = RandomMask(s, 8);
        ExpectMatchesReference(DefaultEngine(), s, in, lens, per_query, form);
      });
}

// Per-query lengths out of order, where the gemm path would sort an
// entry's queries by length (saving work) but the terms are read by each
// query's own position: ALiBi, a bias and a mask still find their query.
TEST(MultiHeadBiasForms, TermsFollowTheirQueryWhereLengthsAreOutOfOrder) {
  const Shape s{1, 128, 1024, 1, 1, 16, 8};
  const Inputs in(s, 29);
  std::vector<int64_t> lens(static_cast<size_t>(s.queries));
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = i % 2 == 0 ? 16 : 1024;
  Form form;
  form.alibi_slopes = Slopes(s.heads);
  form.bias = RandomBias(s, 31, 9);
  form.mask = RandomMask(s, 37);
  ExpectMatchesReference(DefaultEngine(), s, in, lens, true, form);
}

// A bias of dims 1 broadcast (zero strides) gives the bits of the bias
// written out whole; so does a mask.
TEST(MultiHeadBiasForms, BroadcastDimsGiveTheBitsOfTheWholeBias) {
  for (const Shape& s : {Shape{2, 2, 300, 4, 2, 16, 8}, Shape{2, 40, 50, 4, 2, 16, 8}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 21);
    // Per head and key: (1, Hq, 1, M).
    std::vector<float> small(static_cast<size_t>(s.heads * s.keys));
    std::vector<uint8_t> small_mask(small.size());
    for (size_t x = 0; x < small.size(); ++x) {
      small[x] = std::sin(static_cast<float>(x));
      small_mask[x] = x % 5 != 0;
    }
    Form whole;
    whole.bias.resize(s.weights());
    whole.mask.resize(s.weights());
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h)
        for (int64_t i = 0; i < s.queries; ++i)
          for (int64_t j = 0; j < s.keys; ++j) {
            const size_t at = static_cast<size_t>(((b * s.heads + h) * s.queries + i) * s.keys + j);
            whole.bias[at] = small[static_cast<size_t>(h * s.keys + j)];
            whole.mask[at] = small_mask[static_cast<size_t>(h * s.keys + j)];
          }
    const Result expanded =
        RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, whole));
    MultiHeadOptions broadcast;
    broadcast.bias = ConstTensor(small.data(), {1, s.heads, 1, s.keys});
    broadcast.mask = TensorView<const uint8_t>(small_mask.data(), {1, s.heads, 1, s.keys});
    const Result r = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), broadcast);
    EXPECT_EQ(r.out, expanded.out);
    EXPECT_EQ(r.weights, expanded.weights);
  }
}

// A query whose visible keys the mask all removes: NaN weights and output
// (a softmax over nothing) without sinks; weights 0 and output 0 with them.
TEST(MultiHeadBiasForms, RowsTheMaskEmptiesAreNanOrZeroWithASink) {
  for (const Shape& s : {Shape{1, 2, 3000, 2, 1, 64, 16}, Shape{1, 9, 13, 2, 2, 16, 8},
                         Shape{1, 2, 30, 2, 2, 16, 8}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 23);
    Form form;
    form.mask.assign(s.weights(), 1);
    std::fill(form.mask.begin(), form.mask.begin() + s.keys, 0);  // head 0, query 0
    const Result r = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    EXPECT_TRUE(std::isnan(r.out[0]));
    EXPECT_TRUE(std::isnan(r.weights[0]));
    EXPECT_FALSE(std::isnan(r.out[static_cast<size_t>(s.value_dim)]));  // head 1 sees its keys
    form.sinks.assign(static_cast<size_t>(s.heads), 1.0f);
    const Result sunk = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    for (int64_t c = 0; c < s.value_dim; ++c) EXPECT_EQ(sunk.out[static_cast<size_t>(c)], 0.0f);
    for (int64_t j = 0; j < s.keys; ++j) EXPECT_EQ(sunk.weights[static_cast<size_t>(j)], 0.0f);
  }
}

TEST(MultiHeadBiasThreads, GivesTheSameBitsForAnyThreadCount) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  for (const Shape& s : {Shape{1, 1, 3000, 8, 2, 64, 64}, Shape{2, 64, 300, 4, 4, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 71);
    Form form{Causal::kBottomRight};
    form.alibi_slopes = Slopes(s.heads);
    form.bias = RandomBias(s, 9, 11);
    const Result one = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    const Result both = RunMultiHead(*two, s, in, ValidLens::None(), OptionsOf(s, form));
    EXPECT_EQ(one.out, both.out);
    EXPECT_EQ(one.weights, both.weights);
  }
}

// Slopes not finite or of the wrong shape, a bias or mask that does not
// broadcast, and any of them sharing memory with an output are refused by
// name, nothing written.
TEST(MultiHeadBiasErrors, RefusesBadTermsNamingThemAndWritesNothing) {
  const Shape s{2, 3, 5, 4, 2, 8, 6};
  const Inputs in(s, 3);
  std::vector<float> out(s.out(), kSentinel);
  const auto run = [&](const MultiHeadOptions& options) {
    return DefaultEngine()
        .MultiHeadAttention(QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v),
                            ValidLens::None(), options,
                            Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}))
        .message();
  };
  std::vector<float> slopes = {0.5f, 0.25f, INFINITY, 0.1f, 0.0f};
  MultiHeadOptions options;
  options.alibi_slopes = ConstTensor(slopes.data(), {4});
  EXPECT_EQ(run(options), "MultiHeadAttention: alibi_slopes[2] is inf; a slope must be finite");
  options.alibi_slopes = ConstTensor(slopes.data(), {5});
  EXPECT_EQ(run(options), "MultiHeadAttention: alibi_slopes has shape (5) but must be (Hq,) = (4)");
  std::vector<float> bias(s.weights() * 2, 0.0f);
  options = MultiHeadOptions();
  options.bias = ConstTensor(bias.data(), {s.batch, s.heads, s.queries, s.keys + 1});
  EXPECT_EQ(run(options),
            "MultiHeadAttention: bias has shape (2, 4, 3, 6); want (B, Hq, N, M) = (2, 4, 3, 5), "
            "each dim that or 1, and strides >= 0 that address it");
  options.bias = ConstTensor(bias.data(), {s.heads, s.queries, s.keys});
  EXPECT_EQ(run(options),
            "MultiHeadAttention: bias has shape (4, 3, 5); want (B, Hq, N, M) = (2, 4, 3, 5), "
            "each dim that or 1, and strides >= 0 that address it");
  std::vector<uint8_t> mask(s.weights(), 1);
  options = MultiHeadOptions();
  options.mask = TensorView<const uint8_t>(mask.data(), {s.batch, 3, s.queries, s.keys});
  EXPECT_EQ(run(options),
            "MultiHeadAttention: mask has shape (2, 3, 3, 5); want (B, Hq, N, M) = (2, 4, 3, 5), "
            "each dim that or 1, and strides >= 0 that address it");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  options = MultiHeadOptions();
  options.bias =
      ConstTensor(bias.data(), {s.batch, s.heads, s.queries, s.keys}, {int64_t{1} << 62, 0, 0, 1});
  EXPECT_EQ(run(options),
            "MultiHeadAttention: bias has shape (2, 4, 3, 5); want (B, Hq, N, M) = (2, 4, 3, 5), "
            "each dim that or 1, and strides >= 0 that address it");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  options = MultiHeadOptions();
  options.bias = ConstTensor(out.data(), {1, 1, 1, s.keys});
  EXPECT_EQ(run(options), "MultiHeadAttention: out overlaps bias");
}

}  // namespace
}  // namespace attnscore::test
