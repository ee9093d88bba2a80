// Scaled dot-product attention (docs/semantics.md section 2): every Highway target
// against a double-precision reference, golden data from the PyTorch seed
// module, the d2l toy, strided views, query blocking and bad input.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/valid_lens.h"
#include "ops/dot_product_paths.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class DotProductTest : public PerTarget {};

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}
ATTNSCORE_INSTANTIATE_PER_TARGET(DotProductTest);

struct Shape {
  int64_t batch, queries, keys, depth, value_dim;
};

// How gtest shows a Shape: "(B 3, N 40, M 300, D 32, Dv 16)".
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "(B " << s.batch << ", N " << s.queries << ", M " << s.keys << ", D " << s.depth
      << ", Dv " << s.value_dim << ")";
}

// Lengths per query (or per batch entry when !per_query) with 0, 1, M and
// beyond M among them; empty `kind` "none" means no lengths.
std::vector<int64_t> Lengths(const Shape& s, bool per_query, uint32_t seed) {
  const int64_t count = per_query ? s.batch * s.queries : s.batch;
  std::vector<int64_t> lens(static_cast<size_t>(count));
  uint32_t state = seed;
  for (int64_t n = 0; n < count; ++n) {
    state = state * 1664525u + 1013904223u;
    lens[static_cast<size_t>(n)] = static_cast<int64_t>(state >> 8) % (s.keys + 3);
  }
  if (count > 2) lens[1] = 1, lens[2] = s.keys;
  return lens;
}

// Runs the op (dense views) and checks out and weights against the reference.
void CheckAgainstReference(const Shape& s, const std::vector<int64_t>& lens, bool per_query,
                           uint32_t seed) {
  SCOPED_TRACE("B=" + std::to_string(s.batch) + " N=" + std::to_string(s.queries) +
               " M=" + std::to_string(s.keys) + " D=" + std::to_string(s.depth) +
               " Dv=" + std::to_string(s.value_dim) + (lens.empty() ? " no lens" : ""));
  const auto q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), seed);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), seed + 1);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), seed + 2, 3.0f);
  std::vector<float> out(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel);
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.keys), kSentinel);
  const ValidLens valid = lens.empty() ? ValidLens::None()
                          : per_query  ? ValidLens::PerQuery(lens.data(), s.batch, s.queries)
                                       : ValidLens::PerBatch(lens.data(), s.batch);
  const std::vector<int64_t> rows =
      lens.empty() ? std::vector<int64_t>() : RowLengths(lens, per_query, s.batch, s.queries);
  std::vector<double> want_weights;
  const std::vector<double> want_out = ReferenceDotProduct(
      q, k, v, s.batch, s.queries, s.keys, s.depth, s.value_dim, rows, &want_weights);

  const ConstTensor qv(q.data(), {s.batch, s.queries, s.depth});
  const ConstTensor kv(k.data(), {s.batch, s.keys, s.depth});
  const ConstTensor vv(v.data(), {s.batch, s.keys, s.value_dim});
  const Tensor ov(out.data(), {s.batch, s.queries, s.value_dim});
  Status st = DefaultEngine().DotProductAttention(qv, kv, vv, valid, ov,
                                                  Tensor(weights.data(), {s.batch, s.queries, s.keys}));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(MaxAbsDiff(out.data(), want_out), OutTolerance(v));
  EXPECT_LE(MaxAbsDiff(weights.data(), want_weights), kWeightTolerance);

  // Without the weights output: the in-place scratch path, same answer.
  std::vector<float> out2(out.size(), kSentinel);
  st = DefaultEngine().DotProductAttention(qv, kv, vv, valid,
                                           Tensor(out2.data(), {s.batch, s.queries, s.value_dim}));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(MaxAbsDiff(out2.data(), want_out), OutTolerance(v));

  // Every path the op may take, run directly: one the op's choice passes
  // over for this call must be right all the same.
  DirectCall direct;
  internal::RowLengths resolved;
  ASSERT_TRUE(internal::RowLengths::Resolve(valid, s.batch, s.queries, s.keys, direct.workspace(),
                                            &resolved)
                  .ok());
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.depth)));
  using Path = Status (*)(const internal::CallContext&, const ConstTensor&, const ConstTensor&,
                          const ConstTensor&, const internal::RowLengths&, const ops::ScoreForm&,
                          const Tensor&, const Tensor&);
  const std::pair<const char*, Path> paths[] = {{"gemm", &ops::dot_product::GemmPath},
                                                {"sorted gemm", &ops::dot_product::SortedGemmPath},
                                                {"tile", &ops::dot_product::TilePath}};
  for (const auto& [name, path] : paths) {
    if (path == &ops::dot_product::TilePath &&
        !ops::dot_product::UseTilePath(direct.call(), qv, kv, vv, /*weights=*/true)) {
      continue;
    }
    std::vector<float> path_out(out.size(), kSentinel), path_weights(weights.size(), kSentinel);
    st = path(direct.call(), qv, kv, vv, resolved, ops::ScoreForm{scale},
              Tensor(path_out.data(), {s.batch, s.queries, s.value_dim}),
              Tensor(path_weights.data(), {s.batch, s.queries, s.keys}));
    ASSERT_TRUE(st.ok()) << name << ": " << st.message();
    EXPECT_LE(MaxAbsDiff(path_out.data(), want_out), OutTolerance(v)) << name;
    EXPECT_LE(MaxAbsDiff(path_weights.data(), want_weights), kWeightTolerance) << name;
  }
}

TEST_P(DotProductTest, OddShapesAndEveryLengthKind) {
  // The last: V of 67,100 floats an entry, which the tile path packs in
  // panels of columns, the last panel narrower.
  const Shape shapes[] = {{1, 1, 1, 1, 1},     {2, 3, 17, 5, 7},   {3, 7, 33, 33, 5},
                          {2, 16, 16, 16, 16}, {1, 5, 100, 64, 3}, {4, 9, 31, 8, 40},
                          {2, 7, 1100, 5, 61}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    seed += 10;
    CheckAgainstReference(s, {}, false, seed);
    CheckAgainstReference(s, Lengths(s, /*per_query=*/true, seed + 1), true, seed + 2);
    CheckAgainstReference(s, Lengths(s, /*per_query=*/false, seed + 3), false, seed + 4);
  }
}

TEST_P(DotProductTest, LongRowsAreProcessedInQueryBlocks) {
  // 700 keys a row, 1000 queries: 2.8 MB of scores per batch entry, so blocks
  // of 736 queries and a last, shorter one of 264.
  const Shape s{2, 1000, 700, 8, 4};
  CheckAgainstReference(s, {700, 651}, false, 7);
  CheckAgainstReference(s, Lengths(s, true, 8), true, 9);
}

TEST_P(DotProductTest, ManyBatchEntriesAreSplitIntoChunks) {
  // 64 KB of scores per entry: chunks of 32 entries and a last one of 12.
  const Shape s{300, 16, 1024, 4, 3};
  CheckAgainstReference(s, std::vector<int64_t>(300, 1000), false, 10);
}

TEST_P(DotProductTest, GoldenCasesFromTheSeedModule) {
  for (const char* name : {"dot_toy", "dot_no_lens", "dot_odd_per_query", "dot_per_batch_int32"}) {
    SCOPED_TRACE(name);
    GoldenAttention g;
    LoadGoldenAttention(name, &g);
    const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1],
                  d = g.queries.shape[2], dv = g.values.shape[2];
    std::vector<float> out(static_cast<size_t>(b * n * dv)), weights(static_cast<size_t>(b * n * m));
    const Status s = DefaultEngine().DotProductAttention(
        ConstTensor(g.queries.data<float>(), {b, n, d}), ConstTensor(g.keys.data<float>(), {b, m, d}),
        ConstTensor(g.values.data<float>(), {b, m, dv}), g.lens, Tensor(out.data(), {b, n, dv}),
        Tensor(weights.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    ExpectMatchesGolden(g, out, weights);
  }
}

TEST_P(DotProductTest, SeedToyGivesUniformWeightsOverValidKeys) {
  // d2l: queries (2, 1, 2) ~ N(0, 1), keys = ones, values = arange(40) as
  // (10, 4) twice, valid_lens [2, 6]: out = [[[2, 3, 4, 5]], [[10, 11, 12, 13]]].
  const std::vector<float> q = RandomFloats(4, 1);
  const std::vector<float> k(2 * 10 * 2, 1.0f);
  std::vector<float> v(2 * 10 * 4);
  for (size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>(e % 40);
  const int64_t lens[] = {2, 6};
  std::vector<float> out(8);
  ASSERT_TRUE(DefaultEngine()
                  .DotProductAttention(ConstTensor(q.data(), {2, 1, 2}), ConstTensor(k.data(), {2, 10, 2}),
                                       ConstTensor(v.data(), {2, 10, 4}), ValidLens::PerBatch(lens, 2),
                                       Tensor(out.data(), {2, 1, 4}))
                  .ok());
  const float want[] = {2, 3, 4, 5, 10, 11, 12, 13};
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(out[e], want[e], OutTolerance(v)) << e;
}

TEST_P(DotProductTest, StridedViewsIncludingKeysStoredTransposed) {
  const Shape s{2, 5, 23, 12, 6};
  const auto q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), 21);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), 22);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), 23);
  const std::vector<int64_t> lens = {23, 9};
  std::vector<double> want_weights;
  const std::vector<double> want_out =
      ReferenceDotProduct(q, k, v, s.batch, s.queries, s.keys, s.depth, s.value_dim,
                          RowLengths(lens, false, s.batch, s.queries), &want_weights);

  // Q with padded rows; K stored as (B, D, M), viewed as (B, M, D) by strides;
  // out with padded rows; weights with column stride 2.
  const int64_t qpad = s.depth + 5;
  std::vector<float> q_padded(static_cast<size_t>(s.batch * s.queries * qpad), std::nanf(""));
  for (int64_t r = 0; r < s.batch * s.queries; ++r) {
    std::memcpy(&q_padded[static_cast<size_t>(r * qpad)], &q[static_cast<size_t>(r * s.depth)],
                sizeof(float) * static_cast<size_t>(s.depth));
  }
  const std::vector<float> k_transposed = TransposeKeys(k, s.batch, s.keys, s.depth);
  const int64_t opad = s.value_dim + 3;
  std::vector<float> out(static_cast<size_t>(s.batch * s.queries * opad), kSentinel);
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.keys * 2), kSentinel);
  const Status st = DefaultEngine().DotProductAttention(
      ConstTensor(q_padded.data(), {s.batch, s.queries, s.depth}, {s.queries * qpad, qpad, 1}),
      ConstTensor(k_transposed.data(), {s.batch, s.keys, s.depth}, {s.depth * s.keys, 1, s.keys}),
      ConstTensor(v.data(), {s.batch, s.keys, s.value_dim}), ValidLens::PerBatch(lens.data(), 2),
      Tensor(out.data(), {s.batch, s.queries, s.value_dim}, {s.queries * opad, opad, 1}),
      Tensor(weights.data(), {s.batch, s.queries, s.keys}, {s.queries * s.keys * 2, s.keys * 2, 2}));
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<float> out_dense, weights_dense;
  for (int64_t r = 0; r < s.batch * s.queries; ++r) {
    for (int64_t c = 0; c < s.value_dim; ++c) out_dense.push_back(out[static_cast<size_t>(r * opad + c)]);
    for (int64_t c = s.value_dim; c < opad; ++c) EXPECT_EQ(out[static_cast<size_t>(r * opad + c)], kSentinel);
  }
  for (size_t e = 0; e < weights.size(); e += 2) {
    weights_dense.push_back(weights[e]);
    EXPECT_EQ(weights[e + 1], kSentinel);
  }
  EXPECT_LE(MaxAbsDiff(out_dense.data(), want_out), OutTolerance(v));
  EXPECT_LE(MaxAbsDiff(weights_dense.data(), want_weights), kWeightTolerance);
}

TEST_P(DotProductTest, ZeroLengthAveragesAllValues) {
  const Shape s{2, 3, 11, 4, 5};
  const std::vector<int64_t> lens = {0, 0, 0, 0, 4, 0};  // per query: rows with L = 0
  CheckAgainstReference(s, lens, true, 31);
  CheckAgainstReference(s, {0, 0}, false, 32);
}

// docs/semantics.md section 1.4 through the dot product: a query with a
// NaN or +Inf among its valid scores, or only -Inf, has NaN weights (all M)
// and a NaN output; its entry's other queries are untouched, and a -Inf
// score weighs 0. In entry 0 (8 queries: the tile path), queries 1, 3 and
// 5 get a NaN query, +Inf scores and -Inf scores (feature 0 of every key is
// positive), and key 2 an Inf feature: a +Inf score for the queries whose
// feature 3 is positive, -Inf for the others. In entry 1, key 10 a NaN:
// a NaN score among finite ones for the queries that reach it. On every
// path.
TEST_P(DotProductTest, QueriesWithoutASoftmaxComeOutNaNOnEveryPath) {
  const Shape s{2, 8, 12, 4, 3};
  const std::vector<int64_t> lens = {5, 12, 7, 9, 3, 12, 10, 6, 1, 12, 4, 8, 0, 2, 11, 12};
  std::vector<float> q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), 31);
  std::vector<float> k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), 32);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), 33, 3.0f);
  for (int64_t j = 0; j < s.batch * s.keys; ++j) k[static_cast<size_t>(j * s.depth)] = 0.5f;
  const float inf = std::numeric_limits<float>::infinity();
  q[1 * 4 + 2] = std::nanf("");
  q[3 * 4] = inf;
  q[5 * 4] = -inf;
  k[2 * 4 + 3] = inf;
  k[(12 + 10) * 4 + 1] = std::nanf("");
  std::vector<double> want_weights;
  const std::vector<double> want_out =
      ReferenceDotProduct(q, k, v, s.batch, s.queries, s.keys, s.depth, s.value_dim,
                          RowLengths(lens, true, s.batch, s.queries), &want_weights);
  for (const int64_t row : {1, 3, 5}) {
    ASSERT_TRUE(std::isnan(want_out[static_cast<size_t>(row * s.value_dim)])) << row;
  }
  const ConstTensor qv(q.data(), {s.batch, s.queries, s.depth});
  const ConstTensor kv(k.data(), {s.batch, s.keys, s.depth});
  const ConstTensor vv(v.data(), {s.batch, s.keys, s.value_dim});
  const ValidLens valid = ValidLens::PerQuery(lens.data(), s.batch, s.queries);
  DirectCall direct;
  internal::RowLengths resolved;
  ASSERT_TRUE(internal::RowLengths::Resolve(valid, s.batch, s.queries, s.keys, direct.workspace(),
                                            &resolved)
                  .ok());
  using Path = Status (*)(const internal::CallContext&, const ConstTensor&, const ConstTensor&,
                          const ConstTensor&, const internal::RowLengths&, const ops::ScoreForm&,
                          const Tensor&, const Tensor&);
  const std::pair<const char*, Path> paths[] = {{"tile", &ops::dot_product::TilePath},
                                                {"gemm", &ops::dot_product::GemmPath},
                                                {"sorted gemm", &ops::dot_product::SortedGemmPath}};
  ASSERT_TRUE(ops::dot_product::UseTilePath(direct.call(), qv, kv, vv, /*weights=*/true));
  for (const auto& [name, path] : paths) {
    for (const bool with_weights : {true, false}) {
      SCOPED_TRACE(std::string(name) + (with_weights ? ", with weights" : ", without weights"));
      std::vector<float> out(want_out.size(), kSentinel), weights(want_weights.size(), kSentinel);
      const Status st =
          path(direct.call(), qv, kv, vv, resolved, ops::ScoreForm{0.5f},
               Tensor(out.data(), {s.batch, s.queries, s.value_dim}),
               with_weights ? Tensor(weights.data(), {s.batch, s.queries, s.keys}) : Tensor());
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_LE(MaxAbsDiff(out.data(), want_out), OutTolerance(v));
      if (with_weights) {
        EXPECT_LE(MaxAbsDiff(weights.data(), want_weights), kWeightTolerance);
      }
    }
  }
}

TEST_P(DotProductTest, KeysPastAnEntrysLengthsAreNeverRead) {
  // One query per entry, lengths [2, 6]: entry 0's keys and values from 2 on
  // are NaN and must not reach its output, nor entry 1's.
  const float nan = std::nanf("");
  std::vector<float> q = RandomFloats(2 * 1 * 4, 3), k = RandomFloats(2 * 8 * 4, 4),
                     v = RandomFloats(2 * 8 * 3, 5);
  for (int j = 2; j < 8; ++j) {
    for (int c = 0; c < 4; ++c) k[j * 4 + c] = nan;
    for (int c = 0; c < 3; ++c) v[j * 3 + c] = nan;
  }
  const int64_t lens[] = {2, 6};
  std::vector<float> out(6), weights(16);
  ASSERT_TRUE(DefaultEngine()
                  .DotProductAttention(ConstTensor(q.data(), {2, 1, 4}), ConstTensor(k.data(), {2, 8, 4}),
                                       ConstTensor(v.data(), {2, 8, 3}), ValidLens::PerBatch(lens, 2),
                                       Tensor(out.data(), {2, 1, 3}), Tensor(weights.data(), {2, 1, 8}))
                  .ok());
  for (float x : out) EXPECT_FALSE(std::isnan(x));
  for (float w : weights) EXPECT_FALSE(std::isnan(w));
}

TEST_P(DotProductTest, FewQueriesTakeTheRowPathAndAgreeWithTheMatmulPath) {
  // N <= 3 with contiguous rows runs the row kernels; the same problem with K
  // stored transposed (a strided view) runs the oneDNN path. Depth 70 and 131
  // value columns cover the kernels' partial vectors and several blocks.
  const Shape s{3, 2, 37, 70, 131};
  const auto q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), 51);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), 52);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), 53, 2.0f);
  const std::vector<int64_t> lens = {0, 37, 1, 19, 36, 50};  // per query, with 0 and > M
  std::vector<double> want_weights;
  const std::vector<double> want_out =
      ReferenceDotProduct(q, k, v, s.batch, s.queries, s.keys, s.depth, s.value_dim,
                          RowLengths(lens, true, s.batch, s.queries), &want_weights);
  const std::vector<float> k_transposed = TransposeKeys(k, s.batch, s.keys, s.depth);
  const ConstTensor keys_rows(k.data(), {s.batch, s.keys, s.depth});
  const ConstTensor keys_transposed(k_transposed.data(), {s.batch, s.keys, s.depth},
                                    {s.depth * s.keys, 1, s.keys});
  for (const ConstTensor& keys : {keys_rows, keys_transposed}) {
    SCOPED_TRACE(keys.strides[2] == 1 ? "row path" : "matmul path");
    std::vector<float> out(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel);
    // Weights with column stride 2: the row path scatters them.
    std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.keys * 2), kSentinel);
    const Status st = DefaultEngine().DotProductAttention(
        ConstTensor(q.data(), {s.batch, s.queries, s.depth}), keys,
        ConstTensor(v.data(), {s.batch, s.keys, s.value_dim}),
        ValidLens::PerQuery(lens.data(), s.batch, s.queries),
        Tensor(out.data(), {s.batch, s.queries, s.value_dim}),
        Tensor(weights.data(), {s.batch, s.queries, s.keys}, {s.queries * s.keys * 2, s.keys * 2, 2}));
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<float> weights_dense;
    for (size_t e = 0; e < weights.size(); e += 2) {
      weights_dense.push_back(weights[e]);
      ASSERT_EQ(weights[e + 1], kSentinel);
    }
    EXPECT_LE(MaxAbsDiff(out.data(), want_out), OutTolerance(v));
    EXPECT_LE(MaxAbsDiff(weights_dense.data(), want_weights), kWeightTolerance);
    // Without weights: the in-place probabilities.
    std::vector<float> out2(out.size(), kSentinel);
    ASSERT_TRUE(DefaultEngine()
                    .DotProductAttention(ConstTensor(q.data(), {s.batch, s.queries, s.depth}), keys,
                                         ConstTensor(v.data(), {s.batch, s.keys, s.value_dim}),
                                         ValidLens::PerQuery(lens.data(), s.batch, s.queries),
                                         Tensor(out2.data(), {s.batch, s.queries, s.value_dim}))
                    .ok());
    EXPECT_LE(MaxAbsDiff(out2.data(), want_out), OutTolerance(v));
  }
}

TEST_P(DotProductTest, RowPathSplitsLongRowsIntoKeyBlocks) {
  // With few rows and work enough for a second thread, the row path
  // computes each row's keys in blocks and merges them (528 keys for 1 to
  // 3 rows here). Lengths sweep the range, and sit on and next to every
  // edge (a last block of one key, rows that fill only their first block).
  uint32_t seed = 600;
  for (const Shape& s :
       {Shape{1, 1, 2600, 64, 64}, Shape{1, 2, 2600, 64, 64}, Shape{1, 3, 2600, 64, 64}}) {
    const int64_t block =
        ops::dot_product::RowKeyBlock(s.batch, s.queries, s.keys, s.depth + s.value_dim);
    ASSERT_LT(block, s.keys) << "no key blocks for " << s.queries << " rows";
    std::vector<int64_t> lengths;
    for (int64_t length = 1; length <= s.keys + 3; length += 89) lengths.push_back(length);
    for (int64_t edge = block; edge < s.keys; edge += block) {
      for (int64_t near : {edge - 1, edge, edge + 1}) lengths.push_back(near);
    }
    for (int64_t length : lengths) CheckAgainstReference(s, {length}, /*per_query=*/false, ++seed);
  }
  const Shape s{2, 3, 2600, 64, 64};
  ASSERT_LT(ops::dot_product::RowKeyBlock(s.batch, s.queries, s.keys, s.depth + s.value_dim),
            s.keys);
  CheckAgainstReference(s, {2600, 257, 0, 1300, 1, 2603}, /*per_query=*/true, 61);
  CheckAgainstReference(s, {0, 1024}, /*per_query=*/false, 62);
}

TEST_P(DotProductTest, RowPathNaNInALaterBlockMakesOnlyItsRowNaN) {
  // Row 0 (L = 2600) meets a NaN key in its fourth block (of 528 keys);
  // row 1 (L = 600) ends before it. As in the one-block softmax, the whole of row 0 is NaN.
  const int64_t m = 2600, depth = 64, dv = 64;
  ASSERT_EQ(ops::dot_product::RowKeyBlock(1, 2, m, depth + dv), 528);
  std::vector<float> q = RandomFloats(2 * depth, 71), k = RandomFloats(m * depth, 72),
                     v = RandomFloats(m * dv, 73);
  k[2100 * depth + 3] = std::nanf("");
  const int64_t lens[] = {2600, 600};
  std::vector<float> out(2 * dv), weights(2 * m);
  ASSERT_TRUE(DefaultEngine()
                  .DotProductAttention(ConstTensor(q.data(), {1, 2, depth}), ConstTensor(k.data(), {1, m, depth}),
                                       ConstTensor(v.data(), {1, m, dv}), ValidLens::PerQuery(lens, 1, 2),
                                       Tensor(out.data(), {1, 2, dv}), Tensor(weights.data(), {1, 2, m}))
                  .ok());
  for (int64_t c = 0; c < dv; ++c) EXPECT_TRUE(std::isnan(out[c])) << c;
  for (int64_t j = 0; j < m; ++j) ASSERT_TRUE(std::isnan(weights[j])) << j;
  std::vector<double> want_weights;
  const std::vector<double> want_out =
      ReferenceDotProduct(q, k, v, 1, 2, m, depth, dv, {2600, 600}, &want_weights);
  const std::vector<double> want_row1(want_out.begin() + dv, want_out.end());
  const std::vector<double> want_weights1(want_weights.begin() + m, want_weights.end());
  EXPECT_LE(MaxAbsDiff(&out[dv], want_row1), OutTolerance(v));
  EXPECT_LE(MaxAbsDiff(&weights[m], want_weights1), kWeightTolerance);
}

// The gemm path sorts each entry's queries by length where that saves work
// (ops/dot_product_sorted.cc), on dense copies. Queries in any order, in
// any layout, must get the bits they get when the caller passes them
// sorted (the path's own order) and dense, out and weights; and they must
// match the reference. Entry 0 has causal lengths 1..N shuffled, entry 1
// random ones with 0 and > M.
TEST_P(DotProductTest, QueriesInAnyOrderGetTheBitsOfTheSortedOrder) {
  const Shape s{2, 256, 200, 24, 16};
  const int64_t n = s.queries, m = s.keys, d = s.depth, dv = s.value_dim;
  std::vector<int64_t> lens = Lengths(s, /*per_query=*/true, 71);
  for (int64_t i = 0; i < n; ++i) lens[static_cast<size_t>(i)] = std::min(i * 101 % n + 1, m);
  CheckAgainstReference(s, lens, /*per_query=*/true, 72);

  // Each entry's queries shortest first (L > M counts as M), ties in their
  // given order.
  std::vector<int64_t> order(static_cast<size_t>(s.batch * n));
  for (int64_t b = 0; b < s.batch; ++b) {
    const auto first = order.begin() + b * n;
    const auto length = [&](int64_t i) { return std::min(lens[static_cast<size_t>(b * n + i)], m); };
    std::iota(first, first + n, int64_t{0});
    std::stable_sort(first, first + n, [&](int64_t i, int64_t j) { return length(i) < length(j); });
  }
  const auto given_row = [&](size_t r) { return r / n * n + order[r]; };  // the query r-th
  // The test reaches the sorting only if sorting saves work here.
  DirectCall resolver;
  internal::RowLengths given;
  ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::PerQuery(lens.data(), s.batch, n), s.batch,
                                            n, m, resolver.workspace(), &given)
                  .ok());
  std::vector<int64_t> sorted_lens(lens.size());
  for (size_t r = 0; r < order.size(); ++r) sorted_lens[r] = std::min(lens[given_row(r)], m);
  EXPECT_LT(ops::dot_product::GemmFlops(given.WithRows(sorted_lens.data()), s.batch, d, dv),
            ops::dot_product::kSortWhenBelow * ops::dot_product::GemmFlops(given, s.batch, d, dv));

  // Given: Q's columns 2 apart, out's and the weights' 3 apart. Sorted: dense.
  const auto q = RandomFloats(static_cast<size_t>(s.batch * n * d * 2), 73);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * m * d), 74);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * m * dv), 75);
  std::vector<float> sorted_q(static_cast<size_t>(s.batch * n * d));
  for (size_t r = 0; r < order.size(); ++r)
    for (int64_t c = 0; c < d; ++c) sorted_q[r * d + c] = q[(given_row(r) * d + c) * 2];
  const auto run = [&](const std::vector<float>& queries, const std::vector<int64_t>& lengths,
                       int64_t q_step, int64_t out_step, std::vector<float>* out,
                       std::vector<float>* weights) {
    out->assign(static_cast<size_t>(s.batch * n * dv * out_step), kSentinel);
    weights->assign(static_cast<size_t>(s.batch * n * m * out_step), kSentinel);
    const Status st = DefaultEngine().DotProductAttention(
        ConstTensor(queries.data(), {s.batch, n, d}, {n * d * q_step, d * q_step, q_step}),
        ConstTensor(k.data(), {s.batch, m, d}), ConstTensor(v.data(), {s.batch, m, dv}),
        ValidLens::PerQuery(lengths.data(), s.batch, n),
        Tensor(out->data(), {s.batch, n, dv}, {n * dv * out_step, dv * out_step, out_step}),
        Tensor(weights->data(), {s.batch, n, m}, {n * m * out_step, m * out_step, out_step}));
    ASSERT_TRUE(st.ok()) << st.message();
  };
  std::vector<float> out, weights, sorted_out, sorted_weights;
  run(q, lens, 2, 3, &out, &weights);
  run(sorted_q, sorted_lens, 1, 1, &sorted_out, &sorted_weights);
  for (size_t r = 0; r < order.size(); ++r) {
    const size_t i = given_row(r);
    for (int64_t c = 0; c < dv; ++c)
      ASSERT_EQ(Bits(out[(i * dv + c) * 3]), Bits(sorted_out[r * dv + c])) << r << " " << c;
    for (int64_t j = 0; j < m; ++j)
      ASSERT_EQ(Bits(weights[(i * m + j) * 3]), Bits(sorted_weights[r * m + j])) << r << " " << j;
  }
  // Between the strided elements, nothing was written.
  for (size_t e = 0; e < out.size(); ++e) {
    if (e % 3 != 0) {
      ASSERT_EQ(Bits(out[e]), Bits(kSentinel)) << e;
    }
  }
}

// OrderByLength is the stable sort by length (L > M counting as M), by
// counting up to kCountingSortMaxKeys keys and by sorting above.
TEST(OrderByLength, GivesTheStableSortByLength) {
  const int64_t counted = ops::dot_product::kCountingSortMaxKeys;
  struct Case {
    int64_t keys, queries;
    bool rising;
  };
  const Case cases[] = {{1, 9, false},         {5, 50, false},
                        {counted, 300, false}, {counted + 1, 300, false},
                        {4096, 1000, false},   {700, 64, true}};
  uint32_t state = 5;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "M " << c.keys << " N " << c.queries << (c.rising ? " rising" : ""));
    std::vector<int64_t> lens(static_cast<size_t>(2 * c.queries));
    for (size_t i = 0; i < lens.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      lens[i] = static_cast<int64_t>(state >> 8) % (c.keys + 3);  // 0 to M + 2
    }
    if (c.rising) std::sort(lens.begin() + c.queries, lens.end());
    DirectCall resolver;
    internal::RowLengths resolved;
    ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::PerQuery(lens.data(), 2, c.queries), 2,
                                              c.queries, c.keys, resolver.workspace(), &resolved)
                    .ok());
    for (int64_t b = 0; b < 2; ++b) {
      const auto length = [&](int64_t i) {
        return std::min(lens[static_cast<size_t>(b * c.queries + i)], c.keys);
      };
      std::vector<int64_t> want(static_cast<size_t>(c.queries)), got(want.size(), -1);
      std::iota(want.begin(), want.end(), int64_t{0});
      std::stable_sort(want.begin(), want.end(),
                       [&](int64_t i, int64_t j) { return length(i) < length(j); });
      ops::dot_product::OrderByLength(resolved, b, got.data());
      EXPECT_EQ(got, want) << "entry " << b;
    }
  }
}

// The tile path's ranges of whole entries, one a thread: cut at the entry
// boundary nearest each even share of the work (the sum of the rows'
// lengths, 0 counting M), taken only where every range is within 5% of its
// share.
TEST(DotProductTilePath, EvenEntryRangesCutNearestTheSharesOrRefuse) {
  struct Case {
    std::vector<int64_t> lens;  // per batch entry, 4 queries an entry, 100 keys
    int threads;
    bool taken;
    std::vector<int64_t> bounds;
  };
  const Case cases[] = {
      {{50, 50, 50, 50}, 2, true, {0, 2, 4}},
      {{0, 100, 100, 100}, 2, true, {0, 2, 4}},  // length 0 mixes all 100 keys
      {{96, 1, 1, 1}, 2, false, {}},             // 6144 against 192
      {{60, 60, 60}, 2, false, {}},              // 1.5 entries a thread
      {{10, 20, 30, 40, 50, 60}, 3, false, {}},  // lengths 60, 90, 60 against 70 a range
      {{30, 30, 20, 40, 25, 35}, 3, true, {0, 2, 4, 6}},
      {{50, 50}, 3, false, {}},  // fewer entries than threads
      {{50, 50}, 1, false, {}},
  };
  for (const Case& c : cases) {
    const auto batch = static_cast<int64_t>(c.lens.size());
    DirectCall resolver;
    internal::RowLengths lens;
    ASSERT_TRUE(internal::RowLengths::Resolve(ValidLens::PerBatch(c.lens.data(), batch), batch, 4,
                                              100, resolver.workspace(), &lens)
                    .ok());
    std::vector<double> before(static_cast<size_t>(batch + 1));
    std::vector<int64_t> bounds(static_cast<size_t>(c.threads + 1));
    EXPECT_EQ(
        ops::dot_product::EvenEntryRanges(lens, batch, c.threads, before.data(), bounds.data()),
        c.taken)
        << "entries " << batch << ", threads " << c.threads;
    if (c.taken) {
      EXPECT_EQ(bounds, c.bounds);
    }
  }
}

// Each thread on its own range of entries, or the tiles dealt out to
// threads as they come free: the same bits as 1 thread, with and without
// the weights (per-batch lengths even across entries, uneven, and none).
// Each case has work enough to share (kMinSharedTileFlops).
TEST(DotProductTilePath, TwoThreadsGiveOneThreadsBitsWhicheverWayTilesAreShared) {
  const int64_t batch = 4, queries = 256, keys = 96, depth = 32, value_dim = 16;
  // The least work: {96, 1, 1, 1}, each query over its entry's longest.
  ASSERT_GE(2.0 * queries * (96 + 3) * (depth + value_dim), ops::dot_product::kMinSharedTileFlops);
  const auto q = RandomFloats(static_cast<size_t>(batch * queries * depth), 51);
  const auto k = RandomFloats(static_cast<size_t>(batch * keys * depth), 52);
  const auto v = RandomFloats(static_cast<size_t>(batch * keys * value_dim), 53);
  const std::vector<int64_t> even = {96, 90, 0, 93}, uneven = {96, 1, 1, 1};
  // The output and the weights of one call on an engine of `threads`.
  const auto attend = [&](int threads, const ValidLens& valid) {
    std::pair<std::vector<float>, std::vector<float>> result(
        std::vector<float>(static_cast<size_t>(batch * queries * value_dim), -1.0f),
        std::vector<float>(static_cast<size_t>(batch * queries * keys), -1.0f));
    const std::unique_ptr<Engine> engine = EngineWithThreads(threads);
    const Status s =
        engine == nullptr
            ? Status::Internal("no engine")
            : engine->DotProductAttention(ConstTensor(q.data(), {batch, queries, depth}),
                                          ConstTensor(k.data(), {batch, keys, depth}),
                                          ConstTensor(v.data(), {batch, keys, value_dim}), valid,
                                          Tensor(result.first.data(), {batch, queries, value_dim}),
                                          Tensor(result.second.data(), {batch, queries, keys}));
    EXPECT_TRUE(s.ok()) << s.message();
    return result;
  };
  for (const ValidLens& valid : {ValidLens::PerBatch(even.data(), batch),
                                 ValidLens::PerBatch(uneven.data(), batch), ValidLens::None()}) {
    const auto one = attend(1, valid), two = attend(2, valid);
    EXPECT_EQ(0, std::memcmp(one.first.data(), two.first.data(), one.first.size() * sizeof(float)));
    EXPECT_EQ(0,
              std::memcmp(one.second.data(), two.second.data(), one.second.size() * sizeof(float)));
  }
}

class DotProductThreads : public ::testing::TestWithParam<Shape> {};
INSTANTIATE_TEST_SUITE_P(MatmulAndRowPaths, DotProductThreads,
                         ::testing::Values(Shape{3, 40, 300, 32, 16},  // oneDNN path, tasks
                                           Shape{8, 40, 300, 32, 16},  // whole chunks per thread
                                           Shape{12, 96, 50, 16, 8},   // chunks of 2 entries
                                           Shape{1, 1024, 2500, 64,
                                                 64},                   // 5 query blocks, the same
                                           Shape{24, 1, 300, 32, 16},   // row path, whole rows
                                           Shape{1, 1, 3000, 64, 64}),  // one row, 8 key blocks
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           const Shape& s = info.param;
                           return "B" + std::to_string(s.batch) + "_N" + std::to_string(s.queries) +
                                  "_M" + std::to_string(s.keys) + "_D" + std::to_string(s.depth) +
                                  "_Dv" + std::to_string(s.value_dim);
                         });

TEST_P(DotProductThreads, ResultsIdenticalForAnyThreadCount) {
  const Shape s = GetParam();
  // Work enough for 2 threads, on each path (without lengths).
  if (s.queries <= ops::dot_product::kRowPathMaxQueries) {
    ASSERT_EQ(
        ops::dot_product::RowPathThreads(2, s.batch, 1, s.queries, s.keys, s.depth + s.value_dim),
        2);
  } else {
    ASSERT_GE(2.0 * s.batch * s.queries * s.keys * (s.depth + s.value_dim),
              ops::dot_product::kMinSharedTileFlops);
  }
  const auto q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), 41);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), 42);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), 43);
  const std::vector<int64_t> lens = Lengths(s, true, 44);
  // Without lengths every entry has the same widths: one group, cut into
  // chunks of whole entries.
  for (const bool with_lens : {true, false}) {
    SCOPED_TRACE(with_lens ? "per-query lengths" : "no lengths");
    const ValidLens valid =
        with_lens ? ValidLens::PerQuery(lens.data(), s.batch, s.queries) : ValidLens::None();
    // Outputs of 1 and 2 threads, without and with the weights requested.
    std::vector<float> out[2][2], weights[2][2];
    for (int threads : {1, 2}) {
      EngineOptions options;
      options.threads = threads;
      std::unique_ptr<Engine> engine;
      ASSERT_TRUE(Engine::Create(options, &engine).ok());
      for (int with_weights : {0, 1}) {
        std::vector<float>& o = out[threads - 1][with_weights];
        std::vector<float>& w = weights[threads - 1][with_weights];
        o.assign(static_cast<size_t>(s.batch * s.queries * s.value_dim), -1.0f);
        if (with_weights) w.assign(static_cast<size_t>(s.batch * s.queries * s.keys), -1.0f);
        ASSERT_TRUE(
            engine
                ->DotProductAttention(
                    ConstTensor(q.data(), {s.batch, s.queries, s.depth}),
                    ConstTensor(k.data(), {s.batch, s.keys, s.depth}),
                    ConstTensor(v.data(), {s.batch, s.keys, s.value_dim}), valid,
                    Tensor(o.data(), {s.batch, s.queries, s.value_dim}),
                    with_weights ? Tensor(w.data(), {s.batch, s.queries, s.keys}) : Tensor())
                .ok());
      }
    }
    // On the row path, asking for the weights changes no bit of the output
    // (whole rows without weights take a task of their own).
    if (s.queries <= ops::dot_product::kRowPathMaxQueries) {
      EXPECT_EQ(0,
                std::memcmp(out[0][0].data(), out[0][1].data(), out[0][0].size() * sizeof(float)));
    }
    for (int with_weights : {0, 1}) {
      SCOPED_TRACE(with_weights ? "with weights" : "without weights");
      EXPECT_EQ(0, std::memcmp(out[0][with_weights].data(), out[1][with_weights].data(),
                               out[0][with_weights].size() * sizeof(float)));
      if (with_weights) {
        EXPECT_EQ(0, std::memcmp(weights[0][1].data(), weights[1][1].data(),
                                 weights[0][1].size() * sizeof(float)));
      }
    }
  }
}

// ---- a query reads only its own keys and values ----------------------------

// docs/semantics.md section 2.2: a query's output depends on its own valid
// keys and values alone, whatever its batch entry's other queries see.

// One engine per thread count (1 or 2), fp32 (the tile path) or bf16 (the
// oneDNN path).
const Engine& EngineWithThreads(int threads, Precision precision = Precision::kFp32) {
  static std::unique_ptr<Engine> engines[2][3];
  std::unique_ptr<Engine>& engine = engines[precision == Precision::kBf16][threads];
  if (!engine) {
    EngineOptions options;
    options.threads = threads;
    options.precision = precision;
    EXPECT_TRUE(Engine::Create(options, &engine).ok());
  }
  return *engine;
}

struct Outputs {
  std::vector<float> out, weights;  // weights empty when not requested
};

// Dense inputs; out and weights with column stride `step` (2 sends even a
// few queries to the oneDNN path, and makes it gather and scatter rows).
Outputs RunWithStep(const Engine& engine, const Shape& s, const std::vector<float>& q,
                    const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<int64_t>& lens, bool want_weights, int64_t step) {
  const int64_t n = s.queries, dv = s.value_dim, m = s.keys;
  Outputs o{std::vector<float>(static_cast<size_t>(s.batch * n * dv * step), kSentinel),
            std::vector<float>(want_weights ? static_cast<size_t>(s.batch * n * m * step) : 0,
                               kSentinel)};
  const Status st = engine.DotProductAttention(
      ConstTensor(q.data(), {s.batch, n, s.depth}), ConstTensor(k.data(), {s.batch, m, s.depth}),
      ConstTensor(v.data(), {s.batch, m, dv}), ValidLens::PerQuery(lens.data(), s.batch, n),
      Tensor(o.out.data(), {s.batch, n, dv}, {n * dv * step, dv * step, step}),
      want_weights ? Tensor(o.weights.data(), {s.batch, n, m}, {n * m * step, m * step, step})
                   : Tensor());
  EXPECT_TRUE(st.ok()) << st.message();
  return o;
}

// Changes, one at a time, key `key` of every entry's V or K (all its
// features) to NaN or ±Inf, or the query of each entry that reaches that key
// to NaN. Every query row the change does not concern (its own width, L or M
// when L = 0, ends at or before `key`; for Q, every other query) must be
// finite and match the unchanged call: out within OutTolerance, weights
// within kWeightTolerance. Query 0 must be such a row, and another query of
// entry 0 must reach `key`. `step` as in RunWithStep.
void ExpectOnlyOwnKeysCount(const Engine& engine, const Shape& s, const std::vector<int64_t>& lens,
                            int64_t key, uint32_t seed, int64_t step = 1) {
  ASSERT_EQ(lens.size(), static_cast<size_t>(s.batch * s.queries));
  const auto own = [&](int64_t b, int64_t i) {
    const int64_t l = std::min(lens[static_cast<size_t>(b * s.queries + i)], s.keys);
    return l > 0 ? l : s.keys;
  };
  ASSERT_LE(own(0, 0), key) << "query 0 must not reach the changed key";
  int64_t seer = -1;  // a query of entry 0 that reaches it
  for (int64_t i = 0; i < s.queries; ++i) {
    if (own(0, i) > key) seer = i;
  }
  ASSERT_GE(seer, 0) << "another query of entry 0 must reach the changed key";
  const auto q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), seed);
  const auto k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), seed + 1);
  const auto v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), seed + 2, 3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Change {
    const char* name;
    char tensor;  // 'q', 'k' or 'v'
    float value;
  };
  const Change changes[] = {{"NaN in V", 'v', nan}, {"+Inf in V", 'v', inf}, {"-Inf in V", 'v', -inf},
                            {"NaN in K", 'k', nan}, {"+Inf in K", 'k', inf}, {"NaN in Q", 'q', nan}};
  for (const bool want_weights : {true, false}) {
    const Outputs clean = RunWithStep(engine, s, q, k, v, lens, want_weights, step);
    for (const Change& change : changes) {
      SCOPED_TRACE(std::string(change.name) + (want_weights ? ", with weights" : ", without weights"));
      std::vector<float> q2 = q, k2 = k, v2 = v;
      for (int64_t b = 0; b < s.batch; ++b) {
        if (change.tensor == 'q') {
          for (int64_t d = 0; d < s.depth; ++d) q2[static_cast<size_t>((b * s.queries + seer) * s.depth + d)] = change.value;
        } else if (change.tensor == 'k') {
          for (int64_t d = 0; d < s.depth; ++d) k2[static_cast<size_t>((b * s.keys + key) * s.depth + d)] = change.value;
        } else {
          for (int64_t c = 0; c < s.value_dim; ++c)
            v2[static_cast<size_t>((b * s.keys + key) * s.value_dim + c)] = change.value;
        }
      }
      const Outputs got = RunWithStep(engine, s, q2, k2, v2, lens, want_weights, step);
      // Each change stops at its first wrong row, and the next one is still checked.
      const auto expect_rows = [&] {
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t i = 0; i < s.queries; ++i) {
            if (change.tensor == 'q' ? i == seer : own(b, i) > key) continue;
            const int64_t r = b * s.queries + i;
            for (int64_t c = 0; c < s.value_dim; ++c) {
              const float x = got.out[static_cast<size_t>((r * s.value_dim + c) * step)];
              const float want = clean.out[static_cast<size_t>((r * s.value_dim + c) * step)];
              ASSERT_TRUE(std::isfinite(x) && std::abs(x - want) <= OutTolerance(v))
                  << "query (" << b << ", " << i << ") of length " << lens[static_cast<size_t>(r)]
                  << ": out[" << c << "] = " << x << ", alone " << want;
            }
            for (int64_t j = 0; want_weights && j < s.keys; ++j) {
              const size_t e = static_cast<size_t>((r * s.keys + j) * step);
              ASSERT_NEAR(got.weights[e], clean.weights[e], kWeightTolerance)
                  << "query (" << b << ", " << i << "), weight " << j;
            }
          }
        }
      };
      expect_rows();
    }
  }
}

// Every path: the row kernels (whole rows, and rows cut into key blocks);
// the tile kernels in fp32 and the oneDNN path in bf16, each with an
// entry's widest query or a query of length 0 (all M keys) setting a
// product's width, queries sorted by length, query blocks of a long entry,
// and batch chunks taken whole by each of 2 threads.
struct OwnKeysCase {
  const char* path;
  Shape shape;
  std::vector<int64_t> lens;  // per query
  int64_t key;                // changed key: past query 0's length, within another's
};

std::vector<OwnKeysCase> OwnKeysCases() {
  std::vector<OwnKeysCase> cases = {
      {"row path, 3 queries", {2, 3, 40, 16, 12}, {5, 40, 0, 7, 30, 12}, 20},
      {"row path, 2 queries", {3, 2, 40, 16, 12}, {5, 25, 3, 40, 1, 1}, 20},
      {"row path, key blocks", {1, 2, 2600, 64, 64}, {300, 2600}, 700},
      {"4 queries", {2, 4, 40, 16, 12}, {5, 40, 8, 20, 3, 33, 0, 7}, 20},
      {"widest below M", {2, 6, 50, 16, 12}, {4, 30, 10, 29, 1, 20, 6, 30, 30, 2, 11, 3}, 20},
      {"length 0 widens to M", {2, 5, 50, 16, 12}, {4, 9, 0, 12, 1, 6, 0, 10, 2, 11}, 20},
      // Entry 0 mixes 900 of 1,100 keys; Dv 61 leaves a narrow last panel
      // on every target.
      {"values packed in panels",
       {2, 6, 1100, 8, 61},
       {300, 900, 20, 699, 1, 800, 1100, 7, 0, 650, 900, 33},
       700},
  };
  // 1000 queries by 700 keys, a fifth of them 700 long and the rest at most
  // 400: sorted by length, then cut into query blocks of their own widths.
  OwnKeysCase blocks{"query blocks", {1, 1000, 700, 8, 4}, {}, 500};
  for (int64_t i = 0; i < 1000; ++i) blocks.lens.push_back(i % 5 == 1 ? 700 : i % 97 == 3 ? 0 : 1 + (i * 37) % 400);
  cases.push_back(blocks);
  // Causal lengths 1..300: the entry is cut into blocks of 64 queries with
  // widths of their own; rows 128..149 compute key 150 but must not see it.
  OwnKeysCase causal{"an entry cut into query blocks", {2, 300, 300, 16, 8}, {}, 150};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 300; ++i) causal.lens.push_back(b == 1 && i % 50 == 7 ? 0 : i + 1);
  cases.push_back(causal);
  // Causal lengths 1..200 shuffled, and a 0: the queries are sorted by
  // length before the blocks are cut (ops/dot_product_sorted.cc), so rows
  // computed beside key 100 come from all over the entry.
  OwnKeysCase sorted{"queries sorted by length", {2, 200, 200, 16, 8}, {}, 100};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 200; ++i) sorted.lens.push_back(b == 1 && i == 11 ? 0 : i * 73 % 200 + 1);
  cases.push_back(sorted);
  // 8 entries of the same widths: 8 chunks, whole ones per thread on 2.
  OwnKeysCase chunks{"batch chunks", {8, 8, 64, 16, 8}, {}, 25};
  for (int64_t b = 0; b < 8; ++b) chunks.lens.insert(chunks.lens.end(), {3, 64, 10, 40, 2, 33, 12, 20});
  cases.push_back(chunks);
  return cases;
}

TEST_P(DotProductTest, AQueryReadsOnlyItsOwnKeysAndValuesOnEveryPath) {
  uint32_t seed = 900;
  for (const OwnKeysCase& c : OwnKeysCases()) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(c.path) + ", " + std::to_string(threads) + " thread(s)");
      ExpectOnlyOwnKeysCount(EngineWithThreads(threads), c.shape, c.lens, c.key, seed += 10);
    }
    {
      SCOPED_TRACE(std::string(c.path) + ", strided out and weights");
      ExpectOnlyOwnKeysCount(EngineWithThreads(1), c.shape, c.lens, c.key, seed += 10, /*step=*/2);
    }
    SCOPED_TRACE(std::string(c.path) + ", bf16");
    ExpectOnlyOwnKeysCount(EngineWithThreads(1, Precision::kBf16), c.shape, c.lens, c.key,
                           seed += 10);
  }
}

// ---- layouts oneDNN cannot take as given ------------------------------------

// A dense copy of a strided (B, R, C) view, for the reference.
std::vector<float> DenseCopy(const ConstTensor& t) {
  std::vector<float> dense;
  for (int64_t b = 0; b < t.dims[0]; ++b)
    for (int64_t r = 0; r < t.dims[1]; ++r)
      for (int64_t c = 0; c < t.dims[2]; ++c)
        dense.push_back(t.data[b * t.strides[0] + r * t.strides[1] + c * t.strides[2]]);
  return dense;
}

// Any strides are valid: size-1 dims whose strides oneDNN would read as a
// transposed layout (its primitive then failed to run, and its cache served
// the broken primitive to the dense call of the same shape after it), and
// inputs whose rows overlap or repeat (a sliding window, a zero stride),
// which oneDNN cannot describe at all and the engine packs. Each call must
// match the reference on a dense copy of its views.
TEST(DotProductLayouts, SizeOneDimsAndOverlappingInputsMatchTheReference) {
  const std::vector<float> buffer = RandomFloats(4096, 61);
  struct Case {
    const char* what;
    ConstTensor q, k, v;
    std::vector<int64_t> out_strides;  // empty: dense
  };
  const float* at = buffer.data();
  const Case cases[] = {
      {"N = 1, out strides (14, 1, 1), K column stride 2", ConstTensor(at, {1, 1, 10}),
       ConstTensor(at + 100, {1, 14, 10}, {280, 20, 2}), ConstTensor(at + 500, {1, 14, 14}),
       {14, 1, 1}},
      {"the same call with dense out, after it", ConstTensor(at, {1, 1, 10}),
       ConstTensor(at + 100, {1, 14, 10}, {280, 20, 2}), ConstTensor(at + 500, {1, 14, 14}), {}},
      {"queries (4, 8, 1) with column stride 8", ConstTensor(at, {4, 8, 1}, {8, 1, 8}),
       ConstTensor(at + 100, {4, 12, 1}), ConstTensor(at + 200, {4, 12, 2}), {}},
      {"queries whose rows overlap: strides (15, 2, 1)", ConstTensor(at, {2, 5, 3}, {15, 2, 1}),
       ConstTensor(at + 100, {2, 12, 3}), ConstTensor(at + 200, {2, 12, 3}), {}},
      {"values whose rows overlap: strides (36, 2, 1)", ConstTensor(at, {2, 5, 3}),
       ConstTensor(at + 100, {2, 12, 3}), ConstTensor(at + 200, {2, 12, 3}, {36, 2, 1}), {}},
      {"queries whose columns interleave rows: strides (18, 5, 3)",
       ConstTensor(at, {2, 6, 2}, {18, 5, 3}), ConstTensor(at + 100, {2, 7, 2}),
       ConstTensor(at + 200, {2, 7, 3}), {}},
      {"keys shared by the batch: stride 0", ConstTensor(at, {3, 6, 4}),
       ConstTensor(at + 100, {3, 9, 4}, {0, 4, 1}), ConstTensor(at + 200, {3, 9, 5}), {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t batch = c.q.dims[0], n = c.q.dims[1], m = c.k.dims[1], d = c.q.dims[2];
    const int64_t dv = c.v.dims[2];
    std::vector<float> out(static_cast<size_t>(batch * n * dv * 16), kSentinel);
    const Tensor out_view =
        c.out_strides.empty()
            ? Tensor(out.data(), {batch, n, dv})
            : Tensor(out.data(), {batch, n, dv},
                     {c.out_strides[0], c.out_strides[1], c.out_strides[2]});
    const Status s = DefaultEngine().DotProductAttention(c.q, c.k, c.v, ValidLens::None(), out_view);
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<double> weights;
    const std::vector<double> expected =
        ReferenceDotProduct(DenseCopy(c.q), DenseCopy(c.k), DenseCopy(c.v), batch, n, m, d, dv, {},
                            &weights);
    const std::vector<float> got = DenseCopy(ConstTensor(out_view.data, {batch, n, dv},
                                                         {out_view.strides[0], out_view.strides[1],
                                                          out_view.strides[2]}));
    EXPECT_LE(MaxAbsDiff(got.data(), expected), OutTolerance(DenseCopy(c.v)));
  }
}

// ---- memory ----------------------------------------------------------------

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"), or -1.
int64_t ProcStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return -1;
}

// On 1 thread, and on 2, where each thread takes whole chunks with its own
// scores scratch (2 MiB) and oneDNN keeps its own packing buffers per thread
// (its AVX2 gemm:jit more than its AVX-512 brgemm). The bound stays below
// the full score matrix, 12.3 MB, for both.
class DotProductMemory : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Threads, DotProductMemory, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "_threads"; });

TEST_P(DotProductMemory, LongShapeWithoutWeightsHoldsOnlyBlocksOfScores) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory and quarantine are not the engine's";
#endif
  // dot_long: (1, 1024, 4096), d 64, valid length 3000. Its full score
  // matrix alone would take 12 MB; the engine keeps blocks of it.
  const int64_t n = 1024, m = 4096, d = 64;
  const std::vector<float> q = RandomFloats(n * d, 81), k = RandomFloats(m * d, 82), v = RandomFloats(m * d, 83);
  std::vector<float> out(n * d);
  const int64_t lens[] = {3000};
  EngineOptions options;
  options.threads = GetParam();
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());
  const auto call = [&] {
    return engine->DotProductAttention(
        ConstTensor(q.data(), {1, n, d}), ConstTensor(k.data(), {1, m, d}), ConstTensor(v.data(), {1, m, d}),
        ValidLens::PerBatch(lens, 1), Tensor(out.data(), {1, n, d}));
  };
  // Writing 5 to clear_refs resets the peak (VmHWM) to the current resident
  // size: the buffers, made and filled above. The peak then covers all the
  // engine adds: plans, their code, scratch, and the code pages it runs.
  std::ofstream reset("/proc/self/clear_refs");
  reset << "5" << std::flush;
  if (!reset) GTEST_SKIP() << "cannot reset the peak resident size here";
  const int64_t before = ProcStatusBytes("VmRSS");
  ASSERT_TRUE(call().ok());  // the first call of this shape: plans made here
  ASSERT_TRUE(call().ok());
  const int64_t peak = ProcStatusBytes("VmHWM");
  ASSERT_GT(before, 0);
  RecordProperty("peak_bytes_beyond_buffers", std::to_string(peak - before));
  // 8 MiB for the first thread, 3 MiB for each other one.
  const int64_t bound = (int64_t{8} << 20) + (GetParam() - 1) * (int64_t{3} << 20);
  EXPECT_LE(peak - before, bound) << "resident before " << before << ", peak " << peak;
}

// One call needing ~400 MB of scratch: M = 2^24 keys and N = 4 queries on
// the row path of 1 and 2 threads, or the oneDNN path. Afterwards resident
// memory must come back within 16 MB of where it was: scratch beyond
// internal::kKeptScratchBytes per slot is returned when the call ends
// (docs/reliability.md), rather than pinned for the thread's life.
TEST_P(DotProductMemory, HugeScratchIsReturnedAfterTheCall) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's quarantine keeps freed memory resident";
#endif
  const int64_t m = int64_t{1} << 24;
  for (const int64_t n : {int64_t{2}, int64_t{4}}) {
    const std::vector<float> q = RandomFloats(n, 91), k = RandomFloats(m, 92), v = RandomFloats(m, 93);
    std::vector<float> out(n, kSentinel);
    EngineOptions options;
    options.threads = GetParam();
    std::unique_ptr<Engine> engine;
    ASSERT_TRUE(Engine::Create(options, &engine).ok());
    const int64_t before = ProcStatusBytes("VmRSS");
    ASSERT_TRUE(engine
                    ->DotProductAttention(ConstTensor(q.data(), {1, n, 1}),
                                          ConstTensor(k.data(), {1, m, 1}),
                                          ConstTensor(v.data(), {1, m, 1}), ValidLens::None(),
                                          Tensor(out.data(), {1, n, 1}))
                    .ok());
    const int64_t after = ProcStatusBytes("VmRSS");
    ASSERT_GT(before, 0);
    EXPECT_LE(after - before, int64_t{16} << 20)
        << n << " queries: resident before " << before << ", after " << after;
    for (float o : out) EXPECT_TRUE(std::isfinite(o));
  }
}

// ---- bad input: a clear error naming the argument, nothing written --------

TEST(DotProductErrors, RejectsBadInputAndWritesNothing) {
  static std::vector<float> q(2 * 3 * 4, 0.5f), k(2 * 5 * 4, 0.5f), v(2 * 5 * 6, 0.5f);
  const ConstTensor qv(q.data(), {2, 3, 4}), kv(k.data(), {2, 5, 4}), vv(v.data(), {2, 5, 6});
  static const int64_t negative[] = {3, -1};
  static const int32_t per_batch3[] = {1, 2, 3};
  struct Case {
    std::string name;
    std::function<Status(const Engine&, float* out, float* weights)> call;
    std::string message_part;
  };
  const ValidLens none = ValidLens::None();
  const std::vector<Case> cases = {
      {"queries rank 2", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(ConstTensor(q.data(), {6, 4}), kv, vv, none, Tensor(o, {2, 3, 6}));
       }, "queries must have rank 3"},
      {"keys depth", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, ConstTensor(k.data(), {2, 4, 5}), vv, none, Tensor(o, {2, 3, 6}));
       }, "keys has shape (2, 4, 5) but must be (B, M, D) = (2, *, 4)"},
      {"keys batch", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, ConstTensor(k.data(), {1, 10, 4}), vv, none, Tensor(o, {2, 3, 6}));
       }, "keys has shape (1, 10, 4)"},
      {"values rows", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, ConstTensor(v.data(), {2, 6, 5}), none, Tensor(o, {2, 3, 6}));
       }, "values has shape (2, 6, 5) but must be (B, M, Dv) = (2, 5, *)"},
      {"values null", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, ConstTensor(nullptr, {2, 5, 6}), none, Tensor(o, {2, 3, 6}));
       }, "values is null"},
      {"keys zero-size", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, ConstTensor(k.data(), {2, 0, 4}), vv, none, Tensor(o, {2, 3, 6}));
       }, "keys has shape (2, 0, 4)"},
      {"out shape", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, vv, none, Tensor(o, {2, 3, 5}));
       }, "out has shape (2, 3, 5)"},
      {"out overlaps values", [&](const Engine& e, float*, float*) {
         return e.DotProductAttention(qv, kv, vv, none, Tensor(v.data(), {2, 3, 6}));
       }, "out overlaps values"},
      {"weights shape", [&](const Engine& e, float* o, float* w) {
         return e.DotProductAttention(qv, kv, vv, none, Tensor(o, {2, 3, 6}), Tensor(w, {2, 3, 4}));
       }, "weights has shape (2, 3, 4)"},
      {"weights overlaps out", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, vv, none, Tensor(o, {2, 3, 6}), Tensor(o, {2, 3, 5}));
       }, "weights overlaps out"},
      {"lens negative", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, vv, ValidLens::PerBatch(negative, 2), Tensor(o, {2, 3, 6}));
       }, "valid_lens[1] is -1"},
      {"out overlaps lens", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, vv, ValidLens::PerBatch(reinterpret_cast<int32_t*>(o), 2),
                                      Tensor(o, {2, 3, 6}));
       }, "out overlaps valid_lens"},
      {"weights overlaps lens", [&](const Engine& e, float* o, float* w) {
         return e.DotProductAttention(qv, kv, vv, ValidLens::PerBatch(reinterpret_cast<int64_t*>(w), 2),
                                      Tensor(o, {2, 3, 6}), Tensor(w, {2, 3, 5}));
       }, "weights overlaps valid_lens"},
      {"lens shape", [&](const Engine& e, float* o, float*) {
         return e.DotProductAttention(qv, kv, vv, ValidLens::PerBatch(per_batch3, 3), Tensor(o, {2, 3, 6}));
       }, "valid_lens has shape (3,)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> out(2 * 3 * 6, kSentinel), weights(2 * 3 * 5, kSentinel);
    const Status s = c.call(DefaultEngine(), out.data(), weights.data());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("DotProductAttention: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.message_part), std::string::npos) << s.message();
    for (float x : out) ASSERT_EQ(x, kSentinel) << "a failed call wrote out";
    for (float x : weights) ASSERT_EQ(x, kSentinel) << "a failed call wrote weights";
  }
}

}  // namespace
}  // namespace attnscore::test
