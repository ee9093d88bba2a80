// The bf16 precision mode of dot-product attention (EngineOptions::precision):
// the rounding kernel on every Highway target against an independent
// reference, the op against a double-precision reference that rounds where
// the mode says it rounds (tight), against the plain fp32 reference (the
// mode's stated tolerance), and the contract's edge cases, strides, threads
// and errors in this mode.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "matmul/matmul.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

// bf16's nearest neighbour of x by distance in double, ties to the even
// word: the two candidates are x's upper half and the next word away from
// zero; past the largest bf16 the next "word" is Inf, standing for 2^128 as
// IEEE rounding has it.
uint16_t ReferenceBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t low = bits >> 16, high = low + 1;
  const auto value = [](uint32_t word) {
    if ((word & 0x7FFF) == 0x7F80) return std::copysign(std::ldexp(1.0, 128), word & 0x8000 ? -1.0 : 1.0);
    const uint32_t widened = word << 16;
    float f;
    std::memcpy(&f, &widened, sizeof(f));
    return static_cast<double>(f);
  };
  if (std::isinf(x)) return static_cast<uint16_t>(low);
  const double below = std::abs(static_cast<double>(x) - value(low));
  const double above = std::abs(value(high) - static_cast<double>(x));
  if (below < above || (below == above && (low & 1) == 0)) return static_cast<uint16_t>(low);
  return static_cast<uint16_t>(high);
}

float Widen(uint16_t word) {
  const uint32_t bits = static_cast<uint32_t>(word) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

std::vector<float> RoundedCopy(const std::vector<float>& x) {
  std::vector<float> rounded(x.size());
  for (size_t i = 0; i < x.size(); ++i) rounded[i] = Widen(ReferenceBf16(x[i]));
  return rounded;
}

// ---- the rounding kernel ---------------------------------------------------

class RoundToBf16Test : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(RoundToBf16Test);

void ExpectRoundsLikeReference(const std::vector<float>& in) {
  std::vector<uint16_t> out(in.size() + 1, 0xABCD);
  kernels::RoundToBf16(in.data(), in.size(), out.data());
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(Widen(out[i]))) << "i=" << i;
    } else {
      EXPECT_EQ(ReferenceBf16(in[i]), out[i]) << "i=" << i << " x=" << in[i];
    }
  }
  EXPECT_EQ(out[in.size()], 0xABCD) << "wrote past n = " << in.size();

  // RoundThroughBf16: the same words, widened back to floats; also in place.
  std::vector<float> widened(in.size() + 1, 42.0f), in_place = in;
  kernels::RoundThroughBf16(in.data(), in.size(), widened.data());
  kernels::RoundThroughBf16(in_place.data(), in_place.size(), in_place.data());
  for (size_t i = 0; i < in.size(); ++i) {
    for (const float got : {widened[i], in_place[i]}) {
      if (std::isnan(in[i])) {
        EXPECT_TRUE(std::isnan(got)) << "i=" << i;
      } else {
        uint32_t bits;
        std::memcpy(&bits, &got, sizeof(bits));
        EXPECT_EQ(static_cast<uint32_t>(ReferenceBf16(in[i])) << 16, bits) << "i=" << i << " x=" << in[i];
      }
    }
  }
  EXPECT_EQ(widened[in.size()], 42.0f) << "wrote past n = " << in.size();

  // RoundNormalsToBf16 (the CPU's conversion where it has avx512_bf16): the
  // same words, a NaN's too, but a subnormal may come out as a zero of its sign.
  std::vector<uint16_t> normals(in.size() + 1, 0xABCD);
  kernels::RoundNormalsToBf16(in.data(), in.size(), normals.data());
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_EQ(ReferenceBf16(in[i]), normals[i]) << "i=" << i;
    } else if (std::fpclassify(in[i]) == FP_SUBNORMAL && (normals[i] & 0x7FFF) == 0) {
      EXPECT_EQ(std::signbit(in[i]), (normals[i] & 0x8000) != 0) << "i=" << i << " x=" << in[i];
    } else {
      EXPECT_EQ(ReferenceBf16(in[i]), normals[i]) << "i=" << i << " x=" << in[i];
    }
  }
  EXPECT_EQ(normals[in.size()], 0xABCD) << "wrote past n = " << in.size();
}

TEST_P(RoundToBf16Test, EdgeValuesRoundToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> in = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf,
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(), 1e-40f, -3e-39f};
  // Ties, both parities, and their neighbours: 1 + k/128 + 1/256 (±1 ulp),
  // half a bf16 ulp (2^-7) past a bf16 value.
  for (int k = 0; k < 4; ++k) {
    const float tie = 1.0f + static_cast<float>(k) / 128.0f + 1.0f / 256.0f;
    in.insert(in.end(), {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 2.0f), -tie});
  }
  // Just below and just past the rounding boundary to Inf.
  const float largest_bf16 = Widen(0x7F7F);
  const float boundary = largest_bf16 + std::ldexp(1.0f, 127 - 8);  // half a bf16 ulp above
  in.insert(in.end(), {largest_bf16, std::nextafter(boundary, 0.0f), boundary, -boundary});
  // A signalling-pattern NaN whose rounding would carry into Inf's bits.
  const uint32_t nan_bits = 0x7F80FFFFu;
  float nan;
  std::memcpy(&nan, &nan_bits, sizeof(nan));
  in.push_back(nan);
  ExpectRoundsLikeReference(in);
  // Twice over, so that each value also falls in the 32 floats a CPU
  // conversion takes at once, not only in the tail after them.
  std::vector<float> twice = in;
  twice.insert(twice.end(), in.begin(), in.end());
  ExpectRoundsLikeReference(twice);
}

// Where the CPU has avx512_bf16, RoundNormalsToBf16 is its conversion, which
// takes a subnormal as zero (the software rounding keeps it).
TEST(RoundNormalsToBf16, IsTheCpusConversionWhereItHasOne) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "this CPU has no avx512_bf16";
  std::vector<float> in(32, 1.0f);
  in[5] = 1e-39f;  // subnormal, and so is its nearest bf16
  std::vector<uint16_t> by_cpu(in.size()), by_software(in.size());
  kernels::RoundNormalsToBf16(in.data(), in.size(), by_cpu.data());
  kernels::RoundToBf16(in.data(), in.size(), by_software.data());
  EXPECT_EQ(by_cpu[5], 0x0000);
  EXPECT_EQ(by_software[5], ReferenceBf16(1e-39f));
  EXPECT_NE(by_software[5], 0x0000);
  EXPECT_EQ(by_cpu[4], 0x3F80);
}

TEST_P(RoundToBf16Test, EveryLengthAroundTheVectorWidth) {
  for (size_t n = 0; n <= 70; ++n) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ExpectRoundsLikeReference(RandomFloats(n, static_cast<uint32_t>(n) + 1, 100.0f));
  }
  ExpectRoundsLikeReference(RandomFloats(1000, 3, 1e-3f));
}

// ---- the op in bf16 mode ---------------------------------------------------

struct Shape {
  int64_t batch, queries, keys, depth, value_dim;
};

// A bf16 engine: its products are native bf16 matmuls or, where oneDNN has
// no bf16 arithmetic (the CPU, or this process's ISA cap), f32 matmuls on the
// rounded values; the tests below hold for both.
const Engine* Bf16(int threads = 1) {
  static std::unique_ptr<Engine> engines[3];
  std::unique_ptr<Engine>& engine = engines[threads];
  if (!engine) {
    EngineOptions options;
    options.threads = threads;
    options.precision = Precision::kBf16;
    const Status s = Engine::Create(options, &engine);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return engine.get();
}

struct Inputs {
  std::vector<float> q, k, v;
  Inputs(const Shape& s, uint32_t seed, float v_scale = 3.0f)
      : q(RandomFloats(static_cast<size_t>(s.batch * s.queries * s.depth), seed)),
        k(RandomFloats(static_cast<size_t>(s.batch * s.keys * s.depth), seed + 1)),
        v(RandomFloats(static_cast<size_t>(s.batch * s.keys * s.value_dim), seed + 2, v_scale)) {}
};

struct Outputs {
  std::vector<float> out, weights;
};

Outputs RunOp(const Engine& engine, const Shape& s, const Inputs& in, const ValidLens& lens,
            bool want_weights = true) {
  Outputs o{std::vector<float>(static_cast<size_t>(s.batch * s.queries * s.value_dim), kSentinel),
            std::vector<float>(static_cast<size_t>(s.batch * s.queries * s.keys), kSentinel)};
  const Status st = engine.DotProductAttention(
      ConstTensor(in.q.data(), {s.batch, s.queries, s.depth}),
      ConstTensor(in.k.data(), {s.batch, s.keys, s.depth}),
      ConstTensor(in.v.data(), {s.batch, s.keys, s.value_dim}), lens,
      Tensor(o.out.data(), {s.batch, s.queries, s.value_dim}),
      want_weights ? Tensor(o.weights.data(), {s.batch, s.queries, s.keys}) : Tensor());
  EXPECT_TRUE(st.ok()) << st.message();
  return o;
}

// out[b, i] = Σ_j bf16(weights[b, i, j]) · bf16(V[b, j]) in double: what the
// mode's second product computes from the weights the op returned.
std::vector<double> MixRoundedWeights(const Shape& s, const std::vector<float>& weights,
                                      const std::vector<float>& rounded_v) {
  std::vector<double> out(static_cast<size_t>(s.batch * s.queries * s.value_dim), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.queries; ++i)
      for (int64_t j = 0; j < s.keys; ++j) {
        const double w = Widen(ReferenceBf16(weights[static_cast<size_t>((b * s.queries + i) * s.keys + j)]));
        for (int64_t c = 0; c < s.value_dim; ++c)
          out[static_cast<size_t>((b * s.queries + i) * s.value_dim + c)] +=
              w * rounded_v[static_cast<size_t>((b * s.keys + j) * s.value_dim + c)];
      }
  return out;
}

// The two runs wrote the same bits, out and weights.
void ExpectSameBits(const Outputs& a, const Outputs& b) {
  EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)));
}

class DotProductBf16 : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(DotProductBf16);

// The weights match the double reference of the bf16-rounded Q and K as
// closely as fp32 mode matches its own (the products of bf16 values are exact
// in fp32), and out matches those weights, rounded, times the rounded V.
void CheckRoundingPoints(const Shape& s, const std::vector<int64_t>& lens, bool per_query,
                         uint32_t seed) {
  SCOPED_TRACE("B=" + std::to_string(s.batch) + " N=" + std::to_string(s.queries) +
               " M=" + std::to_string(s.keys) + " D=" + std::to_string(s.depth) +
               " Dv=" + std::to_string(s.value_dim) + (lens.empty() ? " no lens" : ""));
  const Inputs in(s, seed);
  const std::vector<float> q16 = RoundedCopy(in.q), k16 = RoundedCopy(in.k), v16 = RoundedCopy(in.v);
  const std::vector<int64_t> rows =
      lens.empty() ? std::vector<int64_t>() : RowLengths(lens, per_query, s.batch, s.queries);
  std::vector<double> want_weights;
  ReferenceDotProduct(q16, k16, v16, s.batch, s.queries, s.keys, s.depth, s.value_dim, rows,
                      &want_weights);
  const ValidLens valid = LensOf(lens, per_query, s.batch, s.queries);
  // Without the weights output (softmax in scratch, each row rounded to bf16
  // as it is made), run first, while the scratch holds another call's
  // words: the same bits as with it. (The scores' rows may lie further
  // apart in scratch then, where a query has L = 0: oneDNN computes each
  // element alike whatever its output's row stride, as the strided test
  // relies on.)
  const Outputs no_weights = RunOp(*Bf16(), s, in, valid, /*want_weights=*/false);
  const Outputs got = RunOp(*Bf16(), s, in, valid);
  EXPECT_LE(MaxAbsDiff(got.weights.data(), want_weights), kWeightTolerance);
  const std::vector<double> want_out = MixRoundedWeights(s, got.weights, v16);
  EXPECT_LE(MaxAbsDiff(got.out.data(), want_out), OutTolerance(in.v));
  EXPECT_EQ(0, std::memcmp(no_weights.out.data(), got.out.data(), got.out.size() * sizeof(float)));
}

TEST_P(DotProductBf16, MatchesTheReferenceAtItsRoundingPoints) {
  const Shape shapes[] = {{2, 16, 40, 64, 32}, {3, 7, 33, 33, 5}, {4, 9, 31, 8, 40},
                          {1, 100, 300, 64, 64}};
  uint32_t seed = 500;
  for (const Shape& s : shapes) {
    seed += 10;
    CheckRoundingPoints(s, {}, false, seed);
    CheckRoundingPoints(s, TestLengths(s.batch, s.queries, s.keys, true, seed + 1), true, seed + 2);
    CheckRoundingPoints(s, TestLengths(s.batch, s.queries, s.keys, false, seed + 3), false, seed + 4);
  }
}

TEST_P(DotProductBf16, QueryBlocksAndBatchChunksReuseTheirRoundedKeys) {
  // Query blocks of one entry's long rows (736 + 264 queries), then 300
  // entries in chunks of 32: K and V are rounded once per run of entries.
  CheckRoundingPoints({2, 1000, 700, 8, 4}, {700, 651}, false, 7);
  CheckRoundingPoints({300, 16, 1024, 4, 3}, std::vector<int64_t>(300, 1000), false, 10);
}

TEST_P(DotProductBf16, ProductsCutIntoTasksAddressBf16Blocks) {
  // Q Kᵀ of 8 entries at 8.4 MFLOP each: tasks of several entries. Then
  // 512 queries by 1024 keys (67 MFLOP): tasks of query rows.
  CheckRoundingPoints({8, 128, 512, 64, 64}, std::vector<int64_t>(8, 512), false, 20);
  CheckRoundingPoints({1, 512, 1024, 64, 32}, {1024}, false, 21);
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float f : x) m = std::max(m, static_cast<double>(std::abs(f)));
  return m;
}

// The mode's stated tolerance against the exact fp32 reference, for inputs
// of unit scale (Q, K ~ N(0, 1), D = 64) and V ~ N(0, 3²): weights within
// kBf16WeightTolerance, outputs within kBf16OutTolerance · (1 + max|V|).
constexpr double kBf16WeightTolerance = 1e-2;
constexpr double kBf16OutTolerance = 1e-2;

TEST(DotProductBf16Tolerance, WithinTheStatedBoundsOfTheFp32Reference) {
  for (const Shape& s : {Shape{1, 256, 1024, 64, 64}, Shape{4, 64, 128, 64, 64}}) {
    const Inputs in(s, 77);
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 78);
    std::vector<double> want_weights;
    const std::vector<double> want_out =
        ReferenceDotProduct(in.q, in.k, in.v, s.batch, s.queries, s.keys, s.depth, s.value_dim,
                            RowLengths(lens, true, s.batch, s.queries), &want_weights);
    const Outputs got = RunOp(*Bf16(), s, in, LensOf(lens, true, s.batch, s.queries));
    const double weight_error = MaxAbsDiff(got.weights.data(), want_weights);
    const double out_error = MaxAbsDiff(got.out.data(), want_out);
    EXPECT_LE(weight_error, kBf16WeightTolerance);
    EXPECT_LE(out_error, kBf16OutTolerance * (1 + MaxAbs(in.v)));
    // Rounding happened: the fp32 tolerances do not hold.
    EXPECT_GT(out_error, OutTolerance(in.v));
    std::printf("bf16 vs fp32 reference, (%lld, %lld, %lld, d%lld): weights %.2e, out %.2e "
                "(max|V| %.2f)\n",
                static_cast<long long>(s.batch), static_cast<long long>(s.queries),
                static_cast<long long>(s.keys), static_cast<long long>(s.depth), weight_error,
                out_error, MaxAbs(in.v));
  }
}

TEST_P(DotProductBf16, EdgeCasesOfTheContractHold) {
  // 40 keys: rows wider than the 32 floats RoundNormalsToBf16 converts at once.
  const Shape s{3, 5, 40, 16, 6};
  Inputs in(s, 31);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Entry 0: L = 0. Entry 1: L = 7, with NaN keys and Inf values past it.
  // Entry 2: all keys valid, its first query scaled by 1e4 (huge scores).
  const std::vector<int64_t> lens = {0, 7, 40};
  for (int64_t j = 7; j < s.keys; ++j) {
    for (int64_t d = 0; d < s.depth; ++d) in.k[static_cast<size_t>((s.keys + j) * s.depth + d)] = nan;
    for (int64_t c = 0; c < s.value_dim; ++c) in.v[static_cast<size_t>((s.keys + j) * s.value_dim + c)] = inf;
  }
  for (int64_t d = 0; d < s.depth; ++d) in.q[static_cast<size_t>((2 * s.queries) * s.depth + d)] *= 1e4f;
  const ValidLens valid = ValidLens::PerBatch(lens.data(), s.batch);
  const Outputs got = RunOp(*Bf16(), s, in, valid);
  for (int64_t i = 0; i < s.queries; ++i) {
    for (int64_t j = 0; j < s.keys; ++j) {
      EXPECT_EQ(got.weights[static_cast<size_t>(i * s.keys + j)], 1.0f / 40) << "L = 0: uniform";
      EXPECT_EQ(got.weights[static_cast<size_t>((s.queries + i) * s.keys + j)] == 0.0f, j >= 7);
    }
  }
  for (float x : got.out) EXPECT_TRUE(std::isfinite(x)) << "masked NaN/Inf leaked, or overflow";
  for (float w : got.weights) EXPECT_TRUE(std::isfinite(w));
  const Outputs got_alone = RunOp(*Bf16(), s, in, valid, /*want_weights=*/false);
  EXPECT_EQ(0, std::memcmp(got_alone.out.data(), got.out.data(), got.out.size() * sizeof(float)));
  // A NaN in a valid key makes exactly the rows that see it NaN.
  in.k[static_cast<size_t>((s.keys + 3) * s.depth)] = nan;
  const Outputs poisoned = RunOp(*Bf16(), s, in, valid);
  for (int64_t i = 0; i < s.queries; ++i) {
    EXPECT_TRUE(std::isnan(poisoned.out[static_cast<size_t>((s.queries + i) * s.value_dim)]));
    EXPECT_FALSE(std::isnan(poisoned.out[static_cast<size_t>(i * s.value_dim)]));
    EXPECT_FALSE(std::isnan(poisoned.out[static_cast<size_t>((2 * s.queries + i) * s.value_dim)]));
  }
  // Without the weights output each row is rounded as it is made
  // (SoftmaxRowsAndBf16): the same out, uniform, masked and NaN rows alike.
  const Outputs poisoned_alone = RunOp(*Bf16(), s, in, valid, /*want_weights=*/false);
  EXPECT_EQ(0, std::memcmp(poisoned_alone.out.data(), poisoned.out.data(),
                           poisoned.out.size() * sizeof(float)));
}

TEST_P(DotProductBf16, StridedViewsGiveTheDenseBits) {
  // K stored as (B, D, M); Q, V and the weights every other float (so the
  // weights are gathered before rounding); out with padded rows (a strided
  // C makes oneDNN pick another kernel). The rounded copies are dense either
  // way, so the results are the same bits.
  const Shape s{2, 12, 50, 24, 10};
  const Inputs in(s, 61);
  const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 62);
  const ValidLens valid = LensOf(lens, true, s.batch, s.queries);
  const Outputs dense = RunOp(*Bf16(), s, in, valid);
  const std::vector<float> kt = TransposeKeys(in.k, s.batch, s.keys, s.depth);
  const auto spread = [](const std::vector<float>& x) {
    std::vector<float> twice(2 * x.size(), kSentinel);
    for (size_t i = 0; i < x.size(); ++i) twice[2 * i] = x[i];
    return twice;
  };
  const std::vector<float> q2 = spread(in.q), v2 = spread(in.v);
  std::vector<float> out(2 * dense.out.size(), kSentinel), weights(2 * dense.weights.size(), kSentinel);
  const int64_t n = s.queries;
  const Status st = Bf16()->DotProductAttention(
      ConstTensor(q2.data(), {s.batch, n, s.depth}, {2 * n * s.depth, 2 * s.depth, 2}),
      ConstTensor(kt.data(), {s.batch, s.keys, s.depth}, {s.depth * s.keys, 1, s.keys}),
      ConstTensor(v2.data(), {s.batch, s.keys, s.value_dim}, {2 * s.keys * s.value_dim, 2 * s.value_dim, 2}),
      valid, Tensor(out.data(), {s.batch, n, s.value_dim}, {2 * n * s.value_dim, 2 * s.value_dim, 1}),
      Tensor(weights.data(), {s.batch, n, s.keys}, {2 * n * s.keys, 2 * s.keys, 2}));
  ASSERT_TRUE(st.ok()) << st.message();
  for (int64_t r = 0; r < s.batch * n; ++r) {
    ASSERT_EQ(0, std::memcmp(&out[static_cast<size_t>(2 * r * s.value_dim)],
                             &dense.out[static_cast<size_t>(r * s.value_dim)], sizeof(float) * s.value_dim))
        << "out row " << r;
    ASSERT_EQ(out[static_cast<size_t>((2 * r + 1) * s.value_dim)], kSentinel) << "wrote past a row";
  }
  for (size_t i = 0; i < dense.weights.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(&weights[2 * i], &dense.weights[i], sizeof(float))) << "weight " << i;
  }
}

TEST(DotProductBf16Threads, ResultsIdenticalForAnyThreadCount) {
  // Large enough that the rounding passes and both products (tasks of
  // query rows) are shared between threads, not just the softmax.
  // The others are run as whole chunks per thread, each thread with its
  // own rounded copies: 6 entries of their own widths (6 chunks), and 5
  // query blocks of one entry, whose K and V each thread rounds once.
  for (const Shape& s : {Shape{2, 512, 1024, 64, 64}, Shape{6, 64, 300, 32, 16},
                         Shape{1, 1024, 2500, 32, 16}}) {
    const Inputs in(s, 41);
    const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, true, 44);
    for (const ValidLens& valid : {LensOf(lens, true, s.batch, s.queries), ValidLens::None()}) {
      ExpectSameBits(RunOp(*Bf16(1), s, in, valid), RunOp(*Bf16(2), s, in, valid));
      ExpectSameBits(RunOp(*Bf16(1), s, in, valid, /*want_weights=*/false),
                     RunOp(*Bf16(2), s, in, valid, /*want_weights=*/false));
    }
  }
}

TEST_P(DotProductBf16, FewQueriesRunInFp32OnTheRowKernels) {
  const Shape s{5, 3, 200, 64, 64};
  const Inputs in(s, 91);
  const std::vector<int64_t> lens = TestLengths(s.batch, s.queries, s.keys, false, 92);
  const ValidLens valid = LensOf(lens, false, s.batch, s.queries);
  ExpectSameBits(RunOp(*Bf16(), s, in, valid), RunOp(DefaultEngine(), s, in, valid));
}

// docs/semantics.md section 2.2 in bf16 mode: a query's output depends on its
// own valid keys and values alone. Key `key` of every entry of K or V (or
// query `seer` of Q) is changed; every query row that does not reach it
// must be finite and match the unchanged call. The largest float rounds to
// +Inf in bfloat16, so it counts here as an Inf would.
void ExpectOnlyOwnKeysCountBf16(const Engine& engine, const Shape& s, const std::vector<int64_t>& lens,
                                int64_t key, uint32_t seed) {
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
  const ValidLens valid = LensOf(lens, true, s.batch, s.queries);
  const Inputs in(s, seed);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float largest = std::numeric_limits<float>::max();
  struct Change {
    const char* name;
    char tensor;
    float value;
  };
  const Change changes[] = {{"NaN in V", 'v', nan},         {"+Inf in V", 'v', inf},
                            {"largest float in V", 'v', largest}, {"NaN in K", 'k', nan},
                            {"largest float in K", 'k', largest}, {"NaN in Q", 'q', nan}};
  for (const bool want_weights : {true, false}) {
    const Outputs clean = RunOp(engine, s, in, valid, want_weights);
    for (const Change& change : changes) {
      SCOPED_TRACE(std::string(change.name) + (want_weights ? ", with weights" : ", without weights"));
      Inputs changed = in;
      for (int64_t b = 0; b < s.batch; ++b) {
        if (change.tensor == 'q') {
          for (int64_t d = 0; d < s.depth; ++d)
            changed.q[static_cast<size_t>((b * s.queries + seer) * s.depth + d)] = change.value;
        } else if (change.tensor == 'k') {
          for (int64_t d = 0; d < s.depth; ++d)
            changed.k[static_cast<size_t>((b * s.keys + key) * s.depth + d)] = change.value;
        } else {
          for (int64_t c = 0; c < s.value_dim; ++c)
            changed.v[static_cast<size_t>((b * s.keys + key) * s.value_dim + c)] = change.value;
        }
      }
      const Outputs got = RunOp(engine, s, changed, valid, want_weights);
      // Each change stops at its first wrong row, and the next one is still checked.
      const auto expect_rows = [&] {
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t i = 0; i < s.queries; ++i) {
            if (change.tensor == 'q' ? i == seer : own(b, i) > key) continue;
            const int64_t r = b * s.queries + i;
            for (int64_t c = 0; c < s.value_dim; ++c) {
              const float x = got.out[static_cast<size_t>(r * s.value_dim + c)];
              const float want = clean.out[static_cast<size_t>(r * s.value_dim + c)];
              ASSERT_TRUE(std::isfinite(x) && std::abs(x - want) <= OutTolerance(in.v))
                  << "query (" << b << ", " << i << ") of length " << lens[static_cast<size_t>(r)]
                  << ": out[" << c << "] = " << x << ", alone " << want;
            }
            for (int64_t j = 0; want_weights && j < s.keys; ++j) {
              const size_t e = static_cast<size_t>(r * s.keys + j);
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

TEST_P(DotProductBf16, AQueryReadsOnlyItsOwnKeysAndValues) {
  struct Case {
    const char* path;
    Shape shape;
    std::vector<int64_t> lens;
    int64_t key;
  };
  std::vector<Case> cases = {
      {"row path (fp32 in this mode)", {2, 3, 40, 16, 12}, {5, 40, 0, 7, 30, 12}, 20},
      {"gemm, 4 queries", {2, 4, 40, 16, 12}, {5, 40, 8, 20, 3, 33, 0, 7}, 20},
      {"gemm, widest below M", {2, 6, 50, 16, 12}, {4, 30, 10, 29, 1, 20, 6, 30, 30, 2, 11, 3}, 20},
      {"gemm, length 0 widens to M", {2, 5, 50, 16, 12}, {4, 9, 0, 12, 1, 6, 0, 10, 2, 11}, 20},
  };
  // Queries sorted by length, cut into query blocks; 8 entries taken whole
  // by each of 2 threads.
  Case blocks{"gemm, query blocks", {1, 1000, 700, 8, 4}, {}, 500};
  for (int64_t i = 0; i < 1000; ++i) blocks.lens.push_back(i % 5 == 1 ? 700 : i % 97 == 3 ? 0 : 1 + (i * 37) % 400);
  cases.push_back(blocks);
  Case chunks{"gemm, batch chunks", {8, 8, 64, 16, 8}, {}, 25};
  for (int64_t b = 0; b < 8; ++b) chunks.lens.insert(chunks.lens.end(), {3, 64, 10, 40, 2, 33, 12, 20});
  cases.push_back(chunks);
  uint32_t seed = 950;
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(c.path) + ", " + std::to_string(threads) + " thread(s)");
      ExpectOnlyOwnKeysCountBf16(*Bf16(threads), c.shape, c.lens, c.key, seed += 10);
    }
  }
}

// bf16 mode works under every ISA cap; Describe says whether its matmuls
// are oneDNN's bf16 ones.
TEST(Bf16Engine, CreatesAnywhereAndSaysHowItsMatmulsRun) {
  EngineOptions options;
  options.precision = Precision::kBf16;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(engine->options().precision, Precision::kBf16);
  const std::string described = engine->Describe();
  EXPECT_NE(described.find("precision: bf16\n"), std::string::npos) << described;
  const bool bf16_isa = matmul::OnednnIsa().find("bf16") != std::string::npos ||
                        matmul::OnednnIsa().find("amx") != std::string::npos;
  EXPECT_EQ(matmul::NativeBf16(), bf16_isa) << matmul::OnednnIsa();
  EXPECT_NE(described.find(bf16_isa ? "bf16 matmuls: native bf16 arithmetic\n"
                                     : "bf16 matmuls: f32 arithmetic on bf16-rounded inputs"),
            std::string::npos)
      << described;
  options.precision = static_cast<Precision>(7);
  EXPECT_EQ(Engine::Create(options, &engine).code(), StatusCode::kInvalidArgument);
}

TEST(Bf16Engine, PrecisionNamesParseBack) {
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    Precision parsed{};
    EXPECT_TRUE(ParsePrecision(PrecisionName(p), &parsed));
    EXPECT_EQ(parsed, p);
  }
  Precision parsed = Precision::kFp32;
  EXPECT_FALSE(ParsePrecision("fp16", &parsed));
  EXPECT_FALSE(ParsePrecision("BF16", &parsed));
}

}  // namespace
}  // namespace attnscore::test
