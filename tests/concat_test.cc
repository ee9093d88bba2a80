// Concat attention (docs/semantics.md section 4): the op on every Highway target
// against a double-precision reference, golden data from the PyTorch seed
// module (the seq2seq tutorial's Attn), strided views, edge cases, bad input,
// bad weights and bad model files.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscore/concat.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

struct Shape {
  int64_t batch, queries, query_size, key_size, rows, value_size, outputs;  // B, N, Dq, Dk, M, Dv, O
};

struct Problem {
  Shape s;
  std::vector<float> attn_w, attn_b, combine_w, combine_b, q, k, v;
};

// Weights and biases as nn.Linear initialises them (uniform, ±1/sqrt(fan_in));
// inputs ~ N(0, 1), values ~ N(0, 9).
Problem RandomProblem(const Shape& s, uint32_t seed) {
  Problem p{s, {}, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t n, int64_t fan_in) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    std::uniform_real_distribution<float> dist(-bound, bound);
    std::vector<float> w(static_cast<size_t>(n));
    for (float& x : w) x = dist(rng);
    return w;
  };
  const int64_t score_in = s.query_size + s.key_size, combine_in = s.query_size + s.value_size;
  p.attn_w = uniform(s.rows * score_in, score_in);
  p.attn_b = uniform(s.rows, score_in);
  p.combine_w = uniform(s.outputs * combine_in, combine_in);
  p.combine_b = uniform(s.outputs, combine_in);
  p.q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.query_size), seed + 1);
  p.k = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.key_size), seed + 2);
  p.v = RandomFloats(static_cast<size_t>(s.batch * s.rows * s.value_size), seed + 3, 3.0f);
  return p;
}

std::unique_ptr<ConcatAttention> ModelOf(const Problem& p) {
  const Shape& s = p.s;
  std::unique_ptr<ConcatAttention> model;
  const Status st = ConcatAttention::Create(
      s.query_size, ConstTensor(p.attn_w.data(), {s.rows, s.query_size + s.key_size}),
      ConstTensor(p.attn_b.data(), {s.rows}),
      ConstTensor(p.combine_w.data(), {s.outputs, s.query_size + s.value_size}),
      ConstTensor(p.combine_b.data(), {s.outputs}), &model);
  EXPECT_TRUE(st.ok()) << st.message();
  return model;
}

// The module's forward, literally, in double: the concatenations are built.
// *tolerance receives each output's bound: docs/semantics.md's 1e-4 relative for
// the linear layer, taken against the sum of its terms' magnitudes, plus the
// attention outputs' own 1e-5 · (1 + max|V|) carried through the weights.
struct Expected {
  std::vector<double> out, weights, tolerance;
};

Expected Reference(const Problem& p, const std::vector<int64_t>& row_lens) {
  const Shape& s = p.s;
  const int64_t rows = s.batch * s.queries;
  const int64_t score_in = s.query_size + s.key_size, combine_in = s.query_size + s.value_size;
  std::vector<double> scores(static_cast<size_t>(rows * s.rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> x(static_cast<size_t>(score_in));
    for (int64_t c = 0; c < s.query_size; ++c) x[c] = p.q[r * s.query_size + c];
    for (int64_t c = 0; c < s.key_size; ++c) x[s.query_size + c] = p.k[r * s.key_size + c];
    for (int64_t m = 0; m < s.rows; ++m) {
      double sum = p.attn_b[m];
      for (int64_t c = 0; c < score_in; ++c) sum += p.attn_w[m * score_in + c] * x[c];
      scores[r * s.rows + m] = sum;
    }
  }
  Expected e;
  e.weights = ReferenceMaskedSoftmax(scores, s.batch, s.queries, s.rows, row_lens);
  const double applied_tolerance = OutTolerance(p.v);
  e.out.resize(static_cast<size_t>(rows * s.outputs));
  e.tolerance.resize(e.out.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / s.queries;
    std::vector<double> x(static_cast<size_t>(combine_in), 0.0);
    for (int64_t c = 0; c < s.query_size; ++c) x[c] = p.q[r * s.query_size + c];
    for (int64_t m = 0; m < s.rows; ++m)
      for (int64_t c = 0; c < s.value_size; ++c)
        x[s.query_size + c] += e.weights[r * s.rows + m] * p.v[(b * s.rows + m) * s.value_size + c];
    for (int64_t o = 0; o < s.outputs; ++o) {
      double sum = p.combine_b[o], magnitude = std::abs(p.combine_b[o]), carried = 0;
      for (int64_t c = 0; c < combine_in; ++c) {
        const double w = p.combine_w[o * combine_in + c];
        sum += w * x[c];
        magnitude += std::abs(w * x[c]);
        if (c >= s.query_size) carried += std::abs(w) * applied_tolerance;
      }
      e.out[r * s.outputs + o] = sum;
      e.tolerance[r * s.outputs + o] = 1e-4 * magnitude + carried;
    }
  }
  return e;
}

// Every output within its own tolerance; NaN only where the reference has NaN.
void ExpectOutputs(const std::vector<float>& out, const Expected& e) {
  int failures = 0;
  for (size_t n = 0; n < e.out.size() && failures < 10; ++n) {
    const bool ok = std::isnan(e.out[n]) ? std::isnan(out[n])
                                         : std::abs(out[n] - e.out[n]) <= e.tolerance[n];
    if (!ok) {
      ++failures;
      ADD_FAILURE() << "out[" << n << "] = " << out[n] << ", want " << e.out[n] << " ± " << e.tolerance[n];
    }
  }
}

class ConcatTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(ConcatTest);

void CheckAgainstReference(const Problem& p, const std::vector<int64_t>& lens, bool per_query,
                           int threads = 1) {
  const Shape& s = p.s;
  SCOPED_TRACE("B=" + std::to_string(s.batch) + " N=" + std::to_string(s.queries) +
               " Dq=" + std::to_string(s.query_size) + " Dk=" + std::to_string(s.key_size) +
               " M=" + std::to_string(s.rows) + " Dv=" + std::to_string(s.value_size) +
               " O=" + std::to_string(s.outputs) +
               (lens.empty() ? " no lens" : per_query ? " per query" : " per batch"));
  const Expected want = Reference(
      p, lens.empty() ? std::vector<int64_t>() : RowLengths(lens, per_query, s.batch, s.queries));
  const auto model = ModelOf(p);
  std::unique_ptr<Engine> engine;
  EngineOptions options;
  options.threads = threads;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());
  const ConstTensor qv(p.q.data(), {s.batch, s.queries, s.query_size});
  const ConstTensor kv(p.k.data(), {s.batch, s.queries, s.key_size});
  const ConstTensor vv(p.v.data(), {s.batch, s.rows, s.value_size});
  const ValidLens valid = LensOf(lens, per_query, s.batch, s.queries);
  std::vector<float> out(static_cast<size_t>(s.batch * s.queries * s.outputs), kSentinel);
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.rows), kSentinel);
  Status st = model->Forward(*engine, qv, kv, vv, valid, Tensor(out.data(), {s.batch, s.queries, s.outputs}),
                             Tensor(weights.data(), {s.batch, s.queries, s.rows}));
  ASSERT_TRUE(st.ok()) << st.message();
  ExpectOutputs(out, want);
  EXPECT_LE(MaxAbsDiff(weights.data(), want.weights), kWeightTolerance);

  // Without the weights output (scores in scratch): the same answer.
  std::vector<float> out2(out.size(), kSentinel);
  st = model->Forward(*engine, qv, kv, vv, valid, Tensor(out2.data(), {s.batch, s.queries, s.outputs}));
  ASSERT_TRUE(st.ok()) << st.message();
  ExpectOutputs(out2, want);
}

TEST_P(ConcatTest, OddShapesAndEveryLengthKind) {
  const Shape shapes[] = {{1, 1, 32, 32, 32, 64, 64},  // the tutorial's sizes
                          {1, 1, 1, 1, 1, 1, 1},     {3, 5, 7, 11, 13, 6, 9},
                          {2, 9, 3, 1, 17, 5, 1},    {4, 33, 20, 12, 70, 40, 24},
                          {2, 3, 64, 2, 300, 3, 130}};
  uint32_t seed = 300;
  for (const Shape& s : shapes) {
    seed += 10;
    const Problem p = RandomProblem(s, seed);
    CheckAgainstReference(p, {}, false);
    CheckAgainstReference(p, TestLengths(s.batch, s.queries, s.rows, /*per_query=*/true, seed + 1), true);
    CheckAgainstReference(p, TestLengths(s.batch, s.queries, s.rows, /*per_query=*/false, seed + 2), false);
  }
}

TEST_P(ConcatTest, TwoThreadsAgreeWithTheReference) {
  const Shape s{3, 41, 16, 8, 50, 12, 10};
  const Problem p = RandomProblem(s, 7);
  CheckAgainstReference(p, TestLengths(s.batch, s.queries, s.rows, true, 8), true, /*threads=*/2);
  CheckAgainstReference(p, {}, false, /*threads=*/2);
}

TEST_P(ConcatTest, GoldenCasesFromTheSeedModule) {
  for (const char* name : {"concat_tutorial", "concat_odd_per_batch_int32", "concat_odd_per_query"}) {
    SCOPED_TRACE(name);
    GoldenAttention g;
    LoadGoldenAttention(name, &g);
    const int64_t b = g.queries.shape[0], n = g.queries.shape[1], dq = g.queries.shape[2],
                  m = g.values.shape[1], o = g.out.shape[2];
    std::unique_ptr<ConcatAttention> model;
    const Status loaded = ConcatAttention::Load(
        std::string(ATTNSCORE_GOLDEN_DIR) + "/" + name + "/model.safetensors", dq, &model);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    EXPECT_EQ(model->key_size(), g.keys.shape[2]);
    EXPECT_EQ(model->value_rows(), m);
    EXPECT_EQ(model->value_size(), g.values.shape[2]);
    EXPECT_EQ(model->output_size(), o);
    std::vector<float> out(static_cast<size_t>(b * n * o)), weights(static_cast<size_t>(b * n * m));
    const Status s = model->Forward(
        DefaultEngine(), ConstTensor(g.queries.data<float>(), {b, n, dq}),
        ConstTensor(g.keys.data<float>(), {b, n, g.keys.shape[2]}),
        ConstTensor(g.values.data<float>(), {b, m, g.values.shape[2]}), g.lens,
        Tensor(out.data(), {b, n, o}), Tensor(weights.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    // The golden out is the module's in float64, stored as float32: within
    // 1e-4 relative (its own rounding is 6e-8).
    const float* want = g.out.data<float>();
    for (int64_t e = 0; e < b * n * o; ++e) {
      EXPECT_NEAR(out[e], want[e], 1e-4 * (1.0 + std::abs(want[e]))) << e;
    }
    const float* want_weights = g.weights.data<float>();
    for (int64_t e = 0; e < b * n * m; ++e) EXPECT_NEAR(weights[e], want_weights[e], kWeightTolerance) << e;
  }
}

// Q with padded rows, K stored as (B, Dk, N), V with padded rows, out with
// padded rows; `gap` floats between batch entries of Q and out (so the
// batch is not one matrix) and weights with column stride `weight_step`.
void CheckStridedViews(const Shape& s, int64_t gap, int64_t weight_step) {
  SCOPED_TRACE("N=" + std::to_string(s.queries) + " gap=" + std::to_string(gap) +
               " weight step=" + std::to_string(weight_step));
  const Problem p = RandomProblem(s, 41);
  std::vector<int64_t> lens(static_cast<size_t>(s.batch), s.rows);
  lens[1] = 4;
  const Expected want = Reference(p, RowLengths(lens, false, s.batch, s.queries));
  const int64_t qpad = s.query_size + 3, vpad = s.value_size + 1, opad = s.outputs + 2;
  const int64_t q_entry = s.queries * qpad + gap, o_entry = s.queries * opad + gap;
  const float nan = std::nanf("");
  std::vector<float> q(static_cast<size_t>(s.batch * q_entry), nan);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.queries; ++i)
      for (int64_t c = 0; c < s.query_size; ++c)
        q[b * q_entry + i * qpad + c] = p.q[(b * s.queries + i) * s.query_size + c];
  std::vector<float> k(p.k.size());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.queries; ++i)
      for (int64_t c = 0; c < s.key_size; ++c)
        k[(b * s.key_size + c) * s.queries + i] = p.k[(b * s.queries + i) * s.key_size + c];
  std::vector<float> v(static_cast<size_t>(s.batch * s.rows * vpad), nan);
  for (int64_t r = 0; r < s.batch * s.rows; ++r)
    for (int64_t c = 0; c < s.value_size; ++c) v[r * vpad + c] = p.v[r * s.value_size + c];
  std::vector<float> out(static_cast<size_t>(s.batch * o_entry), kSentinel);
  const int64_t w_row = s.rows * weight_step;
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * w_row), kSentinel);
  const Status st = ModelOf(p)->Forward(
      DefaultEngine(), ConstTensor(q.data(), {s.batch, s.queries, s.query_size}, {q_entry, qpad, 1}),
      ConstTensor(k.data(), {s.batch, s.queries, s.key_size}, {s.key_size * s.queries, 1, s.queries}),
      ConstTensor(v.data(), {s.batch, s.rows, s.value_size}, {s.rows * vpad, vpad, 1}),
      ValidLens::PerBatch(lens.data(), s.batch),
      Tensor(out.data(), {s.batch, s.queries, s.outputs}, {o_entry, opad, 1}),
      Tensor(weights.data(), {s.batch, s.queries, s.rows}, {s.queries * w_row, w_row, weight_step}));
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t i = 0; i < s.queries; ++i) {
      const int64_t r = b * s.queries + i;
      const float* out_row = out.data() + b * o_entry + i * opad;
      for (int64_t o = 0; o < s.outputs; ++o) {
        EXPECT_NEAR(out_row[o], want.out[r * s.outputs + o], want.tolerance[r * s.outputs + o]);
      }
      for (int64_t o = s.outputs; o < opad; ++o) EXPECT_EQ(out_row[o], kSentinel);
      for (int64_t m = 0; m < s.rows; ++m) {
        EXPECT_NEAR(weights[r * w_row + m * weight_step], want.weights[r * s.rows + m], kWeightTolerance);
        for (int64_t pad = 1; pad < weight_step; ++pad) EXPECT_EQ(weights[r * w_row + m * weight_step + pad], kSentinel);
      }
    }
    for (int64_t e = s.queries * opad; e < o_entry; ++e) EXPECT_EQ(out[b * o_entry + e], kSentinel);
  }
}

TEST_P(ConcatTest, StridedViews) {
  // 6 queries: W V by oneDNN; 2 queries: row by row; 1 query: each entry
  // one row whose row stride means nothing, 3 rows in all: the whole pass
  // row by row.
  for (int64_t queries : {6, 2, 1}) {
    const Shape s{3, queries, 5, 4, 9, 3, 7};
    CheckStridedViews(s, /*gap=*/0, /*weight_step=*/2);
    CheckStridedViews(s, /*gap=*/5, /*weight_step=*/1);
  }
}

// The edge cases of docs/semantics.md sections 1.2-1.5, through this op: with 3 queries per
// entry (W V row by row) and with 5 (by oneDNN).
void CheckEdgeCases(const Shape& s) {
  SCOPED_TRACE("N=" + std::to_string(s.queries));
  const float nan = std::nanf("");
  std::vector<float> out, weights;
  auto run = [&](const Problem& p, const std::vector<int64_t>& lens) {
    out.assign(static_cast<size_t>(s.batch * s.queries * s.outputs), kSentinel);
    weights.assign(static_cast<size_t>(s.batch * s.queries * s.rows), kSentinel);
    const Status st = ModelOf(p)->Forward(
        DefaultEngine(), ConstTensor(p.q.data(), {s.batch, s.queries, s.query_size}),
        ConstTensor(p.k.data(), {s.batch, s.queries, s.key_size}),
        ConstTensor(p.v.data(), {s.batch, s.rows, s.value_size}), LensOf(lens, false, s.batch, s.queries),
        Tensor(out.data(), {s.batch, s.queries, s.outputs}), Tensor(weights.data(), {s.batch, s.queries, s.rows}));
    ASSERT_TRUE(st.ok()) << st.message();
  };
  const int64_t entry_out = s.queries * s.outputs, entry_weights = s.queries * s.rows;

  // L = 0: uniform 1/M over all M positions.
  Problem p = RandomProblem(s, 51);
  run(p, {0, 3});
  for (int64_t e = 0; e < entry_weights; ++e) EXPECT_FLOAT_EQ(weights[e], 1.0f / s.rows);
  ExpectOutputs(out, Reference(p, RowLengths({0, 3}, false, s.batch, s.queries)));

  // NaN in a value row past entry 0's length (3) is ignored; NaN in a valid
  // row of entry 1 makes all of entry 1's outputs NaN, not its weights.
  p.v[(0 * s.rows + 5) * s.value_size + 1] = nan;
  p.v[(1 * s.rows + 2) * s.value_size + 0] = nan;
  run(p, {3, 8});
  for (int64_t e = 0; e < entry_out; ++e) EXPECT_FALSE(std::isnan(out[e])) << e;
  for (int64_t e = entry_out; e < 2 * entry_out; ++e) EXPECT_TRUE(std::isnan(out[e])) << e;
  for (float w : weights) EXPECT_FALSE(std::isnan(w));

  // NaN in one key: only that query's row of weights and outputs is NaN.
  p = RandomProblem(s, 52);
  const int64_t poisoned = s.queries + 1;  // entry 1, query 1
  p.k[poisoned * s.key_size + 2] = nan;
  run(p, {8, 8});
  for (int64_t r = 0; r < s.batch * s.queries; ++r) {
    for (int64_t m = 0; m < s.rows; ++m) EXPECT_EQ(std::isnan(weights[r * s.rows + m]), r == poisoned) << r;
    for (int64_t o = 0; o < s.outputs; ++o) EXPECT_EQ(std::isnan(out[r * s.outputs + o]), r == poisoned) << r;
  }

  // Scores of ±1e4 (a huge bias): stable and finite. One position at +1e4
  // among -1e4 takes all the weight, as in the reference; with every score
  // near +1e4, float32 cannot hold their differences to better than its ulp
  // there (1e-3), so only the sums are checked.
  p = RandomProblem(s, 53);
  for (size_t m = 0; m < p.attn_b.size(); ++m) p.attn_b[m] += m == 2 ? 1e4f : -1e4f;
  run(p, {6, 8});
  const Expected want = Reference(p, RowLengths({6, 8}, false, s.batch, s.queries));
  EXPECT_LE(MaxAbsDiff(weights.data(), want.weights), kWeightTolerance);
  ExpectOutputs(out, want);
  p = RandomProblem(s, 53);
  for (float& b : p.attn_b) b += 1e4f;
  run(p, {6, 8});
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
  for (int64_t r = 0; r < s.batch * s.queries; ++r) {
    double sum = 0;
    for (int64_t m = 0; m < s.rows; ++m) sum += weights[r * s.rows + m];
    EXPECT_NEAR(sum, 1.0, kWeightTolerance) << r;
  }
}

TEST_P(ConcatTest, EdgeCases) {
  CheckEdgeCases({2, 3, 4, 5, 8, 3, 6});
  CheckEdgeCases({2, 5, 4, 5, 8, 3, 6});
}

// docs/semantics.md section 4.3: a query's output depends on its own valid
// rows of V alone (and its own query and key). Row `row` of every entry's V
// (or query `seer`'s Q or K) is changed; every query that does not reach it
// (its own width, L or M when L = 0, ends at or before `row`) must be finite
// and within the reference's tolerance of the unchanged problem.
void ExpectOnlyOwnValuesCount(const Shape& s, const std::vector<int64_t>& lens, int64_t row,
                              int threads, uint32_t seed) {
  ASSERT_EQ(lens.size(), static_cast<size_t>(s.batch * s.queries));
  const auto own = [&](int64_t b, int64_t i) {
    const int64_t l = std::min(lens[static_cast<size_t>(b * s.queries + i)], s.rows);
    return l > 0 ? l : s.rows;
  };
  ASSERT_LE(own(0, 0), row) << "query 0 must not reach the changed row";
  int64_t seer = -1;
  for (int64_t i = 0; i < s.queries; ++i) {
    if (own(0, i) > row) seer = i;
  }
  ASSERT_GE(seer, 0) << "another query of entry 0 must reach the changed row";
  const Problem p = RandomProblem(s, seed);
  const Expected want = Reference(p, RowLengths(lens, true, s.batch, s.queries));
  const auto model = ModelOf(p);
  std::unique_ptr<Engine> engine;
  EngineOptions options;
  options.threads = threads;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Change {
    const char* name;
    char tensor;
    float value;
  };
  const Change changes[] = {{"NaN in V", 'v', nan}, {"+Inf in V", 'v', inf}, {"-Inf in V", 'v', -inf},
                            {"NaN in K", 'k', nan}, {"NaN in Q", 'q', nan}};
  for (const bool want_weights : {true, false}) {
    for (const Change& change : changes) {
      SCOPED_TRACE(std::string(change.name) + (want_weights ? ", with weights" : ", without weights"));
      Problem changed = p;
      for (int64_t b = 0; b < s.batch; ++b) {
        if (change.tensor == 'q') {
          for (int64_t d = 0; d < s.query_size; ++d)
            changed.q[static_cast<size_t>((b * s.queries + seer) * s.query_size + d)] = change.value;
        } else if (change.tensor == 'k') {
          for (int64_t d = 0; d < s.key_size; ++d)
            changed.k[static_cast<size_t>((b * s.queries + seer) * s.key_size + d)] = change.value;
        } else {
          for (int64_t c = 0; c < s.value_size; ++c)
            changed.v[static_cast<size_t>((b * s.rows + row) * s.value_size + c)] = change.value;
        }
      }
      std::vector<float> out(static_cast<size_t>(s.batch * s.queries * s.outputs), kSentinel);
      std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.rows), kSentinel);
      const Status st = model->Forward(
          *engine, ConstTensor(changed.q.data(), {s.batch, s.queries, s.query_size}),
          ConstTensor(changed.k.data(), {s.batch, s.queries, s.key_size}),
          ConstTensor(changed.v.data(), {s.batch, s.rows, s.value_size}),
          LensOf(lens, true, s.batch, s.queries), Tensor(out.data(), {s.batch, s.queries, s.outputs}),
          want_weights ? Tensor(weights.data(), {s.batch, s.queries, s.rows}) : Tensor());
      ASSERT_TRUE(st.ok()) << st.message();
      // Each change stops at its first wrong row, and the next one is still checked.
      const auto expect_rows = [&] {
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t i = 0; i < s.queries; ++i) {
            if (change.tensor == 'v' ? own(b, i) > row : i == seer) continue;
            const int64_t r = b * s.queries + i;
            for (int64_t o = 0; o < s.outputs; ++o) {
              const size_t e = static_cast<size_t>(r * s.outputs + o);
              ASSERT_TRUE(std::isfinite(out[e]) && std::abs(out[e] - want.out[e]) <= want.tolerance[e])
                  << "query (" << b << ", " << i << ") of length " << lens[static_cast<size_t>(r)]
                  << ": out[" << o << "] = " << out[e] << ", want " << want.out[e];
            }
            for (int64_t m = 0; want_weights && m < s.rows; ++m) {
              const size_t e = static_cast<size_t>(r * s.rows + m);
              ASSERT_NEAR(weights[e], want.weights[e], kWeightTolerance)
                  << "query (" << b << ", " << i << "), weight " << m;
            }
          }
        }
      };
      expect_rows();
    }
  }
}

TEST_P(ConcatTest, AQueryReadsOnlyItsOwnValues) {
  struct Case {
    const char* what;
    Shape shape;  // B, N, Dq, Dk, M, Dv, O
    std::vector<int64_t> lens;
    int64_t row;
  };
  const Case cases[] = {
      // The whole pass row by row (3 rows in all).
      {"1 entry of 3 queries", {1, 3, 5, 4, 12, 6, 7}, {2, 12, 0}, 6},
      // W V row by row.
      {"3 queries", {2, 3, 5, 4, 12, 6, 7}, {2, 12, 0, 4, 9, 1}, 6},
      // W V by oneDNN: one call for entries of the same widths, or one per entry.
      {"4 queries, same widths", {2, 4, 5, 4, 12, 6, 7}, {2, 12, 5, 7, 3, 12, 1, 6}, 6},
      {"5 queries, widths of their own", {3, 5, 5, 4, 30, 6, 7},
       {4, 20, 10, 19, 1, 6, 0, 10, 2, 11, 3, 25, 30, 9, 8}, 12},
  };
  uint32_t seed = 700;
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(c.what) + ", " + std::to_string(threads) + " thread(s)");
      ExpectOnlyOwnValuesCount(c.shape, c.lens, c.row, threads, seed += 10);
    }
  }
}

// ---------------------------------------------------------------------------
// Bad arguments: InvalidArgument naming the argument, nothing written.

TEST(ConcatArgumentsTest, BadInputIsRejectedAndNothingIsWritten) {
  const Shape s{2, 3, 4, 5, 6, 2, 3};  // Q (2, 3, 4), K (2, 3, 5), V (2, 6, 2), out (2, 3, 3)
  const Problem p = RandomProblem(s, 61);
  const auto model = ModelOf(p);
  std::vector<float> buffer(1000, kSentinel);
  float* out = buffer.data();
  float* weights = buffer.data() + 500;
  const ConstTensor q(p.q.data(), {2, 3, 4}), k(p.k.data(), {2, 3, 5}), v(p.v.data(), {2, 6, 2});
  const Tensor o(out, {2, 3, 3}), w(weights, {2, 3, 6});
  // V's 24 floats at the start of room for 36: weights laid over V must not
  // run past the allocation into another (it reached Q's, in one ASan run).
  std::vector<float> values_with_room(36, 0.0f);
  std::copy(p.v.begin(), p.v.end(), values_with_room.begin());
  const ConstTensor roomy_v(values_with_room.data(), {2, 6, 2});
  const int64_t negative[] = {2, -1}, lens2[] = {5, 5};
  struct Case {
    const char* what;
    ConstTensor q, k, v;
    ValidLens lens;
    Tensor o, w;
  };
  const Case cases[] = {
      {"queries has shape (2, 3, 5)", ConstTensor(p.k.data(), {2, 3, 5}), k, v, ValidLens::None(), o, w},
      {"queries must have rank 3", ConstTensor(p.q.data(), {24}), k, v, ValidLens::None(), o, w},
      {"keys has shape (2, 2, 5)", q, ConstTensor(p.k.data(), {2, 2, 5}), v, ValidLens::None(), o, w},
      {"keys has shape (2, 3, 4)", q, ConstTensor(p.k.data(), {2, 3, 4}), v, ValidLens::None(), o, w},
      {"values has shape (2, 5, 2)", q, k, ConstTensor(p.v.data(), {2, 5, 2}), ValidLens::None(), o, w},
      {"values has shape (2, 4, 3)", q, k, ConstTensor(p.v.data(), {2, 4, 3}), ValidLens::None(), o, w},
      {"values has shape (1, 6, 2)", q, k, ConstTensor(p.v.data(), {1, 6, 2}), ValidLens::None(), o, w},
      {"out has shape (2, 3, 2)", q, k, v, ValidLens::None(), Tensor(out, {2, 3, 2}), w},
      {"out overlaps queries", q, k, v, ValidLens::None(), Tensor(const_cast<float*>(p.q.data()), {2, 3, 3}), w},
      {"weights has shape (2, 3, 5)", q, k, v, ValidLens::None(), o, Tensor(weights, {2, 3, 5})},
      {"weights overlaps out", q, k, v, ValidLens::None(), o, Tensor(out, {2, 3, 6})},
      {"weights overlaps values", q, k, roomy_v, ValidLens::None(), o, Tensor(values_with_room.data(), {2, 3, 6})},
      {"weights has strides that make elements share memory", q, k, v, ValidLens::None(), o,
       Tensor(weights, {2, 3, 6}, {18, 0, 1})},
      {"out overlaps keys", q, k, v, ValidLens::None(), Tensor(const_cast<float*>(p.k.data()), {2, 3, 3}), w},
      {"keys must have rank 3", q, ConstTensor(p.k.data(), {6, 5}), v, ValidLens::None(), o, w},
      {"values has shape (2, 0, 2)", q, k, ConstTensor(p.v.data(), {2, 0, 2}), ValidLens::None(), o, w},
      {"valid_lens", q, k, v, ValidLens::PerBatch(negative, 2), o, w},
      {"valid_lens", q, k, v, ValidLens::PerQuery(lens2, 2, 1), o, w},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Status st = model->Forward(DefaultEngine(), c.q, c.k, c.v, c.lens, c.o, c.w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("ConcatAttention: "), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
    for (float x : buffer) ASSERT_EQ(x, kSentinel);
  }
}

TEST(ConcatArgumentsTest, BadWeightsAreRejected) {
  // attn (6, 4 + 5), combine (3, 4 + 2) with query_size 4.
  const std::vector<float> attn_w(6 * 9, 0.1f), attn_b(6, 0.1f), combine_w(3 * 6, 0.1f), combine_b(3, 0.1f);
  std::vector<float> bad = attn_b;
  bad[4] = std::nanf("");
  const ConstTensor aw(attn_w.data(), {6, 9}), ab(attn_b.data(), {6}), cw(combine_w.data(), {3, 6}),
      cb(combine_b.data(), {3});
  struct Case {
    const char* fragment;
    int64_t query_size;
    ConstTensor aw, ab, cw, cb;
  };
  const Case cases[] = {
      {"attn.bias has shape (5)", 4, aw, ConstTensor(attn_b.data(), {5}), cw, cb},
      {"attn.bias must have rank 1", 4, aw, ConstTensor(attn_b.data(), {1, 6}), cw, cb},
      {"attn_combine.bias has shape (2)", 4, aw, ab, cw, ConstTensor(combine_b.data(), {2})},
      {"attn.weight must have rank 2", 4, ConstTensor(attn_w.data(), {54}), ab, cw, cb},
      {"query_size is 0", 0, aw, ab, cw, cb},
      {"query_size is 6 but attn_combine.weight has 6 columns", 6, aw, ab, cw, cb},
      {"query_size is 9 but attn.weight has 9 columns", 9, aw, ab, cw, cb},
      {"attn.bias has NaN at (4)", 4, aw, ConstTensor(bad.data(), {6}), cw, cb},
  };
  for (const Case& c : cases) {
    std::unique_ptr<ConcatAttention> model;
    const Status st = ConcatAttention::Create(c.query_size, c.aw, c.ab, c.cw, c.cb, &model);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.fragment), std::string::npos) << st.message();
    EXPECT_EQ(model, nullptr);
  }
  std::unique_ptr<ConcatAttention> model;
  ASSERT_TRUE(ConcatAttention::Create(4, aw, ab, cw, cb, &model).ok());
  EXPECT_EQ(model->query_size(), 4);
  EXPECT_EQ(model->key_size(), 5);
  EXPECT_EQ(model->value_rows(), 6);
  EXPECT_EQ(model->value_size(), 2);
  EXPECT_EQ(model->output_size(), 3);
  EXPECT_EQ(ConcatAttention::Create(4, aw, ab, cw, cb, nullptr).code(), StatusCode::kInvalidArgument);
}

class ConcatModelFileTest : public io::TempDirTest {
 protected:
  ConcatModelFileTest() : TempDirTest("attnscore_concat_test") {}

  // The tutorial's state_dict (Dq = Dk = M = 32, Dv = O = 64), sorted by
  // name, edited by `edit`.
  std::string Write(const std::function<void(std::vector<io::SafetensorsTensor>*)>& edit) {
    std::vector<io::SafetensorsTensor> tensors = {
        {"attn.bias", "F32", {32}, std::vector<float>(32, 0.5f)},
        {"attn.weight", "F32", {32, 64}, std::vector<float>(32 * 64, 0.25f)},
        {"attn_combine.bias", "F32", {64}, std::vector<float>(64, -0.5f)},
        {"attn_combine.weight", "F32", {64, 96}, std::vector<float>(64 * 96, 0.125f)}};
    edit(&tensors);
    const std::string path = Path("m.safetensors");
    EXPECT_TRUE(io::WriteSafetensors(path, tensors).ok());
    return path;
  }
};

TEST_F(ConcatModelFileTest, TheTutorialsStateDictLoads) {
  std::unique_ptr<ConcatAttention> model;
  const Status st = ConcatAttention::Load(Write([](auto*) {}), 32, &model);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(model->key_size(), 32);
  EXPECT_EQ(model->value_rows(), 32);
  EXPECT_EQ(model->value_size(), 64);
  EXPECT_EQ(model->output_size(), 64);
}

TEST_F(ConcatModelFileTest, BadModelFilesAreClearErrors) {
  struct Case {
    const char* fragment;
    int64_t query_size;
    std::function<void(std::vector<io::SafetensorsTensor>*)> edit;
  };
  const Case cases[] = {
      {"attn.bias", 32, [](auto* t) { t->erase(t->begin()); }},
      {"attn_combine.weight", 32, [](auto* t) { t->pop_back(); }},
      {"unexpected tensor \"W_q.weight\"", 32,
       [](auto* t) { t->push_back({"W_q.weight", "F32", {1}, {1}}); }},
      {"attn.bias has shape (31,)", 32, [](auto* t) { (*t)[0] = {"attn.bias", "F32", {31}, std::vector<float>(31)}; }},
      {"attn_combine.bias has shape (1, 64)", 32, [](auto* t) { (*t)[2].shape = {1, 64}; }},
      {"attn.weight has Inf at (0, 3)", 32,
       [](auto* t) { (*t)[1].data[3] = std::numeric_limits<float>::infinity(); }},
      {"query_size is 64 but attn.weight has 64 columns", 64, [](auto*) {}},
  };
  for (const Case& c : cases) {
    const std::string path = Write(c.edit);
    std::unique_ptr<ConcatAttention> model;
    EXPECT_TRUE(io::FailedAs(ConcatAttention::Load(path, c.query_size, &model), path,
                             StatusCode::kInvalidArgument, c.fragment));
    EXPECT_EQ(model, nullptr);
  }
  const std::string missing = Path("missing.safetensors");
  std::unique_ptr<ConcatAttention> model;
  EXPECT_TRUE(io::FailedAs(ConcatAttention::Load(missing, 32, &model), missing, StatusCode::kIoError, ""));
  EXPECT_EQ(model, nullptr);
}

}  // namespace
}  // namespace attnscore::test
