// The tile path past kTileKeyBlock keys (engine/ops/tile_key_blocks.h):
// rows whose keys span blocks against a double-precision reference, the
// bits of rows within the first block, non-finite scores and values in a
// later block, any thread count, and the multi-head op over such keys.
#include "ops/tile_key_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "ops/dot_product_paths.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

using ops::dot_product::kTileKeyBlock;

class TileKeyBlocksTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(TileKeyBlocksTest);

// Two blocks and part of a third; D and Dv small, so that the reference
// stays quick.
constexpr int64_t kBatch = 2, kQueries = 40, kKeys = 2 * kTileKeyBlock + 1000;
constexpr int64_t kDepth = 16, kValueDim = 8;

// Per-query lengths: 0, 1, each block's edges, M, and random ones between.
std::vector<int64_t> LongLengths(uint32_t seed) {
  std::vector<int64_t> lens(kBatch * kQueries);
  uint32_t state = seed;
  for (auto& length : lens) {
    state = state * 1664525u + 1013904223u;
    length = static_cast<int64_t>(state >> 8) % (kKeys + 1);
  }
  const int64_t edges[] = {0,
                           1,
                           kTileKeyBlock - 1,
                           kTileKeyBlock,
                           kTileKeyBlock + 1,
                           2 * kTileKeyBlock,
                           2 * kTileKeyBlock + 1,
                           kKeys};
  for (size_t n = 0; n < std::size(edges); ++n) lens[3 * n] = edges[n];
  return lens;
}

struct LongInputs {
  std::vector<float> q, k, v;
  explicit LongInputs(uint32_t seed)
      : q(RandomFloats(kBatch * kQueries * kDepth, seed)),
        k(RandomFloats(kBatch * kKeys * kDepth, seed + 1)),
        v(RandomFloats(kBatch * kKeys * kValueDim, seed + 2, 3.0f)) {}
  ConstTensor Q() const { return ConstTensor(q.data(), {kBatch, kQueries, kDepth}); }
  ConstTensor K() const { return ConstTensor(k.data(), {kBatch, kKeys, kDepth}); }
  ConstTensor V() const { return ConstTensor(v.data(), {kBatch, kKeys, kValueDim}); }
};

std::vector<float> Attend(const Engine& engine, const LongInputs& in,
                          const std::vector<int64_t>& lens) {
  std::vector<float> out(kBatch * kQueries * kValueDim, kSentinel);
  const Status st = engine.DotProductAttention(in.Q(), in.K(), in.V(),
                                               ValidLens::PerQuery(lens.data(), kBatch, kQueries),
                                               Tensor(out.data(), {kBatch, kQueries, kValueDim}));
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::vector<double> Reference(const LongInputs& in, const std::vector<int64_t>& lens) {
  std::vector<double> weights;
  return ReferenceDotProduct(in.q, in.k, in.v, kBatch, kQueries, kKeys, kDepth, kValueDim,
                             RowLengths(lens, /*per_query=*/true, kBatch, kQueries), &weights);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(TileKeyBlocksTest, RowsOverManyBlocksMatchTheReferenceOnAnyThreadCount) {
  const LongInputs in(11);
  const std::vector<int64_t> lens = LongLengths(5);
  DirectCall direct;
  ASSERT_TRUE(ops::dot_product::UseTilePath(direct.call(), in.Q(), in.K(), in.V(), false));
  // Asked for the weights, the call takes another path, to the same values.
  EXPECT_FALSE(ops::dot_product::UseTilePath(direct.call(), in.Q(), in.K(), in.V(), true));

  const std::vector<float> out = Attend(DefaultEngine(), in, lens);
  const std::vector<double> want = Reference(in, lens);
  EXPECT_LE(MaxAbsDiff(out.data(), want), OutTolerance(in.v));
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  ASSERT_NE(two, nullptr);
  EXPECT_TRUE(SameBits(Attend(*two, in, lens), out));
}

TEST_P(TileKeyBlocksTest, RowsWithinTheFirstBlockKeepTheSinglePassBits) {
  const LongInputs in(21);
  std::vector<int64_t> lens = LongLengths(7);
  // The same rows over the first block's keys alone: every tile one pass.
  std::vector<int64_t> short_lens(lens.size());
  for (size_t n = 0; n < lens.size(); ++n) short_lens[n] = std::min(lens[n], kTileKeyBlock);
  std::vector<float> short_k, short_v;
  for (int64_t b = 0; b < kBatch; ++b) {
    const auto k_from = in.k.begin() + b * kKeys * kDepth;
    const auto v_from = in.v.begin() + b * kKeys * kValueDim;
    short_k.insert(short_k.end(), k_from, k_from + kTileKeyBlock * kDepth);
    short_v.insert(short_v.end(), v_from, v_from + kTileKeyBlock * kValueDim);
  }
  std::vector<float> short_out(kBatch * kQueries * kValueDim, kSentinel);
  ASSERT_TRUE(
      DefaultEngine()
          .DotProductAttention(in.Q(), ConstTensor(short_k.data(), {kBatch, kTileKeyBlock, kDepth}),
                               ConstTensor(short_v.data(), {kBatch, kTileKeyBlock, kValueDim}),
                               ValidLens::PerQuery(short_lens.data(), kBatch, kQueries),
                               Tensor(short_out.data(), {kBatch, kQueries, kValueDim}))
          .ok());
  const std::vector<float> out = Attend(DefaultEngine(), in, lens);
  int rows = 0;
  for (size_t n = 0; n < lens.size(); ++n) {
    if (lens[n] == 0 || lens[n] > kTileKeyBlock) continue;
    ++rows;
    const auto at = static_cast<ptrdiff_t>(n * kValueDim);
    EXPECT_TRUE(SameBits({out.begin() + at, out.begin() + at + kValueDim},
                         {short_out.begin() + at, short_out.begin() + at + kValueDim}))
        << "row " << n << ", length " << lens[n];
  }
  EXPECT_GE(rows, 4);
}

TEST_P(TileKeyBlocksTest, NonFiniteScoresAndValuesInALaterBlock) {
  // Key 12,000 (in the second block) scores NaN against every query, so
  // each row that sees it has no softmax (NaN), as the reference says; then
  // its value is +Inf in column 0, which rows that stop before it never mix.
  LongInputs in(31);
  const int64_t key = kTileKeyBlock + 3808;
  for (int64_t b = 0; b < kBatch; ++b) {
    in.k[(b * kKeys + key) * kDepth] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<int64_t> lens = LongLengths(9);
  std::vector<float> out = Attend(DefaultEngine(), in, lens);
  std::vector<double> want = Reference(in, lens);
  EXPECT_LE(MaxAbsDiff(out.data(), want), OutTolerance(in.v));

  // The reference weighs masked keys 0 and multiplies even them, so a row
  // that stops before the +Inf value is checked against the finite values.
  const LongInputs finite(31);
  in.k = finite.k;
  for (int64_t b = 0; b < kBatch; ++b) {
    in.v[(b * kKeys + key) * kValueDim] = std::numeric_limits<float>::infinity();
  }
  out = Attend(DefaultEngine(), in, lens);
  want = Reference(finite, lens);
  int stopped = 0;
  for (size_t n = 0; n < lens.size(); ++n) {
    const bool sees = lens[n] > key || lens[n] == 0;  // length 0 weighs every key
    stopped += sees ? 0 : 1;
    for (int64_t c = 0; c < kValueDim; ++c) {
      const float got = out[n * kValueDim + c];
      if (sees && c == 0) {
        EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << "row " << n;
      } else {
        EXPECT_NEAR(got, want[n * kValueDim + c], OutTolerance(finite.v))
            << "row " << n << ", column " << c;
      }
    }
  }
  EXPECT_GE(stopped, 8);
}

TEST(RunningSoftmax, CarriesTheMaxAndTheSumAcrossBlocks) {
  // Row 0: block maxes -Inf then 2, sums 0 then 3; row 1: 1 then 0.5, sums
  // 2 then 4 against the new max (which stays 1).
  const float inf = std::numeric_limits<float>::infinity();
  ops::dot_product::RunningSoftmax running;
  running.Reset(2);
  const float first_max[2] = {-inf, 1.0f};
  const float* shift = running.Shift(first_max);
  EXPECT_EQ(shift[0], 0.0f);
  EXPECT_EQ(shift[1], 1.0f);
  const float first_sums[2] = {0.0f, 2.0f};
  running.AddSums(0b11, first_sums);
  float block0[2][1] = {{0.0f}, {6.0f}};
  float out0[2][1] = {};
  float* block_rows[2] = {block0[0], block0[1]};
  float* out_rows[2] = {out0[0], out0[1]};
  running.Fold(0b11, block_rows, 1, out_rows);

  const float second_max[2] = {2.0f, 0.5f};
  shift = running.Shift(second_max);
  EXPECT_EQ(shift[0], 2.0f);
  EXPECT_EQ(shift[1], 1.0f);
  const float second_sums[2] = {3.0f, 4.0f};
  running.AddSums(0b11, second_sums);
  block0[0][0] = 9.0f, block0[1][0] = 8.0f;
  running.Fold(0b11, block_rows, 1, out_rows);
  EXPECT_EQ(running.Finish(0b11, 1, out_rows), 0u);
  EXPECT_FLOAT_EQ(out0[0][0], 9.0f / 3.0f);
  EXPECT_FLOAT_EQ(out0[1][0], (6.0f + 8.0f) / (2.0f + 4.0f));

  // A row with no finite max after every block has no softmax.
  ops::dot_product::RunningSoftmax none;
  none.Reset(1);
  const float no_max[1] = {-inf};
  none.Shift(no_max);
  EXPECT_EQ(none.Finish(0b1, 1, out_rows), 1u);
}

TEST(TileKeyBlocks, MultiHeadCausalOverManyBlocksIsEachHeadsDotProduct) {
  // Causal (bottom-right) over two blocks and more, 2 query heads sharing a
  // K/V head: on 1 and 2 threads the bits of the dot product of each head
  // with its causal lengths, M - N + i + 1 for query i.
  const int64_t heads = 2;
  const auto q = RandomFloats(kQueries * heads * kDepth, 41);
  const auto k = RandomFloats(kKeys * kDepth, 42);
  const auto v = RandomFloats(kKeys * kValueDim, 43);
  MultiHeadOptions options;
  options.causal = Causal::kBottomRight;
  const ConstTensor qv(q.data(), {1, kQueries, heads, kDepth});
  const ConstTensor kv(k.data(), {1, kKeys, 1, kDepth});
  const ConstTensor vv(v.data(), {1, kKeys, 1, kValueDim});
  std::vector<int64_t> causal(kQueries);
  for (int64_t i = 0; i < kQueries; ++i) causal[i] = kKeys - kQueries + i + 1;
  for (const int threads : {1, 2}) {
    const std::unique_ptr<Engine> engine = EngineWithThreads(threads);
    ASSERT_NE(engine, nullptr);
    std::vector<float> out(kQueries * heads * kValueDim, kSentinel);
    ASSERT_TRUE(engine
                    ->MultiHeadAttention(qv, kv, vv, ValidLens::None(), options,
                                         Tensor(out.data(), {1, kQueries, heads, kValueDim}))
                    .ok());
    for (int64_t h = 0; h < heads; ++h) {
      const ConstTensor head(q.data() + h * kDepth, {1, kQueries, kDepth},
                             {kQueries * heads * kDepth, heads * kDepth, 1});
      std::vector<float> want(kQueries * kValueDim, kSentinel);
      ASSERT_TRUE(DefaultEngine()
                      .DotProductAttention(head, ConstTensor(k.data(), {1, kKeys, kDepth}),
                                           ConstTensor(v.data(), {1, kKeys, kValueDim}),
                                           ValidLens::PerQuery(causal.data(), 1, kQueries),
                                           Tensor(want.data(), {1, kQueries, kValueDim}))
                      .ok());
      for (int64_t i = 0; i < kQueries; ++i) {
        const float* got = out.data() + (i * heads + h) * kValueDim;
        EXPECT_EQ(std::memcmp(got, want.data() + i * kValueDim, kValueDim * sizeof(float)), 0)
            << threads << " threads, head " << h << ", query " << i;
      }
    }
  }
}

TEST(TileKeyBlocks, MultiHeadWindowsAcrossBlocksMatchTheReferenceOnAnyThreadCount) {
  // The last 64 queries of 17,384 keys, causal: window 1,000 gives tiles of
  // about 1,064 keys, some across key 16,384; window 9,000 tiles wider
  // than a block. Both go a key block at a time (without the weights).
  const test::Shape s{1, 64, kKeys, 2, 1, kDepth, kValueDim};
  const test::Inputs in(s, 51);
  for (const int64_t left : {1000, 9000}) {
    test::Form form;
    form.causal = Causal::kBottomRight;
    form.window_left = left;
    form.window_right = 0;
    std::vector<double> weights;
    const std::vector<double> want = test::Reference(s, in, {}, false, form, &weights);
    const test::Result one =
        test::RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form), false);
    EXPECT_LE(MaxAbsDiff(one.out.data(), want), OutTolerance(in.v)) << "window " << left;
    const std::unique_ptr<Engine> two = EngineWithThreads(2);
    ASSERT_NE(two, nullptr);
    const test::Result both =
        test::RunMultiHead(*two, s, in, ValidLens::None(), OptionsOf(s, form), false);
    EXPECT_TRUE(SameBits(one.out, both.out)) << "window " << left;
    // With the weights, through the matmul path: the same values.
    const test::Result with_weights =
        test::RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), OptionsOf(s, form));
    EXPECT_LE(MaxAbsDiff(with_weights.out.data(), want), OutTolerance(in.v)) << "window " << left;
    EXPECT_LE(MaxAbsDiff(with_weights.weights.data(), weights), kWeightTolerance);
  }
}

}  // namespace
}  // namespace attnscore::test
