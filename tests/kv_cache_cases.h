// The data the KvCache precision tests share: B sequences of keys and values
// shaped as the docs name (normal, an outlier channel, positions scaled by
// e^±4, sharp queries), float64 attention over them, and bf16 rounding
// written from the format's definition (the engine's own is not used).
#ifndef ATTNSCORE_TESTS_KV_CACHE_CASES_H_
#define ATTNSCORE_TESTS_KV_CACHE_CASES_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "test_util.h"

namespace attnscore::test {

// One test's cache contents and queries: B sequences of `lengths[b]`
// positions, keys (L, Hkv, D) and values (L, Hkv, Dv) each, as appended.
struct Case {
  int64_t batch = 2, kv_heads = 2, heads = 8, depth = 64, value_dim = 64;
  std::vector<std::vector<float>> k, v;  // per sequence
};

// Float64 attention of the last `queries` positions of each sequence,
// causal bottom-right, scale 1/sqrt(D): out (B, N, Hq, Dv), keys and values
// taken as given or rounded to bf16 first.
inline std::vector<double> Reference(const Case& c, const std::vector<float>& q, int64_t queries,
                                     bool rounded) {
  const int64_t group = c.heads / c.kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.depth));
  std::vector<double> out(static_cast<size_t>(c.batch * queries * c.heads * c.value_dim));
  const auto value = [&](float x) { return static_cast<double>(rounded ? RoundedToBf16(x) : x); };
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t held = static_cast<int64_t>(c.k[b].size()) / (c.kv_heads * c.depth);
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t seen = held - queries + i + 1;
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t g = h / group;
        const float* qrow = q.data() + ((b * queries + i) * c.heads + h) * c.depth;
        std::vector<double> s(static_cast<size_t>(seen));
        double top = -1e300;
        for (int64_t j = 0; j < seen; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.depth; ++d) {
            dot += static_cast<double>(qrow[d]) *
                   value(c.k[b][static_cast<size_t>((j * c.kv_heads + g) * c.depth + d)]);
          }
          s[static_cast<size_t>(j)] = dot * scale;
          top = std::max(top, dot * scale);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - top));
        double* o = out.data() + ((b * queries + i) * c.heads + h) * c.value_dim;
        for (int64_t j = 0; j < seen; ++j) {
          for (int64_t e = 0; e < c.value_dim; ++e) {
            o[e] += s[static_cast<size_t>(j)] / sum *
                    value(c.v[b][static_cast<size_t>((j * c.kv_heads + g) * c.value_dim + e)]);
          }
        }
      }
    }
  }
  return out;
}

enum class Data { kNormal, kOutlierChannel, kScaledPositions, kSharpQueries };

inline std::string Name(Data data) {
  switch (data) {
    case Data::kNormal:
      return "normal";
    case Data::kOutlierChannel:
      return "a key channel 30x the others";
    case Data::kScaledPositions:
      return "positions scaled by e^U(-4, 4)";
    case Data::kSharpQueries:
      return "sharp queries";
  }
  return "?";
}

// Normal keys and values, shaped as `data` says, for positions
// [first, first + count) of every sequence.
inline void Grow(Case* c, Data data, int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-4.0f, 4.0f);
  c->k.resize(static_cast<size_t>(c->batch));
  c->v.resize(static_cast<size_t>(c->batch));
  for (int64_t b = 0; b < c->batch; ++b) {
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t g = 0; g < c->kv_heads; ++g) {
        const float position_scale =
            data == Data::kScaledPositions ? std::exp(exponent(rng)) : 1.0f;
        for (int64_t d = 0; d < c->depth; ++d) {
          float x = normal(rng) * position_scale;
          if (data == Data::kOutlierChannel && d == 5) x *= 30.0f;
          c->k[b].push_back(x);
        }
        for (int64_t d = 0; d < c->value_dim; ++d) c->v[b].push_back(normal(rng) * position_scale);
      }
    }
  }
}

inline std::vector<float> Queries(const Case& c, Data data, int64_t queries, uint32_t seed) {
  return RandomFloats(static_cast<size_t>(c.batch * queries * c.heads * c.depth), seed,
                      data == Data::kSharpQueries ? 8.0f : 1.0f);
}

// Appends positions [from, to) of every sequence.
inline Status AppendRange(KvCache* cache, const Case& c, int64_t from, int64_t to) {
  const int64_t kr = c.kv_heads * c.depth, vr = c.kv_heads * c.value_dim;
  for (int64_t b = 0; b < c.batch; ++b) {
    const Status s = cache->AppendTo(
        b, ConstTensor(c.k[b].data() + from * kr, {to - from, c.kv_heads, c.depth}),
        ConstTensor(c.v[b].data() + from * vr, {to - from, c.kv_heads, c.value_dim}));
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

inline std::unique_ptr<KvCache> MakeCache(const Case& c, int64_t capacity, Precision precision) {
  KvCacheShape shape{c.batch, capacity, c.kv_heads, c.depth, c.value_dim};
  shape.precision = precision;
  std::unique_ptr<KvCache> cache;
  const Status s = KvCache::Create(shape, &cache);
  EXPECT_TRUE(s.ok()) << s.message();
  return cache;
}

inline double MaxError(const std::vector<float>& actual, const std::vector<double>& expected) {
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(actual[i]) - expected[i]));
  }
  return worst;
}

// One decoding step's errors (docs/semantics.md section 5.3's accuracy
// test): the cache's output against float64 attention over the fp32 keys
// and values, bf16 storage's (float64 attention over them rounded to bf16)
// against the same, and the values' standard deviation.
struct StepErrors {
  double error, bf16, value_std;
};

// A cache in `precision` after a 2,000-position append of `data`, then one
// position at a time: each of 4 steps' errors, reported to check(step, e).
template <class Check>
void ForEachDecodeStep(Precision precision, Data data, Check check) {
  Case c;
  Grow(&c, data, 2004, 11);
  std::unique_ptr<KvCache> cache = MakeCache(c, 2004, precision);
  ASSERT_TRUE(AppendRange(cache.get(), c, 0, 2000).ok());
  for (int64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(AppendRange(cache.get(), c, 2000 + step, 2001 + step).ok());
    Case seen = c;
    for (int64_t b = 0; b < c.batch; ++b) {
      seen.k[b].resize(static_cast<size_t>((2001 + step) * c.kv_heads * c.depth));
      seen.v[b].resize(static_cast<size_t>((2001 + step) * c.kv_heads * c.value_dim));
    }
    const std::vector<float> q = Queries(c, data, 1, 100 + static_cast<uint32_t>(step));
    std::vector<float> out(static_cast<size_t>(c.batch * c.heads * c.value_dim));
    const Status s =
        cache->Attend(DefaultEngine(), ConstTensor(q.data(), {c.batch, 1, c.heads, c.depth}),
                      Tensor(out.data(), {c.batch, 1, c.heads, c.value_dim}));
    ASSERT_TRUE(s.ok()) << s.message();
    const std::vector<double> exact = Reference(seen, q, 1, /*rounded=*/false);
    const std::vector<double> on_bf16 = Reference(seen, q, 1, /*rounded=*/true);
    StepErrors e{MaxError(out, exact), 0.0, 0.0};
    for (size_t i = 0; i < exact.size(); ++i)
      e.bf16 = std::max(e.bf16, std::abs(on_bf16[i] - exact[i]));
    double sum = 0, squares = 0, n = 0;
    for (const auto& row : seen.v) {
      for (float x : row) sum += x, squares += double{x} * x, n += 1;
    }
    e.value_std = std::sqrt(squares / n - (sum / n) * (sum / n));
    check(step, e);
  }
}

// A pooled cache and one without a pool, both holding c's 300 positions of
// D = Dv = 64: the same bits from each, and again after the pool's
// sequence 0 is cleared and appended anew.
inline void ExpectPoolGivesOwnBitsThroughAClear(KvCache* pooled, KvCache* own, const Case& c) {
  const std::vector<float> q = Queries(c, Data::kNormal, 1, 17);
  std::vector<float> a(static_cast<size_t>(c.batch * c.heads * 64)), b(a.size());
  const ConstTensor queries(q.data(), {c.batch, 1, c.heads, 64});
  ASSERT_TRUE(
      pooled->Attend(DefaultEngine(), queries, Tensor(a.data(), {c.batch, 1, c.heads, 64})).ok());
  ASSERT_TRUE(
      own->Attend(DefaultEngine(), queries, Tensor(b.data(), {c.batch, 1, c.heads, 64})).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  ASSERT_TRUE(pooled->Clear(0).ok());
  EXPECT_EQ(pooled->length(0), 0);
  ASSERT_TRUE(pooled
                  ->AppendTo(0, ConstTensor(c.k[0].data(), {300, c.kv_heads, 64}),
                             ConstTensor(c.v[0].data(), {300, c.kv_heads, 64}))
                  .ok());
  ASSERT_TRUE(
      pooled->Attend(DefaultEngine(), queries, Tensor(a.data(), {c.batch, 1, c.heads, 64})).ok());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace attnscore::test

#endif  // ATTNSCORE_TESTS_KV_CACHE_CASES_H_
