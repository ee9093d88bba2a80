// Multi-head attention (docs/semantics.md section 5): Engine::MultiHeadAttention
// on every Highway target against a double-precision reference written from
// the section's definition, and the identities the contract promises: grouped
// heads equal repeated ones, both head layouts give the same bits, the causal
// option equals its per-query lengths, the thread count changes no bit.
// Then d2l's MultiHeadAttention module against golden data from the seed
// module (tools/make_golden.py) and its bad input.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/kv_cache_bytes.h"
#include "io/safetensors.h"
#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MultiHeadTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MultiHeadTest);

TEST_P(MultiHeadTest, MatchesTheReferenceForEveryHeadGroupingLengthKindAndMask) {
  // N = 2 runs the row path, N = 9 the matmul path; M >= N for bottom-right.
  const std::vector<Shape> shapes = {{2, 2, 11, 4, 4, 8, 5},
                                     {2, 9, 13, 4, 2, 16, 8},
                                     {3, 9, 9, 6, 1, 4, 3},
                                     {1, 1, 1, 2, 1, 3, 2},
                                     {2, 3, 40, 8, 2, 32, 16}};
  ForEachShapeLengthKindAndMask(
      shapes, 100,
      [](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
         Causal causal) {
        MultiHeadOptions options;
        options.causal = causal;
        const Result r = RunMultiHead(DefaultEngine(), s, in,
                                      LensOf(lens, per_query, s.batch, s.queries), options);
        std::vector<double> weights;
        const std::vector<double> out = Reference(s, in, lens, per_query, Form{causal}, &weights);
        EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
        EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
      });
}

// On 2 threads the prefill runs every head's tiles at once
// (ops/multihead_tiles.h): against the reference, and with one thread's bits
// (a head at a time there), for tiles whole and partial, grouped heads,
// every length kind and mask, with the weights and without.
TEST_P(MultiHeadTest, HeadsAtOnceMatchTheReferenceAndOneThreadsBits) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  const std::vector<Shape> shapes = {{2, 9, 13, 4, 2, 16, 8},
                                     {1, 33, 40, 4, 4, 16, 8},
                                     {2, 70, 70, 6, 2, 8, 12},
                                     {1, 64, 100, 2, 1, 64, 64}};
  ForEachShapeLengthKindAndMask(
      shapes, 300,
      [&](const Shape& s, const Inputs& in, const std::vector<int64_t>& lens, bool per_query,
          Causal causal) {
        ExpectMatchesReference(*two, s, in, lens, per_query, Form{causal});
        const ValidLens valid = LensOf(lens, per_query, s.batch, s.queries);
        const MultiHeadOptions options = OptionsOf(s, Form{causal});
        const Result r = RunMultiHead(*two, s, in, valid, options);
        const Result one = RunMultiHead(DefaultEngine(), s, in, valid, options);
        EXPECT_EQ(r.out, one.out);
        EXPECT_EQ(r.weights, one.weights);
        EXPECT_EQ(RunMultiHead(*two, s, in, valid, options, false).out, one.out);
      });
}

// Where a head's dot product would not take the tile path (3 queries with
// Q's columns strided: the row path), 2 threads run it as 1 does: the same
// bits. A query with a NaN gets NaN weights over every key and a NaN
// output on both.
TEST(MultiHeadThreads, TwoThreadsKeepOneThreadsPathAndNaNRows) {
  const std::unique_ptr<Engine> two = EngineWithThreads(2);
  const Shape s{2, 3, 50, 4, 2, 16, 8};
  const Inputs in(s, 91);
  std::vector<float> spread(2 * in.q.size());
  for (size_t e = 0; e < in.q.size(); ++e) spread[2 * e] = in.q[e];
  const ConstTensor q(spread.data(), {s.batch, s.queries, s.heads, s.depth},
                      {2 * s.queries * s.heads * s.depth, 2 * s.heads * s.depth, 2 * s.depth, 2});
  MultiHeadOptions causal;
  causal.causal = Causal::kBottomRight;
  std::vector<float> one_out(s.out()), two_out(s.out());
  const auto run = [&](const Engine& engine, std::vector<float>* out) {
    return engine.MultiHeadAttention(
        q, KeysOf(s, in.k), ValuesOf(s, in.v), ValidLens::None(), causal,
        Tensor(out->data(), {s.batch, s.queries, s.heads, s.value_dim}));
  };
  ASSERT_TRUE(run(DefaultEngine(), &one_out).ok());
  ASSERT_TRUE(run(*two, &two_out).ok());
  EXPECT_EQ(one_out, two_out);

  const Shape p{1, 64, 64, 2, 2, 16, 8};
  Inputs nan_in(p, 92);
  nan_in.q[(5 * p.heads + 1) * p.depth] = NAN;  // query 5, head 1
  for (const Engine* engine : {&DefaultEngine(), static_cast<const Engine*>(two.get())}) {
    const Result r = RunMultiHead(*engine, p, nan_in, ValidLens::None(), causal);
    for (int64_t j = 0; j < p.keys; ++j) {
      ASSERT_TRUE(std::isnan(r.weights[static_cast<size_t>((1 * p.queries + 5) * p.keys + j)]))
          << j;
    }
    EXPECT_TRUE(std::isnan(r.out[static_cast<size_t>((5 * p.heads + 1) * p.value_dim)]));
    EXPECT_FALSE(std::isnan(r.out[static_cast<size_t>((6 * p.heads + 1) * p.value_dim)]));
  }
}

TEST_P(MultiHeadTest, AGivenScaleReplacesOneOverRootD) {
  const Shape s{2, 4, 10, 2, 1, 8, 4};
  const Inputs in(s, 7);
  MultiHeadOptions options;
  options.scale = -0.75f;
  const Result r = RunMultiHead(DefaultEngine(), s, in, ValidLens::None(), options);
  std::vector<double> weights;
  const std::vector<double> out = Reference(s, in, {}, false, Causal::kNone, -0.75, &weights);
  EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
  EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
}

// K and V with Hkv heads against the same call with each repeated Hq / Hkv
// times (head h reads head h / group): the same bits.
TEST_P(MultiHeadTest, GroupedAndMultiQueryEqualKeysAndValuesRepeatedPerHead) {
  // The last two: 16 heads a group, more than a chunk of rows; one in whole
  // rows, one in key blocks.
  for (const Shape& s :
       {Shape{2, 5, 17, 8, 2, 16, 8}, Shape{2, 2, 30, 4, 1, 8, 8}, Shape{1, 40, 50, 6, 3, 8, 4},
        Shape{2, 1, 300, 16, 1, 64, 64}, Shape{2, 2, 700, 16, 1, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 21);
    Shape full = s;
    full.kv_heads = s.heads;
    Inputs repeated = in;
    repeated.k.clear();
    repeated.v.clear();
    const int64_t group = s.heads / s.kv_heads;
    for (int64_t row = 0; row < s.batch * s.keys; ++row) {
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t g = h / group;
        const auto k = in.k.begin() + (row * s.kv_heads + g) * s.depth;
        repeated.k.insert(repeated.k.end(), k, k + s.depth);
        const auto v = in.v.begin() + (row * s.kv_heads + g) * s.value_dim;
        repeated.v.insert(repeated.v.end(), v, v + s.value_dim);
      }
    }
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 3);
    const ValidLens valid = LensOf(lens, true, s.batch, s.queries);
    MultiHeadOptions options;
    options.causal = Causal::kBottomRight;
    const Result grouped = RunMultiHead(DefaultEngine(), s, in, valid, options);
    const Result expected = RunMultiHead(DefaultEngine(), full, repeated, valid, options);
    EXPECT_EQ(grouped.out, expected.out);
    EXPECT_EQ(grouped.weights, expected.weights);
  }
}

// Heads-first memory (B, H, N, D), viewed as (B, N, H, D) by strides, gives
// the bits of the token-major call; so do heads-first outputs. The third
// shape decodes with whole rows, token-major heads side by side through
// ranges of their keys, heads-first ones a head at a time.
TEST_P(MultiHeadTest, HeadsFirstLayoutGivesTheSameBitsAsTokenMajor) {
  for (const Shape& s : {Shape{2, 3, 21, 4, 2, 8, 8}, Shape{2, 33, 40, 4, 4, 16, 8},
                         Shape{4, 2, 300, 8, 4, 64, 64}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 41);
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, false, 5);
    const ValidLens valid = LensOf(lens, false, s.batch, s.queries);
    const Result token_major = RunMultiHead(DefaultEngine(), s, in, valid, {});

    // (B, N, H, F) -> (B, H, N, F) copies.
    const auto heads_first = [&](const std::vector<float>& x, int64_t rows, int64_t heads,
                                 int64_t features) {
      std::vector<float> y(x.size());
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t n = 0; n < rows; ++n)
          for (int64_t h = 0; h < heads; ++h)
            std::copy_n(x.begin() + ((b * rows + n) * heads + h) * features, features,
                        y.begin() + ((b * heads + h) * rows + n) * features);
      return y;
    };
    const auto view = [&](const float* data, int64_t rows, int64_t heads, int64_t features) {
      return ConstTensor(data, {s.batch, rows, heads, features},
                         {heads * rows * features, features, rows * features, 1});
    };
    const std::vector<float> q = heads_first(in.q, s.queries, s.heads, s.depth);
    const std::vector<float> k = heads_first(in.k, s.keys, s.kv_heads, s.depth);
    const std::vector<float> v = heads_first(in.v, s.keys, s.kv_heads, s.value_dim);
    std::vector<float> out(s.out(), kSentinel), weights(s.weights(), kSentinel);
    ConstTensor out_view = view(out.data(), s.queries, s.heads, s.value_dim);
    const Status status = DefaultEngine().MultiHeadAttention(
        view(q.data(), s.queries, s.heads, s.depth), view(k.data(), s.keys, s.kv_heads, s.depth),
        view(v.data(), s.keys, s.kv_heads, s.value_dim), valid, {},
        Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim},
               {out_view.strides[0], out_view.strides[1], out_view.strides[2], 1}),
        Tensor(weights.data(), {s.batch, s.heads, s.queries, s.keys}));
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(weights, token_major.weights);
    // out is heads-first here: compare with the token-major result reordered.
    EXPECT_EQ(out, heads_first(token_major.out, s.queries, s.heads, s.value_dim));
  }
}

// The causal option is the per-query lengths it stands for (d2l's decoder
// passes arange(1, N + 1)), cut further by the caller's own lengths.
TEST_P(MultiHeadTest, CausalOptionEqualsItsPerQueryLengths) {
  for (const Shape& s :
       {Shape{2, 7, 7, 4, 2, 8, 8}, Shape{2, 3, 12, 2, 2, 8, 4}, Shape{1, 48, 64, 2, 1, 16, 16}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 61);
    const std::vector<int64_t> mine = TestLengths(s.batch, s.queries, s.keys, false, 9);
    for (Causal causal : {Causal::kTopLeft, Causal::kBottomRight}) {
      SCOPED_TRACE(CausalName(causal));
      std::vector<int64_t> bound(static_cast<size_t>(s.batch * s.queries));
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t i = 0; i < s.queries; ++i) {
          const int64_t limit = causal == Causal::kTopLeft ? i + 1 : s.keys - s.queries + i + 1;
          bound[static_cast<size_t>(b * s.queries + i)] =
              std::min(mine[static_cast<size_t>(b)], limit);
        }
      }
      MultiHeadOptions options;
      options.causal = causal;
      const Result masked =
          RunMultiHead(DefaultEngine(), s, in, LensOf(mine, false, s.batch, s.queries), options);
      const Result lengths =
          RunMultiHead(DefaultEngine(), s, in, LensOf(bound, true, s.batch, s.queries), {});
      EXPECT_EQ(masked.out, lengths.out);
      EXPECT_EQ(masked.weights, lengths.weights);
    }
  }
}

TEST(MultiHeadThreads, ResultsIdenticalForAnyThreadCount) {
  EngineOptions options;
  options.threads = 2;
  std::unique_ptr<Engine> two;
  ASSERT_TRUE(Engine::Create(options, &two).ok());
  for (const Shape& s : {Shape{4, 1, 700, 8, 2, 64, 64}, Shape{4, 1, 300, 8, 4, 64, 64},
                         Shape{2, 64, 300, 4, 4, 32, 32}}) {
    SCOPED_TRACE(s.Name());
    const Inputs in(s, 81);
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 11);
    const ValidLens valid = LensOf(lens, true, s.batch, s.queries);
    MultiHeadOptions causal;
    causal.causal = Causal::kBottomRight;
    const Result one_thread = RunMultiHead(DefaultEngine(), s, in, valid, causal);
    const Result two_threads = RunMultiHead(*two, s, in, valid, causal);
    EXPECT_EQ(one_thread.out, two_threads.out);
    EXPECT_EQ(one_thread.weights, two_threads.weights);
    // Without the weights, the same out.
    std::vector<float> out(s.out(), kSentinel);
    ASSERT_TRUE(two->MultiHeadAttention(
                       QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v), valid, causal,
                       Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}))
                    .ok());
    EXPECT_EQ(out, one_thread.out);
  }
}

// Each bad call fails with its message and leaves both outputs as they were.
TEST(MultiHeadErrors, RejectsBadInputNamingItAndWritesNothing) {
  const Shape s{2, 3, 5, 4, 2, 8, 6};
  const Inputs in(s, 3);
  std::vector<float> out(s.out(), kSentinel), weights(s.weights(), kSentinel);
  const ConstTensor q = QueriesOf(s, in.q), k = KeysOf(s, in.k), v = ValuesOf(s, in.v);
  const Tensor o(out.data(), {s.batch, s.queries, s.heads, s.value_dim});
  const Tensor w(weights.data(), {s.batch, s.heads, s.queries, s.keys});
  const int64_t negative[] = {2, -1};
  struct Case {
    const char* expected;
    Status status;
  };
  MultiHeadOptions bottom_right, infinite, bogus;
  bottom_right.causal = Causal::kBottomRight;
  infinite.scale = INFINITY;
  bogus.causal = static_cast<Causal>(7);
  const Shape wide{2, 6, 5, 4, 2, 8, 6};
  const Inputs wide_in(wide, 4);
  std::vector<float> wide_out(wide.out(), kSentinel);
  const Case cases[] = {
      {"MultiHeadAttention: queries must have rank 4 (B, N, Hq, D) but has rank 3",
       DefaultEngine().MultiHeadAttention(ConstTensor(in.q.data(), {2, 3, 32}), k, v,
                                          ValidLens::None(), {}, o, w)},
      {"MultiHeadAttention: queries (2, 3, 3, 8) have 3 heads and keys (2, 5, 2, 8) have 2; the "
       "query heads Hq must be a multiple of the key-value heads Hkv",
       DefaultEngine().MultiHeadAttention(ConstTensor(in.q.data(), {2, 3, 3, 8}), k, v,
                                          ValidLens::None(), {}, Tensor(out.data(), {2, 3, 3, 6}),
                                          w)},
      {"MultiHeadAttention: causal bottom-right aligns the last query with the last key, so it "
       "needs at least as many keys as queries; keys (2, 5, 2, 8) have M = 5 and queries "
       "(2, 6, 4, 8) N = 6",
       DefaultEngine().MultiHeadAttention(
           QueriesOf(wide, wide_in.q), KeysOf(wide, wide_in.k), ValuesOf(wide, wide_in.v),
           ValidLens::None(), bottom_right, Tensor(wide_out.data(), {2, 6, 4, 6}), Tensor())},
      {"MultiHeadAttention: scale is inf; it must be finite",
       DefaultEngine().MultiHeadAttention(q, k, v, ValidLens::None(), infinite, o, w)},
      {"MultiHeadAttention: causal is 7, not a Causal",
       DefaultEngine().MultiHeadAttention(q, k, v, ValidLens::None(), bogus, o, w)},
      {"MultiHeadAttention: attention_weights has shape (2, 3, 4, 5) but must be (B, Hq, N, M) = "
       "(2, 4, 3, 5)",
       DefaultEngine().MultiHeadAttention(q, k, v, ValidLens::None(), {}, o,
                                          Tensor(weights.data(), {2, 3, 4, 5}))},
      {"MultiHeadAttention: valid_lens[1] is -1; lengths must be >= 0",
       DefaultEngine().MultiHeadAttention(q, k, v, ValidLens::PerBatch(negative, 2), {}, o, w)},
      {"MultiHeadAttention: out overlaps queries",
       DefaultEngine().MultiHeadAttention(q, k, v, ValidLens::None(), {},
                                          Tensor(const_cast<float*>(in.q.data()), {2, 3, 4, 6}),
                                          w)},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.expected;
    EXPECT_EQ(c.status.message().substr(0, std::string(c.expected).size()), c.expected);
  }
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  EXPECT_TRUE(std::all_of(weights.begin(), weights.end(), [](float x) { return x == kSentinel; }));
  EXPECT_TRUE(
      std::all_of(wide_out.begin(), wide_out.end(), [](float x) { return x == kSentinel; }));
}

// A decoder's loop over the cache: append one position, attend with that
// position's query. Each step equals the op on the positions so far (the
// same bits) and the reference's causal self-attention row.
TEST_P(MultiHeadTest, KvCacheDecodeStepsEqualTheOpAndTheCausalReference) {
  const Shape s{2, 9, 9, 8, 2, 16, 8};  // the whole sequence: N = M = 9
  const Inputs in(s, 91);
  KvCacheShape shape;
  shape.batch = s.batch, shape.capacity = 12, shape.kv_heads = s.kv_heads;
  shape.key_dim = s.depth, shape.value_dim = s.value_dim;
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  std::vector<double> weights;
  const std::vector<double> want = Reference(
      s, in, {}, false, Causal::kTopLeft, 1.0 / std::sqrt(static_cast<double>(s.depth)), &weights);
  const int64_t key_row = s.kv_heads * s.depth, value_row = s.kv_heads * s.value_dim;
  const int64_t query_row = s.heads * s.depth;
  for (int64_t t = 0; t < s.keys; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    // Position t of each sequence: strided views into the whole inputs.
    const ConstTensor k_t(in.k.data() + t * key_row, {s.batch, 1, s.kv_heads, s.depth},
                          {s.keys * key_row, key_row, s.depth, 1});
    const ConstTensor v_t(in.v.data() + t * value_row, {s.batch, 1, s.kv_heads, s.value_dim},
                          {s.keys * value_row, value_row, s.value_dim, 1});
    ASSERT_TRUE(cache->Append(k_t, v_t).ok());
    EXPECT_EQ(cache->length(0), t + 1);
    const ConstTensor q_t(in.q.data() + t * query_row, {s.batch, 1, s.heads, s.depth},
                          {s.queries * query_row, query_row, s.depth, 1});
    std::vector<float> out(static_cast<size_t>(s.batch * s.heads * s.value_dim), kSentinel);
    std::vector<float> w(static_cast<size_t>(s.batch * s.heads * (t + 1)), kSentinel);
    Status status =
        cache->Attend(DefaultEngine(), q_t, Tensor(out.data(), {s.batch, 1, s.heads, s.value_dim}),
                      Tensor(w.data(), {s.batch, s.heads, 1, t + 1}));
    ASSERT_TRUE(status.ok()) << status.message();
    // The op on the positions so far, from the caller's own token-major memory.
    std::vector<float> op_out(out.size(), kSentinel), op_w(w.size(), kSentinel);
    status = DefaultEngine().MultiHeadAttention(
        q_t,
        ConstTensor(in.k.data(), {s.batch, t + 1, s.kv_heads, s.depth},
                    {s.keys * key_row, key_row, s.depth, 1}),
        ConstTensor(in.v.data(), {s.batch, t + 1, s.kv_heads, s.value_dim},
                    {s.keys * value_row, value_row, s.value_dim, 1}),
        ValidLens::None(), {}, Tensor(op_out.data(), {s.batch, 1, s.heads, s.value_dim}),
        Tensor(op_w.data(), {s.batch, s.heads, 1, t + 1}));
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(out, op_out);
    EXPECT_EQ(w, op_w);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t c = 0; c < s.value_dim; ++c) {
          const double expected =
              want[static_cast<size_t>(((b * s.queries + t) * s.heads + h) * s.value_dim + c)];
          EXPECT_NEAR(out[static_cast<size_t>((b * s.heads + h) * s.value_dim + c)], expected,
                      OutTolerance(in.v));
        }
        for (int64_t j = 0; j <= t; ++j) {
          EXPECT_NEAR(
              w[static_cast<size_t>((b * s.heads + h) * (t + 1) + j)],
              weights[static_cast<size_t>(((b * s.heads + h) * s.queries + t) * s.keys + j)],
              kWeightTolerance);
        }
      }
    }
  }
}

// Sequences of different lengths, several new queries each: query i of
// sequence b sees its keys 0 .. L_b - N + i; weights are zero past L_b.
TEST_P(MultiHeadTest, KvCacheSequencesOfDifferentLengthsAttendToTheirOwnKeys) {
  const Shape s{3, 3, 20, 4, 2, 8, 8};  // keys: the longest sequence's 20
  const Inputs in(s, 93);
  KvCacheShape shape;
  shape.batch = 3, shape.capacity = 32, shape.kv_heads = 2, shape.key_dim = 8, shape.value_dim = 8;
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const int64_t held[] = {20, 3, 11};
  const int64_t key_row = s.kv_heads * s.depth;
  for (int64_t b = 0; b < 3; ++b) {
    // Two appends per sequence, split anywhere.
    const int64_t first = held[b] / 2;
    const float* k = in.k.data() + b * s.keys * key_row;
    const float* v = in.v.data() + b * s.keys * key_row;
    ASSERT_TRUE(
        cache->AppendTo(b, ConstTensor(k, {first, 2, 8}), ConstTensor(v, {first, 2, 8})).ok());
    ASSERT_TRUE(cache
                    ->AppendTo(b, ConstTensor(k + first * key_row, {held[b] - first, 2, 8}),
                               ConstTensor(v + first * key_row, {held[b] - first, 2, 8}))
                    .ok());
    EXPECT_EQ(cache->length(b), held[b]);
  }
  std::vector<float> out(s.out(), kSentinel), w(s.weights(), kSentinel);
  const Status status =
      cache->Attend(DefaultEngine(), QueriesOf(s, in.q), Tensor(out.data(), {3, 3, 4, 8}),
                    Tensor(w.data(), {3, 4, 3, 20}));
  ASSERT_TRUE(status.ok()) << status.message();
  std::vector<int64_t> lens;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 3; ++i) lens.push_back(held[b] - 3 + i + 1);
  std::vector<double> weights;
  const std::vector<double> want =
      Reference(s, in, lens, true, Causal::kNone, 1.0 / std::sqrt(8.0), &weights);
  EXPECT_LE(MaxAbsDiff(w.data(), weights), kWeightTolerance);
  EXPECT_LE(MaxAbsDiff(out.data(), want), OutTolerance(in.v));
}

TEST(MultiHeadKvCache, RefusesBadShapesAndOverflowChangingNothing) {
  std::unique_ptr<KvCache> cache;
  KvCacheShape shape;
  shape.batch = 2, shape.capacity = 4, shape.kv_heads = 2, shape.key_dim = 3, shape.value_dim = 5;
  KvCacheShape bad = shape;
  bad.capacity = 0;
  EXPECT_EQ(KvCache::Create(bad, &cache).message(),
            "KvCache::Create: capacity is 0; it must be at least 1");
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const std::vector<float> k(2 * 3 * 2 * 3, 0.5f), v(2 * 3 * 2 * 5, 0.25f), q(2 * 1 * 4 * 3, 1.0f);
  std::vector<float> out(2 * 4 * 5, kSentinel);
  const Tensor o(out.data(), {2, 1, 4, 5});
  EXPECT_EQ(cache->Attend(DefaultEngine(), ConstTensor(q.data(), {2, 1, 4, 3}), o).message(),
            "KvCache: sequence 0 holds 0 positions but queries (2, 1, 4, 3) are its newest 1; "
            "append their keys and values first");
  ASSERT_TRUE(
      cache->Append(ConstTensor(k.data(), {2, 3, 2, 3}), ConstTensor(v.data(), {2, 3, 2, 5})).ok());
  EXPECT_EQ(cache->Append(ConstTensor(k.data(), {2, 3, 2, 3}), ConstTensor(v.data(), {2, 3, 2, 5}))
                .message(),
            "KvCache: sequence 0 holds 3 of its 4 positions; 3 more do not fit");
  EXPECT_EQ(cache->length(0), 3);
  EXPECT_EQ(cache->Append(ConstTensor(k.data(), {2, 1, 3, 3}), ConstTensor(v.data(), {2, 1, 2, 5}))
                .message(),
            "KvCache: keys has shape (2, 1, 3, 3) but must be (B, T, Hkv, D) = (2, *, 2, 3)");
  EXPECT_EQ(cache->AppendTo(2, ConstTensor(k.data(), {1, 2, 3}), ConstTensor(v.data(), {1, 2, 5}))
                .message(),
            "KvCache: sequence is 2; the cache has sequences 0..1");
  EXPECT_EQ(cache->AppendTo(1, ConstTensor(k.data(), {1, 2, 3}), ConstTensor(v.data(), {2, 2, 5}))
                .message(),
            "KvCache: values has shape (2, 2, 5) but must be (T, Hkv, Dv) = (1, 2, 5)");
  EXPECT_EQ(cache->length(1), 3);
  EXPECT_EQ(cache->Attend(DefaultEngine(), ConstTensor(q.data(), {2, 1, 3, 4}), o).message(),
            "KvCache: queries has shape (2, 1, 3, 4) but must be (B, N, Hq, D) = (2, *, *, 3)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  // Cleared, a sequence takes new positions from 0.
  ASSERT_TRUE(cache->Clear(1).ok());
  EXPECT_EQ(cache->length(1), 0);
  ASSERT_TRUE(
      cache->AppendTo(1, ConstTensor(k.data(), {4, 2, 3}), ConstTensor(v.data(), {4, 2, 5})).ok());
  EXPECT_EQ(cache->length(1), 4);
  // Every cached value row is 0.25, so every output is, up to rounding.
  ASSERT_TRUE(cache->Attend(DefaultEngine(), ConstTensor(q.data(), {2, 1, 4, 3}), o).ok());
  for (float x : out) EXPECT_NEAR(x, 0.25f, 1e-6f);
}

// With a pool, positions live in blocks shared by the sequences. D = Dv =
// 64 and blocks of the fewest positions that are whole pages (16 with 4 KiB
// pages).
KvCacheShape PooledShape(int64_t batch, int64_t capacity, int64_t blocks) {
  KvCacheShape shape;
  shape.batch = batch, shape.capacity = capacity, shape.kv_heads = 2;
  shape.key_dim = 64, shape.value_dim = 64;
  shape.block_positions = sysconf(_SC_PAGESIZE) / (64 * static_cast<int64_t>(sizeof(float)));
  shape.blocks = blocks;
  return shape;
}

// Sequences of different lengths in a pool hold the blocks their lengths
// take, and attend with the bits of the same appends to a cache without one
// (the same op on the same keys); an append that needs more blocks than are
// free fails, changing nothing, and a cleared sequence's blocks serve
// another.
TEST(MultiHeadKvCache, InAPoolSequencesHoldTheirBlocksAndAttendAsWithoutOne) {
  KvCacheShape pooled = PooledShape(3, 0, 6);
  const int64_t block = pooled.block_positions;
  // Not whole blocks: the pool rounds each sequence's positions up to 6
  // blocks, the cache without one keeps 6 blocks less 5, so their strides
  // differ.
  pooled.capacity = 6 * block - 5;
  KvCacheShape own = pooled;
  own.block_positions = 0, own.blocks = 0;
  std::unique_ptr<KvCache> pool, plain;
  ASSERT_TRUE(KvCache::Create(pooled, &pool).ok());
  ASSERT_TRUE(KvCache::Create(own, &plain).ok());
  EXPECT_EQ(pool->blocks_in_use(), 0);
  const int64_t row = 2 * 64;  // a position's Hkv · D floats
  const std::vector<float> k = RandomFloats(static_cast<size_t>(5 * block * row), 31);
  const std::vector<float> v = RandomFloats(static_cast<size_t>(5 * block * row), 32, 3.0f);
  const auto append = [&](KvCache& cache, int64_t b, int64_t from, int64_t count) {
    return cache.AppendTo(b, ConstTensor(k.data() + from * row, {count, 2, 64}),
                          ConstTensor(v.data() + from * row, {count, 2, 64}));
  };
  // Lengths 2 blocks + 1, 1 block, 1: 3 + 1 + 1 = 5 of the 6 blocks.
  int64_t held[] = {2 * block + 1, block, 1};
  for (int64_t b = 0; b < 3; ++b) {
    for (KvCache* cache : {pool.get(), plain.get()}) {
      if (held[b] > 1) {
        ASSERT_TRUE(append(*cache, b, b, held[b] - 1).ok());
      }
      ASSERT_TRUE(append(*cache, b, b + held[b] - 1, 1).ok());
    }
  }
  EXPECT_EQ(pool->blocks_in_use(), 5);
  const std::vector<float> q = RandomFloats(3 * 4 * 64, 33);
  const auto attend = [&](const KvCache& cache, std::vector<float>* out, std::vector<float>* w) {
    out->assign(3 * 4 * 64, kSentinel);
    w->assign(static_cast<size_t>(3 * 4 * held[0]), kSentinel);
    return cache.Attend(DefaultEngine(), ConstTensor(q.data(), {3, 1, 4, 64}),
                        Tensor(out->data(), {3, 1, 4, 64}), Tensor(w->data(), {3, 4, 1, held[0]}));
  };
  std::vector<float> out, w, plain_out, plain_w;
  ASSERT_TRUE(attend(*pool, &out, &w).ok());
  ASSERT_TRUE(attend(*plain, &plain_out, &plain_w).ok());
  EXPECT_EQ(out, plain_out);
  EXPECT_EQ(w, plain_w);

  // Sequence 0 two blocks more for 2 blocks of positions, every sequence
  // one each for a block more: refused, with 1 block free.
  EXPECT_EQ(append(*pool, 0, 0, 2 * block).message(),
            "KvCache: the pool has 1 of its 6 blocks of " + std::to_string(block) +
                " positions free; appending " + std::to_string(2 * block) +
                " positions to sequence 0 needs 2");
  const std::vector<float> ones(static_cast<size_t>(3 * block * row), 0.5f);
  const ConstTensor block_each(ones.data(), {3, block, 2, 64});
  EXPECT_EQ(pool->Append(block_each, block_each).message(),
            "KvCache: the pool has 1 of its 6 blocks of " + std::to_string(block) +
                " positions free; appending " + std::to_string(block) +
                " positions to every sequence needs 3");
  EXPECT_EQ(pool->length(0), held[0]);
  EXPECT_EQ(pool->blocks_in_use(), 5);
  ASSERT_TRUE(attend(*pool, &out, &w).ok());
  EXPECT_EQ(out, plain_out);

  // Cleared, sequence 1's block goes back, its neighbours' positions
  // untouched: sequence 0 takes one more block, and sequence 1 starts again
  // from its first position.
  ASSERT_TRUE(pool->Clear(1).ok());
  ASSERT_TRUE(plain->Clear(1).ok());
  EXPECT_EQ(pool->length(1), 0);
  EXPECT_EQ(pool->blocks_in_use(), 4);
  for (KvCache* cache : {pool.get(), plain.get()}) {
    ASSERT_TRUE(append(*cache, 0, 5, block).ok());
    ASSERT_TRUE(append(*cache, 1, 9, 3).ok());
  }
  EXPECT_EQ(pool->blocks_in_use(), 6);
  held[0] += block;
  ASSERT_TRUE(attend(*pool, &out, &w).ok());
  ASSERT_TRUE(attend(*plain, &plain_out, &plain_w).ok());
  EXPECT_EQ(out, plain_out);
  EXPECT_EQ(w, plain_w);
}

// Anonymous resident memory of this process's own pages, in bytes: the
// pages a pool takes, and no file's. Under AddressSanitizer the shadow of
// the memory a pool wrote stays resident after the pool gives the memory
// back (4 MiB for 32 MiB on a Zen 5 host, the library of the last release
// alike): the sanitizer's, not the process's, so the mappings of its
// shadow (x86-64: [0x7fff8000, 0x10007fff8000)) are left out; elsewhere
// this is RssAnon of /proc/self/status.
int64_t AnonymousResidentBytes() {
#if defined(__SANITIZE_ADDRESS__)
  constexpr uint64_t kShadowBegin = 0x7fff8000, kShadowEnd = 0x10007fff8000;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool shadow = false;
  int64_t kib = 0;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash <= 16 && line.find(' ') > dash) {
      // A mapping's first line: "begin-end perms ...", addresses in hex.
      const uint64_t begin = std::stoull(line.substr(0, dash), nullptr, 16);
      const uint64_t end = std::stoull(line.substr(dash + 1), nullptr, 16);
      shadow = begin >= kShadowBegin && end <= kShadowEnd;
    } else if (!shadow && line.rfind("Anonymous:", 0) == 0) {
      kib += std::stoll(line.substr(10));
    }
  }
  return kib * 1024;
#else
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;  // kB
  }
  ADD_FAILURE() << "no RssAnon in /proc/self/status";
  return 0;
#endif
}

// What the engine reads when it attends (internal::KvCacheBytes, the bytes
// the decode benchmark reads as its limit): each sequence's keys, then its
// values, head by head, over the positions it holds, as they were appended;
// the same with a pool of blocks.
TEST(MultiHeadKvCache, HeldBytesAreWhatWasAppendedHeadByHead) {
  for (const bool pooled : {false, true}) {
    KvCacheShape shape = PooledShape(2, 40, 6);
    if (!pooled) shape.block_positions = 0, shape.blocks = 0;
    std::unique_ptr<KvCache> cache;
    ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
    const int64_t lengths[] = {5, 19}, row = 2 * 64;  // a position's Hkv · D floats
    std::vector<std::vector<float>> k, v;
    for (int64_t b = 0; b < 2; ++b) {
      k.push_back(RandomFloats(static_cast<size_t>(lengths[b] * row), 41 + b));
      v.push_back(RandomFloats(static_cast<size_t>(lengths[b] * row), 43 + b));
      ASSERT_TRUE(cache
                      ->AppendTo(b, ConstTensor(k[b].data(), {lengths[b], 2, 64}),
                                 ConstTensor(v[b].data(), {lengths[b], 2, 64}))
                      .ok());
    }
    const auto held = internal::KvCacheBytes::Held(*cache);
    ASSERT_EQ(held.size(), 8u) << "pooled " << pooled;
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t part = 0; part < 4; ++part) {  // keys of heads 0, 1; values of heads 0, 1
        const auto& [bytes, count] = held[static_cast<size_t>(b * 4 + part)];
        const auto* first = static_cast<const float*>(bytes);
        const std::vector<float>& given = part < 2 ? k[b] : v[b];
        const int64_t h = part % 2;
        ASSERT_EQ(count, static_cast<size_t>(lengths[b] * 64) * sizeof(float));
        for (int64_t t = 0; t < lengths[b]; ++t) {
          for (int64_t d = 0; d < 64; ++d) {
            ASSERT_EQ(first[t * 64 + d], given[static_cast<size_t>(t * row + h * 64 + d)])
                << "pooled " << pooled << ", sequence " << b << ", part " << part;
          }
        }
      }
    }
  }
}

// A pool takes memory as positions arrive and gives it back on Clear: its
// creation takes none of the 64 MiB it reserves, 32 MiB of keys and values
// appended to one sequence show in resident memory, and are gone once the
// sequence is cleared. (Nothing is allocated or freed between the samples,
// so ASan's quarantine does not move them.)
TEST(MultiHeadKvCache, APoolTakesMemoryAsPositionsArriveAndGivesItBackOnClear) {
  constexpr int64_t kPositions = 32768;  // 32768 · 2 heads · 128 floats · 4 bytes = 32 MiB
  constexpr int64_t kMiB = int64_t{1} << 20;
  const KvCacheShape shape = PooledShape(2, kPositions, 2 * kPositions);
  const std::vector<float> k(static_cast<size_t>(kPositions * 2 * 64), 0.5f);
  const ConstTensor rows(k.data(), {kPositions, 2, 64});
  std::unique_ptr<KvCache> cache;
  const int64_t before = AnonymousResidentBytes();
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const int64_t created = AnonymousResidentBytes();
  EXPECT_LT(created - before, kMiB);
  ASSERT_TRUE(cache->AppendTo(1, rows, rows).ok());
  const int64_t filled = AnonymousResidentBytes();
  EXPECT_GE(filled - created, 31 * kMiB);
  ASSERT_TRUE(cache->Clear(1).ok());
  EXPECT_EQ(cache->blocks_in_use(), 0);
  EXPECT_LT(AnonymousResidentBytes() - created, kMiB);
}

// BlockPositionsMultiple is the fewest positions P whose P · D and P · Dv
// floats are whole pages, found here by trying each P in turn; Create takes
// a pool of blocks of P positions and refuses P + 1.
TEST(MultiHeadKvCache, BlockPositionsMultipleIsTheFewestPositionsThatAreWholePages) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  const auto whole_pages = [page](int64_t p, int64_t dim) {
    return p * dim * static_cast<int64_t>(sizeof(float)) % page == 0;
  };
  for (const auto& [key_dim, value_dim] : {std::pair<int64_t, int64_t>{64, 64},
                                           {64, 32},
                                           {3, 1},
                                           {1, 1},
                                           {96, 80},
                                           {page, 1},
                                           {2 * page + 8, 64}}) {
    SCOPED_TRACE("D = " + std::to_string(key_dim) + ", Dv = " + std::to_string(value_dim));
    int64_t fewest = 1;
    while (!whole_pages(fewest, key_dim) || !whole_pages(fewest, value_dim)) ++fewest;
    const int64_t multiple = KvCache::BlockPositionsMultiple(key_dim, value_dim);
    EXPECT_EQ(multiple, fewest);
    KvCacheShape shape;
    shape.capacity = 2 * multiple, shape.key_dim = key_dim, shape.value_dim = value_dim;
    shape.block_positions = multiple, shape.blocks = 2;
    std::unique_ptr<KvCache> cache;
    EXPECT_TRUE(KvCache::Create(shape, &cache).ok());
    shape.block_positions = multiple + 1;
    EXPECT_FALSE(KvCache::Create(shape, &cache).ok());
  }
  // Huge dims: 4 · 2^62 would overflow (UBSan, in the sanitized suite,
  // reports it; wrapped, it would give the same 1). Dims below 1 have no
  // multiple.
  EXPECT_EQ(KvCache::BlockPositionsMultiple(int64_t{1} << 62, int64_t{1} << 62), 1);
  EXPECT_EQ(KvCache::BlockPositionsMultiple(0, 64), 0);
  EXPECT_EQ(KvCache::BlockPositionsMultiple(64, -1), 0);
}

TEST(MultiHeadKvCache, RefusesABadPool) {
  std::unique_ptr<KvCache> cache;
  const KvCacheShape good = PooledShape(2, 64, 4);
  const std::string page = std::to_string(sysconf(_SC_PAGESIZE));
  const int64_t block = good.block_positions;
  struct Case {
    int64_t block_positions, blocks, key_dim;
    std::string expected;
  };
  const Case cases[] = {
      {0, 4, 64,
       "KvCache::Create: block_positions is 0; a pool needs at least 1 (or both 0 for none)"},
      {block, 0, 64, "KvCache::Create: blocks is 0; a pool needs at least 1 (or both 0 for none)"},
      {-block, 4, 64,
       "KvCache::Create: block_positions is " + std::to_string(-block) +
           "; a pool needs at least 1 (or both 0 for none)"},
      {block / 2, 4, 64,
       "KvCache::Create: block_positions is " + std::to_string(block / 2) +
           "; a block of a head's keys (D = 64) and of its values (Dv = 64), in fp32, must be "
           "whole " +
           page + "-byte pages, so block_positions must be a multiple of " + std::to_string(block)},
      // D = 32 needs twice as many positions as Dv = 64.
      {block, 4, 32,
       "KvCache::Create: block_positions is " + std::to_string(block) +
           "; a block of a head's keys (D = 32) and of its values (Dv = 64), in fp32, must be "
           "whole " +
           page + "-byte pages, so block_positions must be a multiple of " +
           std::to_string(2 * block)},
  };
  for (const Case& c : cases) {
    KvCacheShape bad = good;
    bad.block_positions = c.block_positions, bad.blocks = c.blocks, bad.key_dim = c.key_dim;
    EXPECT_EQ(KvCache::Create(bad, &cache).message(), c.expected);
    EXPECT_EQ(cache, nullptr);
  }
  // 2^30 sequences of 1 position are 2^38 floats, but of a block each more than 2^40.
  KvCacheShape huge = good;
  huge.batch = int64_t{1} << 30, huge.capacity = 1;
  // The count as an integer: 2^30 · P · 2 · 128.
  EXPECT_EQ(KvCache::Create(huge, &cache).message(),
            "KvCache::Create: B · capacity rounded up to whole blocks · Hkv · (D + Dv) is " +
                std::to_string((int64_t{1} << 30) * block * 2 * 128) + " floats, more than 2^40");
  // A count past 2^53 in three digits and an exponent, not 58 digits and decimals.
  KvCacheShape huger = good;
  huger.batch = huger.capacity = huger.kv_heads = int64_t{1} << 30;
  huger.block_positions = huger.blocks = 0;
  EXPECT_EQ(KvCache::Create(huger, &cache).message(),
            "KvCache::Create: B · capacity · Hkv · (D + Dv) is 1.58e+29 floats, more than 2^40");
  ASSERT_TRUE(KvCache::Create(good, &cache).ok());
  EXPECT_EQ(cache->blocks_in_use(), 0);
}

std::string GoldenModel(const std::string& name) {
  return std::string(ATTNSCORE_GOLDEN_DIR) + "/" + name + "/model.safetensors";
}

struct ModelRun {
  Status status;
  std::vector<float> out, weights;
};

// The golden case's inputs through `model` with `lens` and `causal`.
ModelRun Forward(const MultiHeadAttention& model, const GoldenAttention& g, const ValidLens& lens,
                 Causal causal) {
  const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1];
  const int64_t hidden = model.num_hiddens(), heads = model.num_heads();
  ModelRun r{Status::Ok(), std::vector<float>(static_cast<size_t>(b * n * hidden), kSentinel),
             std::vector<float>(static_cast<size_t>(b * heads * n * m), kSentinel)};
  r.status = model.Forward(
      DefaultEngine(), ConstTensor(g.queries.data<float>(), {b, n, g.queries.shape[2]}),
      ConstTensor(g.keys.data<float>(), {b, m, g.keys.shape[2]}),
      ConstTensor(g.values.data<float>(), {b, m, g.values.shape[2]}), lens, causal,
      Tensor(r.out.data(), {b, n, hidden}), Tensor(r.weights.data(), {b, heads, n, m}));
  return r;
}

// Out within 1e-4 relative of the module's float64 result (as concat's
// linear layers), weights within 1e-5.
void ExpectMatchesModelGolden(const GoldenAttention& g, const ModelRun& r) {
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  ASSERT_EQ(r.out.size(), g.out.size());
  ASSERT_EQ(r.weights.size(), g.weights.size());
  const float* want = g.out.data<float>();
  for (size_t e = 0; e < r.out.size(); ++e) {
    EXPECT_NEAR(r.out[e], want[e], 1e-4 * (1.0 + std::abs(want[e]))) << e;
  }
  const float* want_weights = g.weights.data<float>();
  EXPECT_LE(MaxAbsDiff(r.weights.data(),
                       std::vector<double>(want_weights, want_weights + g.weights.size())),
            kWeightTolerance);
}

TEST_P(MultiHeadTest, D2lModuleMatchesTheSeedModule) {
  for (const char* name : {"multihead_h8_bias_per_query", "multihead_h1_per_batch_int32",
                           "multihead_h8_no_lens", "multihead_causal_self"}) {
    SCOPED_TRACE(name);
    GoldenAttention g;
    LoadGoldenAttention(name, &g);
    const npy::NpyArray heads = LoadGolden(name, "heads");
    std::unique_ptr<MultiHeadAttention> model;
    const Status loaded =
        MultiHeadAttention::Load(GoldenModel(name), heads.data<int64_t>()[0], &model);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    EXPECT_EQ(model->num_heads(), heads.data<int64_t>()[0]);
    EXPECT_EQ(model->num_hiddens(), g.out.shape[2]);
    EXPECT_EQ(model->query_size(), g.queries.shape[2]);
    EXPECT_EQ(model->key_size(), g.keys.shape[2]);
    EXPECT_EQ(model->value_size(), g.values.shape[2]);
    ExpectMatchesModelGolden(g, Forward(*model, g, g.lens, Causal::kNone));
  }
}

// d2l's decoder masks self-attention with per-query lengths 1..N; the
// top-left mask says the same without lengths, to the bit.
TEST_P(MultiHeadTest, D2lCausalLengthsAndTheCausalOptionGiveTheSameNumbers) {
  GoldenAttention g;
  LoadGoldenAttention("multihead_causal_self", &g);
  std::unique_ptr<MultiHeadAttention> model;
  ASSERT_TRUE(MultiHeadAttention::Load(GoldenModel("multihead_causal_self"), 4, &model).ok());
  const ModelRun lengths = Forward(*model, g, g.lens, Causal::kNone);
  const ModelRun masked = Forward(*model, g, ValidLens::None(), Causal::kTopLeft);
  ExpectMatchesModelGolden(g, masked);
  EXPECT_EQ(masked.out, lengths.out);
  EXPECT_EQ(masked.weights, lengths.weights);
}

// Create from strided views of the parameters gives Load's bits.
TEST(MultiHeadModel, CreateFromViewsEqualsLoad) {
  const std::string name = "multihead_h8_bias_per_query";
  GoldenAttention g;
  LoadGoldenAttention(name, &g);
  std::unique_ptr<MultiHeadAttention> loaded, created;
  ASSERT_TRUE(MultiHeadAttention::Load(GoldenModel(name), 8, &loaded).ok());
  std::vector<io::SafetensorsTensor> tensors;
  ASSERT_TRUE(io::ReadSafetensors(GoldenModel(name), &tensors).ok());
  const auto find = [&](const char* tensor) -> const io::SafetensorsTensor& {
    for (const auto& t : tensors) {
      if (t.name == tensor) return t;
    }
    ADD_FAILURE() << tensor;
    return tensors[0];
  };
  // Each weight stored transposed, (in, out), viewed back as (out, in).
  std::vector<std::vector<float>> storage;
  const auto view_transposed = [&](const io::SafetensorsTensor& t) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> stored(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) stored[c * rows + r] = t.data[r * cols + c];
    storage.push_back(std::move(stored));
    return ConstTensor(storage.back().data(), {rows, cols}, {1, rows});
  };
  storage.reserve(4);
  MultiHeadWeights w;
  w.w_q = view_transposed(find("W_q.weight"));
  w.w_k = view_transposed(find("W_k.weight"));
  w.w_v = view_transposed(find("W_v.weight"));
  w.w_o = view_transposed(find("W_o.weight"));
  w.b_q = ConstTensor(find("W_q.bias").data.data(), {32});
  w.b_k = ConstTensor(find("W_k.bias").data.data(), {32});
  w.b_v = ConstTensor(find("W_v.bias").data.data(), {32});
  w.b_o = ConstTensor(find("W_o.bias").data.data(), {32});
  const Status s = MultiHeadAttention::Create(8, w, &created);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(created->has_bias());
  const ModelRun a = Forward(*loaded, g, g.lens, Causal::kNone);
  const ModelRun b = Forward(*created, g, g.lens, Causal::kNone);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.weights, b.weights);
}

TEST(MultiHeadModel, RejectsBadParametersAndInputNamingThem) {
  const std::vector<float> w_q = RandomFloats(32 * 12, 1), w_k = RandomFloats(32 * 10, 2),
                           w_v = RandomFloats(32 * 9, 3), w_o = RandomFloats(32 * 32, 4),
                           bias = RandomFloats(32, 5);
  MultiHeadWeights w;
  w.w_q = ConstTensor(w_q.data(), {32, 12});
  w.w_k = ConstTensor(w_k.data(), {32, 10});
  w.w_v = ConstTensor(w_v.data(), {32, 9});
  w.w_o = ConstTensor(w_o.data(), {32, 32});
  std::unique_ptr<MultiHeadAttention> model;
  Status s = MultiHeadAttention::Create(5, w, &model);
  EXPECT_EQ(s.message(),
            "MultiHeadAttention: num_heads is 5; it must be at least 1 and divide num_hiddens "
            "H = 32 (W_q.weight (32, 12))");
  MultiHeadWeights partial = w;
  partial.b_q = ConstTensor(bias.data(), {32});
  s = MultiHeadAttention::Create(4, partial, &model);
  EXPECT_EQ(s.message(),
            "MultiHeadAttention: W_q.bias is given but W_k.bias is empty; a module has all four "
            "biases or none");
  MultiHeadWeights square = w;
  square.w_o = ConstTensor(w_o.data(), {32, 16});
  s = MultiHeadAttention::Create(4, square, &model);
  EXPECT_EQ(s.message().substr(0, 44), "MultiHeadAttention: W_o.weight has shape (32");
  EXPECT_FALSE(model);

  s = MultiHeadAttention::Load(GoldenModel("concat_tutorial"), 4, &model);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("attn.bias"), std::string::npos) << s.message();

  ASSERT_TRUE(MultiHeadAttention::Create(4, w, &model).ok());
  EXPECT_FALSE(model->has_bias());
  const std::vector<float> q = RandomFloats(2 * 3 * 12, 6), k = RandomFloats(2 * 5 * 10, 7),
                           v = RandomFloats(2 * 5 * 9, 8);
  std::vector<float> out(2 * 3 * 32, kSentinel), weights(2 * 4 * 3 * 5, kSentinel);
  const ConstTensor qv(q.data(), {2, 3, 12}), kv(k.data(), {2, 5, 10}), vv(v.data(), {2, 5, 9});
  const Tensor ov(out.data(), {2, 3, 32}), wv(weights.data(), {2, 4, 3, 5});
  const auto fails_with = [&](const Status& status, const std::string& expected) {
    EXPECT_EQ(status.message(), expected);
  };
  fails_with(model->Forward(DefaultEngine(), ConstTensor(q.data(), {2, 3, 6}), kv, vv,
                            ValidLens::None(), Causal::kNone, ov, wv),
             "MultiHeadAttention: queries has shape (2, 3, 6) but must be (B, N, Dq) = (*, *, 12)");
  fails_with(
      model->Forward(DefaultEngine(), qv, kv, vv, ValidLens::None(), Causal::kNone, ov,
                     Tensor(weights.data(), {2, 3, 5})),
      "MultiHeadAttention: attention_weights must have rank 4 (B, heads, N, M) but has rank 3");
  fails_with(model->Forward(DefaultEngine(), qv, kv, vv, ValidLens::None(), Causal::kNone,
                            Tensor(out.data(), {2, 3, 8}), wv),
             "MultiHeadAttention: out has shape (2, 3, 8) but must be (B, N, H) = (2, 3, 32)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  EXPECT_TRUE(std::all_of(weights.begin(), weights.end(), [](float x) { return x == kSentinel; }));
}

}  // namespace
}  // namespace attnscore::test
