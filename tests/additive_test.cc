// Additive attention (docs/semantics.md section 3): the fast tanh's error bound,
// the op on every Highway target against a double-precision reference,
// golden data from the PyTorch seed module, the d2l toy, both tanh paths,
// strided views, edge cases, bad input and bad model files.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscore/additive.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "kernels/additive_scores.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

// The bound stated in kernels/additive_scores-inl.h.
constexpr double kFastTanhBound = 6e-7;

// ---------------------------------------------------------------------------
// The fast tanh, through the score kernel itself: one hidden feature with
// w_v = 1 makes each score exactly the kernel's tanh(a + b).

// tanh(a[r] + b[j]) for up to kAdditiveRowBlock values a and any number b.
std::vector<float> KernelTanh(const std::vector<float>& a, const std::vector<float>& b) {
  const size_t pad = kernels::kAdditivePadFloats;
  const size_t width = b.size(), stride = (width + pad - 1) / pad * pad;
  std::vector<float> a_factors = a, b_factors(stride, 0.0f);
  std::copy(b.begin(), b.end(), b_factors.begin());
  kernels::ToTanhFactors(a_factors.data(), a_factors.size());
  kernels::ToTanhFactors(b_factors.data(), b_factors.size());
  std::vector<float> out(a.size() * stride);
  const float* q_rows[kernels::kAdditiveRowBlock];
  float* out_rows[kernels::kAdditiveRowBlock];
  for (size_t r = 0; r < a.size(); ++r) {
    q_rows[r] = &a_factors[r];
    out_rows[r] = out.data() + r * stride;
  }
  const float w_v = 1.0f;
  kernels::AdditiveScoreBlock(kernels::TanhMode::kExpProduct, q_rows, a.size(), b_factors.data(),
                              stride, /*hidden=*/1, &w_v, /*w_sum=*/1.0f, width, out_rows);
  return out;
}

std::string Scientific(double x) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", x);
  return text;
}

class AdditiveTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(AdditiveTest);

TEST_P(AdditiveTest, FastTanhErrorBoundOverEveryFloatThatMatters) {
  // Every 5th float in [2^-8, 22] and its negative, every 997th below 2^-8
  // (tanh(x) ~ x there). Beyond ±22 the factor is clamped, and the result
  // is ±1 within the same bound (checked below, up to ±Inf).
  double worst = 0;
  float worst_x = 0;
  std::vector<float> x;
  auto flush = [&] {
    const std::vector<float> got = KernelTanh({0.0f}, x);
    for (size_t n = 0; n < x.size(); ++n) {
      const double error = std::abs(got[n] - std::tanh(static_cast<double>(x[n])));
      if (!(error <= worst)) worst = error, worst_x = x[n];  // NaN counts as worst
    }
    x.clear();
  };
  const uint32_t lo = 0x3B800000u /* 2^-8 */, hi = 0x41B00000u /* 22 */;
  for (uint32_t bits = 0; bits <= hi; bits += bits < lo ? 997 : 5) {
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    x.push_back(value);
    x.push_back(-value);
    if (x.size() >= 1 << 16) flush();
  }
  flush();
  EXPECT_LE(worst, kFastTanhBound) << "at x = " << worst_x;
  RecordProperty("max_abs_error", Scientific(worst));

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> beyond = {9.1f, 22.0f, 22.5f, 1e4f, 3e38f, inf};
  std::vector<float> both;
  for (float b : beyond) both.push_back(b), both.push_back(-b);
  const std::vector<float> got = KernelTanh({0.0f}, both);
  for (size_t n = 0; n < both.size(); ++n) {
    EXPECT_NEAR(got[n], std::tanh(static_cast<double>(both[n])), kFastTanhBound) << both[n];
  }
  EXPECT_TRUE(std::isnan(KernelTanh({0.0f}, {std::nanf("")})[0]));
  EXPECT_TRUE(std::isnan(KernelTanh({std::nanf("")}, {0.5f})[0]));
}

TEST_P(AdditiveTest, FastTanhOfSumsIsWithinTheBound) {
  // a + b is never rounded: the kernel multiplies factors. Pairs in
  // [-22, 22]², and pairs where one side is clamped (|a| up to 1e30) while
  // the other stays within the exact bound ±12.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> inside(-22.0f, 22.0f), small(-12.0f, 12.0f),
      huge(22.0f, 1e30f);
  double worst = 0;
  for (int round = 0; round < 64; ++round) {
    std::vector<float> a(kernels::kAdditiveRowBlock), b(1 << 16);
    const bool clamped = round % 4 == 3;
    for (float& x : a) x = clamped ? (rng() % 2 ? 1 : -1) * huge(rng) : inside(rng);
    for (float& x : b) x = clamped ? small(rng) : inside(rng);
    const std::vector<float> got = KernelTanh(a, b);
    const size_t stride = got.size() / a.size();
    for (size_t r = 0; r < a.size(); ++r) {
      for (size_t j = 0; j < b.size(); ++j) {
        const double want = std::tanh(static_cast<double>(a[r]) + static_cast<double>(b[j]));
        const double error = std::abs(got[r * stride + j] - want);
        if (!(error <= worst)) worst = error;
      }
    }
  }
  EXPECT_LE(worst, kFastTanhBound);
  RecordProperty("max_abs_error", Scientific(worst));
}

// ---------------------------------------------------------------------------
// The op against docs/semantics.md section 3 in double.

struct Shape {
  int64_t batch, queries, keys, query_size, key_size, hidden, value_dim;
};

struct Problem {
  Shape s;
  std::vector<float> w_q, w_k, w_v, q, k, v;
};

// Weights as nn.Linear initialises them (uniform, ±1/sqrt(fan_in)) times
// `weight_scale`; inputs ~ N(0, input_scale²).
Problem RandomProblem(const Shape& s, uint32_t seed, float weight_scale = 1.0f,
                      float input_scale = 1.0f) {
  Problem p{s, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t n, int64_t fan_in) {
    const float bound = weight_scale / std::sqrt(static_cast<float>(fan_in));
    std::uniform_real_distribution<float> dist(-bound, bound);
    std::vector<float> w(static_cast<size_t>(n));
    for (float& x : w) x = dist(rng);
    return w;
  };
  p.w_q = uniform(s.hidden * s.query_size, s.query_size);
  p.w_k = uniform(s.hidden * s.key_size, s.key_size);
  p.w_v = uniform(s.hidden, s.hidden);
  p.q = RandomFloats(static_cast<size_t>(s.batch * s.queries * s.query_size), seed + 1, input_scale);
  p.k = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.key_size), seed + 2, input_scale);
  p.v = RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), seed + 3, 3.0f);
  return p;
}

std::unique_ptr<AdditiveAttention> ModelOf(const Problem& p) {
  std::unique_ptr<AdditiveAttention> model;
  const Status s = AdditiveAttention::Create(
      ConstTensor(p.w_q.data(), {p.s.hidden, p.s.query_size}),
      ConstTensor(p.w_k.data(), {p.s.hidden, p.s.key_size}),
      ConstTensor(p.w_v.data(), {1, p.s.hidden}), &model);
  EXPECT_TRUE(s.ok()) << s.message();
  return model;
}

// Features, scores, masked softmax and W V, literally, in double.
std::vector<double> Reference(const Problem& p, const std::vector<int64_t>& row_lens,
                              std::vector<double>* weights) {
  const Shape& s = p.s;
  auto project = [&](const std::vector<float>& x, int64_t rows, int64_t in,
                     const std::vector<float>& w) {
    std::vector<double> y(static_cast<size_t>(rows * s.hidden));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < s.hidden; ++h) {
        double sum = 0;
        for (int64_t c = 0; c < in; ++c) sum += static_cast<double>(x[r * in + c]) * w[h * in + c];
        y[r * s.hidden + h] = sum;
      }
    return y;
  };
  const std::vector<double> qh = project(p.q, s.batch * s.queries, s.query_size, p.w_q);
  const std::vector<double> kh = project(p.k, s.batch * s.keys, s.key_size, p.w_k);
  std::vector<double> scores(static_cast<size_t>(s.batch * s.queries * s.keys));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.queries; ++i)
      for (int64_t j = 0; j < s.keys; ++j) {
        double sum = 0;
        for (int64_t h = 0; h < s.hidden; ++h) {
          sum += p.w_v[h] * std::tanh(qh[(b * s.queries + i) * s.hidden + h] +
                                      kh[(b * s.keys + j) * s.hidden + h]);
        }
        scores[(b * s.queries + i) * s.keys + j] = sum;
      }
  *weights = ReferenceMaskedSoftmax(scores, s.batch, s.queries, s.keys, row_lens);
  std::vector<double> out(static_cast<size_t>(s.batch * s.queries * s.value_dim), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.queries; ++i)
      for (int64_t j = 0; j < s.keys; ++j)
        for (int64_t c = 0; c < s.value_dim; ++c)
          out[(b * s.queries + i) * s.value_dim + c] +=
              (*weights)[(b * s.queries + i) * s.keys + j] * p.v[(b * s.keys + j) * s.value_dim + c];
  return out;
}

ValidLens LensOf(const std::vector<int64_t>& lens, bool per_query, const Shape& s) {
  return test::LensOf(lens, per_query, s.batch, s.queries);
}

std::vector<int64_t> Lengths(const Shape& s, bool per_query, uint32_t seed) {
  return TestLengths(s.batch, s.queries, s.keys, per_query, seed);
}

void CheckAgainstReference(const Problem& p, const std::vector<int64_t>& lens, bool per_query,
                           int threads = 1) {
  const Shape& s = p.s;
  SCOPED_TRACE("B=" + std::to_string(s.batch) + " N=" + std::to_string(s.queries) +
               " M=" + std::to_string(s.keys) + " Dq=" + std::to_string(s.query_size) +
               " Dk=" + std::to_string(s.key_size) + " H=" + std::to_string(s.hidden) +
               " Dv=" + std::to_string(s.value_dim) +
               (lens.empty() ? " no lens" : per_query ? " per query" : " per batch"));
  const std::vector<int64_t> rows =
      lens.empty() ? std::vector<int64_t>() : RowLengths(lens, per_query, s.batch, s.queries);
  std::vector<double> want_weights;
  const std::vector<double> want_out = Reference(p, rows, &want_weights);
  const auto model = ModelOf(p);
  std::unique_ptr<Engine> engine;
  EngineOptions options;
  options.threads = threads;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());

  const ConstTensor qv(p.q.data(), {s.batch, s.queries, s.query_size});
  const ConstTensor kv(p.k.data(), {s.batch, s.keys, s.key_size});
  const ConstTensor vv(p.v.data(), {s.batch, s.keys, s.value_dim});
  std::vector<float> out(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel);
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.keys), kSentinel);
  Status st = model->Forward(*engine, qv, kv, vv, LensOf(lens, per_query, s),
                             Tensor(out.data(), {s.batch, s.queries, s.value_dim}),
                             Tensor(weights.data(), {s.batch, s.queries, s.keys}));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(MaxAbsDiff(out.data(), want_out), OutTolerance(p.v));
  EXPECT_LE(MaxAbsDiff(weights.data(), want_weights), kWeightTolerance);

  // Without the weights output (softmax in place in scratch): the same answer.
  std::vector<float> out2(out.size(), kSentinel);
  st = model->Forward(*engine, qv, kv, vv, LensOf(lens, per_query, s),
                      Tensor(out2.data(), {s.batch, s.queries, s.value_dim}));
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LE(MaxAbsDiff(out2.data(), want_out), OutTolerance(p.v));

  // Small calls run their products on the row kernels, unless a view has a
  // column stride: out with stride 2 sends the same call through oneDNN.
  std::vector<float> wide(2 * out.size(), kSentinel);
  st = model->Forward(*engine, qv, kv, vv, LensOf(lens, per_query, s),
                      Tensor(wide.data(), {s.batch, s.queries, s.value_dim},
                             {2 * s.queries * s.value_dim, 2 * s.value_dim, 2}));
  ASSERT_TRUE(st.ok()) << st.message();
  for (size_t e = 0; e < out.size(); ++e) out2[e] = wide[2 * e];
  EXPECT_LE(MaxAbsDiff(out2.data(), want_out), OutTolerance(p.v));
}

// MaxAbs, which picks the tanh path: the largest magnitude wherever it lies
// (in any of its running maxima, or past the whole vectors), either sign.
TEST_P(AdditiveTest, MaxAbsFindsTheLargestMagnitudeAnywhere) {
  EXPECT_EQ(kernels::MaxAbs(nullptr, 0), 0.0f);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (size_t count = 1; count <= 70; ++count) {
    std::vector<float> x(count);
    for (size_t at = 0; at < count; ++at) {
      for (float& v : x) v = small(rng);
      x[at] = at % 2 == 0 ? -5.5f : 5.5f;
      EXPECT_EQ(kernels::MaxAbs(x.data(), count), 5.5f) << "count " << count << ", at " << at;
    }
  }
}

TEST_P(AdditiveTest, OddShapesAndEveryLengthKind) {
  // H = 1, 7, 31, 300; M = 1, 17, 700 (700 keys with H = 300 span two key chunks).
  const Shape shapes[] = {{1, 1, 1, 1, 1, 1, 1},     {2, 3, 17, 5, 7, 7, 6},
                          {3, 9, 17, 11, 4, 31, 3},  {2, 5, 700, 16, 24, 300, 8},
                          {2, 13, 1, 3, 2, 300, 5},  {1, 6, 700, 9, 9, 1, 2}};
  uint32_t seed = 100;
  for (const Shape& s : shapes) {
    seed += 10;
    const Problem p = RandomProblem(s, seed);
    CheckAgainstReference(p, {}, false);
    CheckAgainstReference(p, Lengths(s, /*per_query=*/true, seed + 1), true);
    CheckAgainstReference(p, Lengths(s, /*per_query=*/false, seed + 2), false);
  }
}

TEST_P(AdditiveTest, LargeProjectionsTakeHighwaysTanh) {
  // Projections up to ~±100 on both sides: clamped factors could meet, so
  // the op falls back to Highway's Tanh of a + b, and still agrees.
  const Shape s{2, 7, 40, 12, 10, 19, 4};
  const Problem p = RandomProblem(s, 5, /*weight_scale=*/8.0f, /*input_scale=*/6.0f);
  CheckAgainstReference(p, {}, false);
  CheckAgainstReference(p, Lengths(s, true, 6), true);
}

TEST_P(AdditiveTest, HugeQueriesWithSmallKeysStayOnTheFastPath) {
  // Queries' projections reach ~±1e3, keys' stay within ±12: factors are
  // clamped but every tanh is ±1 either way.
  Shape s{2, 5, 33, 6, 3, 16, 3};
  Problem p = RandomProblem(s, 9);
  for (float& x : p.q) x *= 2000.0f;
  for (float& x : p.k) x = std::clamp(x, -2.0f, 2.0f);
  CheckAgainstReference(p, Lengths(s, false, 10), false);
}

TEST_P(AdditiveTest, TwoThreadsGiveTheSameAnswer) {
  const Shape s{3, 37, 130, 16, 16, 64, 8};
  const Problem p = RandomProblem(s, 11);
  CheckAgainstReference(p, Lengths(s, true, 12), true, /*threads=*/2);
}

// With 2 threads, a call of several entries runs whole entries per thread,
// one of a single entry gives each thread chunks of its keys (M = 700:
// chunks of 256), and one of a single chunk with many queries (N = 128,
// M = 200) gives each thread blocks of its query rows: every way, every
// output is the 1-thread bits.
TEST(AdditiveThreads, ResultsIdenticalForAnyThreadCount) {
  for (const Shape& s : {Shape{5, 20, 300, 32, 24, 64, 16}, Shape{1, 40, 700, 16, 16, 300, 8},
                         Shape{1, 128, 200, 16, 16, 64, 8}}) {
    SCOPED_TRACE("B=" + std::to_string(s.batch));
    const Problem p = RandomProblem(s, 71);
    const auto model = ModelOf(p);
    const std::vector<int64_t> lens = Lengths(s, /*per_query=*/true, 72);  // 0, 1 and M among them
    std::vector<float> out[2], weights[2];
    for (int threads : {1, 2}) {
      const std::unique_ptr<Engine> engine = EngineWithThreads(threads);
      ASSERT_NE(engine, nullptr);
      std::vector<float>& o = out[threads - 1];
      std::vector<float>& w = weights[threads - 1];
      o.assign(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel);
      w.assign(static_cast<size_t>(s.batch * s.queries * s.keys), kSentinel);
      const Status st = model->Forward(
          *engine, ConstTensor(p.q.data(), {s.batch, s.queries, s.query_size}),
          ConstTensor(p.k.data(), {s.batch, s.keys, s.key_size}),
          ConstTensor(p.v.data(), {s.batch, s.keys, s.value_dim}), LensOf(lens, true, s),
          Tensor(o.data(), {s.batch, s.queries, s.value_dim}), Tensor(w.data(), {s.batch, s.queries, s.keys}));
      ASSERT_TRUE(st.ok()) << st.message();
    }
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(weights[0].data(), weights[1].data(), weights[0].size() * sizeof(float)));
    std::vector<double> want_weights;
    const std::vector<double> want_out = Reference(p, RowLengths(lens, true, s.batch, s.queries), &want_weights);
    EXPECT_LE(MaxAbsDiff(out[1].data(), want_out), OutTolerance(p.v));
  }
}

TEST_P(AdditiveTest, GoldenCasesFromTheSeedModule) {
  for (const char* name :
       {"additive_toy", "additive_no_lens", "additive_h1_per_query", "additive_h300_m700_int32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<AdditiveAttention> model;
    const Status loaded = AdditiveAttention::Load(
        std::string(ATTNSCORE_GOLDEN_DIR) + "/" + name + "/model.safetensors", &model);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    GoldenAttention g;
    LoadGoldenAttention(name, &g);
    const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1],
                  dv = g.values.shape[2];
    EXPECT_EQ(model->query_size(), g.queries.shape[2]);
    EXPECT_EQ(model->key_size(), g.keys.shape[2]);
    std::vector<float> out(static_cast<size_t>(b * n * dv)), weights(static_cast<size_t>(b * n * m));
    const Status s = model->Forward(
        DefaultEngine(), ConstTensor(g.queries.data<float>(), {b, n, g.queries.shape[2]}),
        ConstTensor(g.keys.data<float>(), {b, m, g.keys.shape[2]}),
        ConstTensor(g.values.data<float>(), {b, m, dv}), g.lens, Tensor(out.data(), {b, n, dv}),
        Tensor(weights.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    ExpectMatchesGolden(g, out, weights);
  }
}

TEST_P(AdditiveTest, SeedToyGivesUniformWeightsOverValidKeys) {
  // d2l: queries (2, 1, 20) ~ N(0, 1), keys = ones (2, 10, 2), values =
  // arange(40) as (10, 4) twice, lens [2, 6], H = 8, any weights:
  // out = [[[2, 3, 4, 5]], [[10, 11, 12, 13]]].
  const Problem p = RandomProblem({2, 1, 10, 20, 2, 8, 4}, 13);
  const std::vector<float> k(2 * 10 * 2, 1.0f);
  std::vector<float> v(2 * 10 * 4);
  for (size_t e = 0; e < v.size(); ++e) v[e] = static_cast<float>(e % 40);
  const int64_t lens[] = {2, 6};
  std::vector<float> out(8), weights(20);
  const Status s = ModelOf(p)->Forward(
      DefaultEngine(), ConstTensor(p.q.data(), {2, 1, 20}), ConstTensor(k.data(), {2, 10, 2}),
      ConstTensor(v.data(), {2, 10, 4}), ValidLens::PerBatch(lens, 2), Tensor(out.data(), {2, 1, 4}),
      Tensor(weights.data(), {2, 1, 10}));
  ASSERT_TRUE(s.ok()) << s.message();
  const float want[] = {2, 3, 4, 5, 10, 11, 12, 13};
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(out[e], want[e], OutTolerance(v)) << e;
  for (int j = 0; j < 10; ++j) {
    EXPECT_FLOAT_EQ(weights[j], j < 2 ? 0.5f : 0.0f) << j;
    EXPECT_FLOAT_EQ(weights[10 + j], j < 6 ? 1.0f / 6 : 0.0f) << j;
  }
}

TEST_P(AdditiveTest, StridedViewsIncludingKeysStoredTransposed) {
  const Shape s{2, 5, 23, 12, 6, 9, 4};
  const Problem p = RandomProblem(s, 17);
  const std::vector<int64_t> lens = {23, 9};
  std::vector<double> want_weights;
  const std::vector<double> want_out = Reference(p, RowLengths(lens, false, 2, 5), &want_weights);
  // Q with padded rows, K stored as (B, Dk, M), out padded, weights with column stride 2.
  const int64_t qpad = s.query_size + 3, opad = s.value_dim + 2;
  std::vector<float> q(static_cast<size_t>(s.batch * s.queries * qpad), std::nanf(""));
  for (int64_t r = 0; r < s.batch * s.queries; ++r)
    for (int64_t c = 0; c < s.query_size; ++c) q[r * qpad + c] = p.q[r * s.query_size + c];
  std::vector<float> k(p.k.size());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.keys; ++j)
      for (int64_t c = 0; c < s.key_size; ++c)
        k[(b * s.key_size + c) * s.keys + j] = p.k[(b * s.keys + j) * s.key_size + c];
  std::vector<float> out(static_cast<size_t>(s.batch * s.queries * opad), kSentinel);
  std::vector<float> weights(static_cast<size_t>(s.batch * s.queries * s.keys * 2), kSentinel);
  const Status st = ModelOf(p)->Forward(
      DefaultEngine(), ConstTensor(q.data(), {s.batch, s.queries, s.query_size}, {s.queries * qpad, qpad, 1}),
      ConstTensor(k.data(), {s.batch, s.keys, s.key_size}, {s.key_size * s.keys, 1, s.keys}),
      ConstTensor(p.v.data(), {s.batch, s.keys, s.value_dim}), ValidLens::PerBatch(lens.data(), 2),
      Tensor(out.data(), {s.batch, s.queries, s.value_dim}, {s.queries * opad, opad, 1}),
      Tensor(weights.data(), {s.batch, s.queries, s.keys}, {s.queries * s.keys * 2, s.keys * 2, 2}));
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t r = 0; r < s.batch * s.queries; ++r) {
    for (int64_t c = 0; c < s.value_dim; ++c)
      EXPECT_NEAR(out[r * opad + c], want_out[r * s.value_dim + c], OutTolerance(p.v));
    for (int64_t c = s.value_dim; c < opad; ++c) EXPECT_EQ(out[r * opad + c], kSentinel);
    for (int64_t j = 0; j < s.keys; ++j) {
      EXPECT_NEAR(weights[(r * s.keys + j) * 2], want_weights[r * s.keys + j], kWeightTolerance);
      EXPECT_EQ(weights[(r * s.keys + j) * 2 + 1], kSentinel);
    }
  }
}

// The edge cases of docs/semantics.md sections 1.2-1.5, through this op.
TEST_P(AdditiveTest, EdgeCases) {
  const Shape s{2, 3, 8, 4, 4, 5, 3};
  const float nan = std::nanf("");
  auto run = [&](const Problem& p, const std::vector<int64_t>& lens, std::vector<float>* out,
                 std::vector<float>* weights) {
    out->assign(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel);
    weights->assign(static_cast<size_t>(s.batch * s.queries * s.keys), kSentinel);
    const Status st = ModelOf(p)->Forward(
        DefaultEngine(), ConstTensor(p.q.data(), {s.batch, s.queries, s.query_size}),
        ConstTensor(p.k.data(), {s.batch, s.keys, s.key_size}),
        ConstTensor(p.v.data(), {s.batch, s.keys, s.value_dim}), LensOf(lens, false, s),
        Tensor(out->data(), {s.batch, s.queries, s.value_dim}),
        Tensor(weights->data(), {s.batch, s.queries, s.keys}));
    ASSERT_TRUE(st.ok()) << st.message();
  };
  std::vector<float> out, weights;

  // L = 0: uniform 1/M over all M keys.
  Problem p = RandomProblem(s, 19);
  run(p, {0, 3}, &out, &weights);
  for (int64_t e = 0; e < s.queries * s.keys; ++e) EXPECT_FLOAT_EQ(weights[e], 1.0f / s.keys);

  // NaN in a key past entry 0's length (3) is ignored; NaN in a valid key of
  // entry 1 makes all of entry 1's rows NaN.
  p.k[(0 * s.keys + 5) * s.key_size + 1] = nan;
  p.k[(1 * s.keys + 2) * s.key_size + 0] = nan;
  run(p, {3, 8}, &out, &weights);
  const int64_t entry_out = s.queries * s.value_dim, entry_weights = s.queries * s.keys;
  for (int64_t e = 0; e < entry_out; ++e) EXPECT_FALSE(std::isnan(out[e])) << e;
  for (int64_t e = 0; e < entry_weights; ++e) EXPECT_FALSE(std::isnan(weights[e])) << e;
  for (int64_t e = entry_out; e < 2 * entry_out; ++e) EXPECT_TRUE(std::isnan(out[e])) << e;

  // NaN in one query: only that query's row is NaN.
  p = RandomProblem(s, 20);
  p.q[1 * s.query_size + 2] = nan;  // entry 0, query 1
  run(p, {8, 8}, &out, &weights);
  for (int64_t i = 0; i < s.batch * s.queries; ++i) {
    for (int64_t j = 0; j < s.keys; ++j) {
      EXPECT_EQ(std::isnan(weights[i * s.keys + j]), i == 1) << i << "," << j;
    }
  }

  // Scores of ±1e4 (w_v scaled up): stable, no Inf or NaN, still the reference.
  p = RandomProblem(s, 21);
  for (float& w : p.w_v) w *= 2e4f;
  std::vector<double> want_weights;
  Reference(p, RowLengths({6, 8}, false, s.batch, s.queries), &want_weights);
  run(p, {6, 8}, &out, &weights);
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
  EXPECT_LE(MaxAbsDiff(weights.data(), want_weights), kWeightTolerance);
}

// docs/semantics.md section 3.3: a query's output depends on its own valid
// keys and values alone. Key `key` of every entry of K or V (or query `seer`
// of Q) is changed; every query row that does not reach it (its own width,
// L or M when L = 0, ends at or before `key`) must be finite and match the
// unchanged call. `out_step` 2 writes out with column stride 2, which sends
// a small call's products to oneDNN.
void ExpectOnlyOwnKeysCount(const Problem& p, const std::vector<int64_t>& lens, int64_t key,
                            int threads, int64_t out_step) {
  const Shape& s = p.s;
  ASSERT_EQ(lens.size(), static_cast<size_t>(s.batch * s.queries));
  const auto own = [&](int64_t b, int64_t i) {
    const int64_t l = std::min(lens[static_cast<size_t>(b * s.queries + i)], s.keys);
    return l > 0 ? l : s.keys;
  };
  ASSERT_LE(own(0, 0), key) << "query 0 must not reach the changed key";
  int64_t seer = -1;
  for (int64_t i = 0; i < s.queries; ++i) {
    if (own(0, i) > key) seer = i;
  }
  ASSERT_GE(seer, 0) << "another query of entry 0 must reach the changed key";
  const auto model = ModelOf(p);
  std::unique_ptr<Engine> engine;
  EngineOptions options;
  options.threads = threads;
  ASSERT_TRUE(Engine::Create(options, &engine).ok());
  const auto run = [&](const Problem& x, bool want_weights, std::vector<float>* out,
                       std::vector<float>* weights) {
    out->assign(static_cast<size_t>(s.batch * s.queries * s.value_dim * out_step), kSentinel);
    weights->assign(want_weights ? static_cast<size_t>(s.batch * s.queries * s.keys) : 0, kSentinel);
    const Status st = model->Forward(
        *engine, ConstTensor(x.q.data(), {s.batch, s.queries, s.query_size}),
        ConstTensor(x.k.data(), {s.batch, s.keys, s.key_size}),
        ConstTensor(x.v.data(), {s.batch, s.keys, s.value_dim}), LensOf(lens, true, s),
        Tensor(out->data(), {s.batch, s.queries, s.value_dim},
               {s.queries * s.value_dim * out_step, s.value_dim * out_step, out_step}),
        want_weights ? Tensor(weights->data(), {s.batch, s.queries, s.keys}) : Tensor());
    ASSERT_TRUE(st.ok()) << st.message();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Change {
    const char* name;
    char tensor;
    float value;
  };
  const Change changes[] = {{"NaN in V", 'v', nan}, {"+Inf in V", 'v', inf}, {"NaN in K", 'k', nan},
                            {"+Inf in K", 'k', inf}, {"NaN in Q", 'q', nan}};
  for (const bool want_weights : {true, false}) {
    std::vector<float> clean_out, clean_weights;
    run(p, want_weights, &clean_out, &clean_weights);
    for (const Change& change : changes) {
      SCOPED_TRACE(std::string(change.name) + (want_weights ? ", with weights" : ", without weights"));
      Problem changed = p;
      for (int64_t b = 0; b < s.batch; ++b) {
        if (change.tensor == 'q') {
          for (int64_t d = 0; d < s.query_size; ++d)
            changed.q[static_cast<size_t>((b * s.queries + seer) * s.query_size + d)] = change.value;
        } else if (change.tensor == 'k') {
          for (int64_t d = 0; d < s.key_size; ++d)
            changed.k[static_cast<size_t>((b * s.keys + key) * s.key_size + d)] = change.value;
        } else {
          for (int64_t c = 0; c < s.value_dim; ++c)
            changed.v[static_cast<size_t>((b * s.keys + key) * s.value_dim + c)] = change.value;
        }
      }
      std::vector<float> out, weights;
      run(changed, want_weights, &out, &weights);
      // Each change stops at its first wrong row, and the next one is still checked.
      const auto expect_rows = [&] {
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t i = 0; i < s.queries; ++i) {
            if (change.tensor == 'q' ? i == seer : own(b, i) > key) continue;
            const int64_t r = b * s.queries + i;
            for (int64_t c = 0; c < s.value_dim; ++c) {
              const size_t e = static_cast<size_t>((r * s.value_dim + c) * out_step);
              ASSERT_TRUE(std::isfinite(out[e]) && std::abs(out[e] - clean_out[e]) <= OutTolerance(p.v))
                  << "query (" << b << ", " << i << ") of length " << lens[static_cast<size_t>(r)]
                  << ": out[" << c << "] = " << out[e] << ", alone " << clean_out[e];
            }
            for (int64_t j = 0; want_weights && j < s.keys; ++j) {
              const size_t e = static_cast<size_t>(r * s.keys + j);
              ASSERT_NEAR(weights[e], clean_weights[e], kWeightTolerance)
                  << "query (" << b << ", " << i << "), weight " << j;
            }
          }
        }
      };
      expect_rows();
    }
  }
}

TEST_P(AdditiveTest, AQueryReadsOnlyItsOwnKeysAndValues) {
  struct Case {
    const char* what;
    Shape shape;
    std::vector<int64_t> lens;
    int64_t key;
  };
  const Case cases[] = {
      // Products on the row kernels (and, with out strided, on oneDNN).
      {"small", {2, 3, 12, 4, 4, 5, 3}, {2, 12, 0, 4, 9, 1}, 6},
      // oneDNN: the entry's widest query, or one of length 0, sets W V's width.
      {"oneDNN", {2, 6, 40, 16, 16, 32, 8}, {5, 40, 8, 20, 3, 33, 0, 7, 30, 12, 21, 2}, 20},
      {"oneDNN, widest below M", {2, 6, 50, 16, 16, 32, 8}, {4, 30, 10, 29, 1, 20, 6, 30, 30, 2, 11, 3}, 20},
      {"oneDNN, length 0 widens to M", {2, 5, 50, 16, 16, 32, 8}, {4, 9, 0, 12, 1, 6, 0, 10, 2, 11}, 20},
      // Two key chunks (384 keys each at H = 300), one entry.
      {"key chunks", {1, 6, 700, 9, 9, 300, 4}, {100, 700, 650, 0, 20, 399}, 400},
  };
  uint32_t seed = 800;
  for (const Case& c : cases) {
    const Problem p = RandomProblem(c.shape, seed += 10);
    for (int threads : {1, 2}) {
      for (int64_t out_step : {1, 2}) {
        SCOPED_TRACE(std::string(c.what) + ", " + std::to_string(threads) + " thread(s)" +
                     (out_step == 2 ? ", strided out" : ""));
        ExpectOnlyOwnKeysCount(p, c.lens, c.key, threads, out_step);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Bad arguments: InvalidArgument naming the argument, nothing written.

TEST(AdditiveArgumentsTest, BadInputIsRejectedAndNothingIsWritten) {
  const Shape s{2, 3, 5, 4, 6, 7, 2};
  const Problem p = RandomProblem(s, 23);
  const auto model = ModelOf(p);
  std::vector<float> buffer(1000, kSentinel);
  float* out = buffer.data();
  float* weights = buffer.data() + 500;
  const ConstTensor q(p.q.data(), {2, 3, 4}), k(p.k.data(), {2, 5, 6}), v(p.v.data(), {2, 5, 2});
  const Tensor o(out, {2, 3, 2}), w(weights, {2, 3, 5});
  const int64_t negative[] = {2, -1}, lens2[] = {5, 5};
  struct Case {
    const char* what;
    ConstTensor q, k, v;
    ValidLens lens;
    Tensor o, w;
  };
  const Case cases[] = {
      {"queries", ConstTensor(p.q.data(), {2, 4, 3}), k, v, ValidLens::None(), o, w},
      {"queries", ConstTensor(p.q.data(), {24}), k, v, ValidLens::None(), o, w},
      {"keys", q, ConstTensor(p.k.data(), {2, 6, 5}), v, ValidLens::None(), o, w},
      {"keys", q, ConstTensor(p.k.data(), {1, 5, 6}), v, ValidLens::None(), o, w},
      {"values", q, k, ConstTensor(p.v.data(), {2, 4, 2}), ValidLens::None(), o, w},
      {"out", q, k, v, ValidLens::None(), Tensor(out, {2, 3, 3}), w},
      {"out", q, k, v, ValidLens::None(), Tensor(const_cast<float*>(p.q.data()), {2, 3, 2}), w},
      {"weights", q, k, v, ValidLens::None(), o, Tensor(weights, {2, 3, 4})},
      {"weights", q, k, v, ValidLens::None(), o, Tensor(out, {2, 3, 5})},
      {"valid_lens", q, k, v, ValidLens::PerBatch(negative, 2), o, w},
      {"valid_lens", q, k, v, ValidLens::PerQuery(lens2, 2, 1), o, w},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Status st = model->Forward(DefaultEngine(), c.q, c.k, c.v, c.lens, c.o, c.w);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(std::string("AdditiveAttention: ")), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.what), std::string::npos) << st.message();
    for (float x : buffer) ASSERT_EQ(x, kSentinel);
  }
}

TEST(AdditiveArgumentsTest, BadWeightsAreRejected) {
  const std::vector<float> w_q(8 * 20, 0.1f), w_k(8 * 2, 0.1f), w_v(8, 0.1f);
  std::vector<float> bad = w_q;
  bad[3 * 20 + 4] = std::nanf("");
  std::unique_ptr<AdditiveAttention> model;
  struct Case {
    const char* fragment;
    ConstTensor w_q, w_k, w_v;
  };
  const Case cases[] = {
      {"W_k.weight", ConstTensor(w_q.data(), {8, 20}), ConstTensor(w_k.data(), {4, 4}),
       ConstTensor(w_v.data(), {1, 8})},
      {"w_v.weight", ConstTensor(w_q.data(), {8, 20}), ConstTensor(w_k.data(), {8, 2}),
       ConstTensor(w_v.data(), {8, 1})},
      {"W_q.weight must have rank 2", ConstTensor(w_q.data(), {160}), ConstTensor(w_k.data(), {8, 2}),
       ConstTensor(w_v.data(), {1, 8})},
      {"W_q.weight has NaN at (3, 4)", ConstTensor(bad.data(), {8, 20}),
       ConstTensor(w_k.data(), {8, 2}), ConstTensor(w_v.data(), {1, 8})},
  };
  for (const Case& c : cases) {
    const Status st = AdditiveAttention::Create(c.w_q, c.w_k, c.w_v, &model);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.fragment), std::string::npos) << st.message();
    EXPECT_EQ(model, nullptr);
  }
  EXPECT_EQ(AdditiveAttention::Create(ConstTensor(w_q.data(), {8, 20}), ConstTensor(w_k.data(), {8, 2}),
                                      ConstTensor(w_v.data(), {1, 8}), nullptr)
                .code(),
            StatusCode::kInvalidArgument);
}

class AdditiveModelFileTest : public io::TempDirTest {
 protected:
  AdditiveModelFileTest() : TempDirTest("attnscore_additive_test") {}

  // A state_dict with W_q (8, 20), W_k (8, 2), w_v (1, 8), edited by `edit`.
  std::string Write(const std::string& name,
                    const std::function<void(std::vector<io::SafetensorsTensor>*)>& edit) {
    std::vector<io::SafetensorsTensor> tensors = {
        {"W_q.weight", "F32", {8, 20}, std::vector<float>(160, 0.25f)},
        {"W_k.weight", "F32", {8, 2}, std::vector<float>(16, -0.5f)},
        {"w_v.weight", "F32", {1, 8}, std::vector<float>(8, 1.0f)}};
    edit(&tensors);
    const std::string path = Path(name);
    EXPECT_TRUE(io::WriteSafetensors(path, tensors).ok());
    return path;
  }
};

TEST_F(AdditiveModelFileTest, AStateDictLoads) {
  std::unique_ptr<AdditiveAttention> model;
  const Status st = AdditiveAttention::Load(Write("m.safetensors", [](auto*) {}), &model);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(model->query_size(), 20);
  EXPECT_EQ(model->key_size(), 2);
  EXPECT_EQ(model->hidden_size(), 8);
}

TEST_F(AdditiveModelFileTest, BadModelFilesAreClearErrors) {
  struct Case {
    const char* fragment;
    std::function<void(std::vector<io::SafetensorsTensor>*)> edit;
  };
  const Case cases[] = {
      {"W_k.weight", [](auto* t) { t->erase(t->begin()); }},  // sorted: W_k first
      {"unexpected tensor \"attn.bias\"",
       [](auto* t) { t->push_back({"attn.bias", "F32", {3}, {1, 2, 3}}); }},
      {"W_k.weight has shape (4, 4)", [](auto* t) { (*t)[0].shape = {4, 4}; }},
      {"w_v.weight has shape (8, 1)", [](auto* t) { (*t)[2].shape = {8, 1}; }},
      {"W_q.weight has NaN at (0, 3)", [](auto* t) { (*t)[1].data[3] = std::nanf(""); }},
  };
  for (const Case& c : cases) {
    std::vector<io::SafetensorsTensor> tensors;
    const std::string path = Write("m.safetensors", [&](auto* t) {
      std::sort(t->begin(), t->end(), [](const auto& a, const auto& b) { return a.name < b.name; });
      c.edit(t);
    });
    std::unique_ptr<AdditiveAttention> model;
    EXPECT_TRUE(io::FailedAs(AdditiveAttention::Load(path, &model), path,
                             StatusCode::kInvalidArgument, c.fragment));
    EXPECT_EQ(model, nullptr);
  }
  // Float64 weights, a truncated file, no file.
  const std::string header = R"({"W_k.weight":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  const std::string f64 = WriteRaw("f64.safetensors", bytes + header + std::string(8, '\0'));
  std::unique_ptr<AdditiveAttention> model;
  EXPECT_TRUE(io::FailedAs(AdditiveAttention::Load(f64, &model), f64, StatusCode::kInvalidArgument, "F64"));
  const std::string good = Write("good.safetensors", [](auto*) {});
  std::ifstream in(good, std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string cut = WriteRaw("cut.safetensors", whole.substr(0, whole.size() - 5));
  EXPECT_TRUE(io::FailedAs(AdditiveAttention::Load(cut, &model), cut, StatusCode::kInvalidArgument, ""));
  const std::string missing = Path("missing.safetensors");
  EXPECT_TRUE(io::FailedAs(AdditiveAttention::Load(missing, &model), missing, StatusCode::kIoError, ""));
  EXPECT_EQ(model, nullptr);
}

}  // namespace
}  // namespace attnscore::test
