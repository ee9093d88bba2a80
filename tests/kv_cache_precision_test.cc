// A KvCache that holds bf16 (KvCacheShape::precision): its error against
// float64 attention over the caller's fp32 keys and values, set beside the
// error exact math makes on the same keys and values rounded to bf16, on
// the data the docs name (normal, an outlier channel, positions scaled by
// e^±4, sharp queries); its bits for any thread count; its pool; its checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "api/kv_cache_bytes.h"
#include "attnscore/attnscore.h"
#include "kv_cache_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

// The acceptance of docs/semantics.md section 5.3: after a 2,000-position
// append and then one position at a time, each decoding step's error
// against float64 math on the fp32 keys and values is at most 1.5x the error
// of float64 math on the same keys and values rounded to bf16.
TEST(KvCachePrecision, Bf16DecodeErrsAtMostOneAndAHalfTimesExactMathOnRoundedValues) {
  for (Data data :
       {Data::kNormal, Data::kOutlierChannel, Data::kScaledPositions, Data::kSharpQueries}) {
    ForEachDecodeStep(Precision::kBf16, data, [&](int64_t step, const StepErrors& e) {
      EXPECT_GT(e.bf16, 0.0) << Name(data);
      EXPECT_LE(e.error, 1.5 * e.bf16) << Name(data) << ", step " << step << ": error " << e.error
                                       << " against exact math on rounded K, V " << e.bf16;
    });
  }
}

// Prefill through the cache (N queries at once, causal) and the weights
// output: float64 math on the rounded keys and values, within float32's
// accumulation error; the weights of each row sum to 1 over what it sees.
TEST(KvCachePrecision, Bf16PrefillAndWeightsFollowTheRoundedValues) {
  Case c;
  c.batch = 2, c.kv_heads = 2, c.heads = 4, c.depth = 40, c.value_dim = 24;  // tails on every ISA
  Grow(&c, Data::kNormal, 70, 5);
  std::unique_ptr<KvCache> cache = MakeCache(c, 80, Precision::kBf16);
  ASSERT_TRUE(AppendRange(cache.get(), c, 0, 70).ok());
  const int64_t n = 6;
  const std::vector<float> q = Queries(c, Data::kNormal, n, 7);
  std::vector<float> out(static_cast<size_t>(c.batch * n * c.heads * c.value_dim));
  std::vector<float> weights(static_cast<size_t>(c.batch * c.heads * n * 70), -1.0f);
  const Status s =
      cache->Attend(DefaultEngine(), ConstTensor(q.data(), {c.batch, n, c.heads, c.depth}),
                    Tensor(out.data(), {c.batch, n, c.heads, c.value_dim}),
                    Tensor(weights.data(), {c.batch, c.heads, n, 70}));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_LE(MaxError(out, Reference(c, q, n, /*rounded=*/true)), 2e-5);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < n; ++i) {
        const float* w = weights.data() + ((b * c.heads + h) * n + i) * 70;
        double sum = 0;
        for (int64_t j = 0; j < 70; ++j) {
          if (j > 70 - n + i) {
            EXPECT_EQ(w[j], 0.0f) << "past its causal bound";
          }
          sum += w[j];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

// One long sequence on 1, 2 and 3 threads, in bf16 and in int8: its keys
// are cut into blocks of a size that does not depend on the threads, so
// every count gives the bits of one thread, outputs and weights.
TEST(KvCachePrecision, BitsAreTheSameForAnyThreadCountInEachPrecision) {
  for (Precision precision : {Precision::kBf16, Precision::kInt8}) {
    Case c;
    c.batch = 1, c.kv_heads = 2, c.heads = 8, c.depth = 64, c.value_dim = 64;
    Grow(&c, Data::kNormal, 3000, 9);
    std::unique_ptr<KvCache> cache = MakeCache(c, 3000, precision);
    ASSERT_TRUE(AppendRange(cache.get(), c, 0, 3000).ok());
    const std::vector<float> q = Queries(c, Data::kNormal, 1, 3);
    std::vector<std::vector<float>> outs, weights;
    for (int threads : {1, 2, 3}) {
      std::unique_ptr<Engine> engine = EngineWithThreads(threads);
      std::vector<float> out(static_cast<size_t>(c.heads * c.value_dim));
      std::vector<float> w(static_cast<size_t>(c.heads * 3000));
      ASSERT_TRUE(cache
                      ->Attend(*engine, ConstTensor(q.data(), {1, 1, c.heads, c.depth}),
                               Tensor(out.data(), {1, 1, c.heads, c.value_dim}),
                               Tensor(w.data(), {1, c.heads, 1, 3000}))
                      .ok());
      outs.push_back(out);
      weights.push_back(w);
    }
    for (size_t t = 1; t < outs.size(); ++t) {
      EXPECT_EQ(std::memcmp(outs[t].data(), outs[0].data(), outs[0].size() * sizeof(float)), 0)
          << t + 1 << " threads, " << PrecisionName(precision);
      EXPECT_EQ(
          std::memcmp(weights[t].data(), weights[0].data(), weights[0].size() * sizeof(float)), 0)
          << t + 1 << " threads, " << PrecisionName(precision);
    }
  }
}

// Decode of a short cache, each KV head's four query heads whole in one
// task: asking for the weights changes no bit of the output, in each
// precision (a call without them takes a task of its own; dot_product_rows.cc).
TEST(KvCachePrecision, OutputsAreTheSameBitsWithAndWithoutTheWeights) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    Case c;
    c.batch = 2, c.kv_heads = 2, c.heads = 8, c.depth = 64, c.value_dim = 48;
    Grow(&c, Data::kNormal, 300, 5);
    std::unique_ptr<KvCache> cache = MakeCache(c, 300, precision);
    ASSERT_TRUE(AppendRange(cache.get(), c, 0, 300).ok());
    const std::vector<float> q = Queries(c, Data::kNormal, 1, 6);
    const auto attend = [&](bool with_weights) {
      std::vector<float> out(static_cast<size_t>(c.batch * c.heads * c.value_dim), -1.0f);
      std::vector<float> w(static_cast<size_t>(c.batch * c.heads * 300));
      const Status s =
          cache->Attend(DefaultEngine(), ConstTensor(q.data(), {c.batch, 1, c.heads, c.depth}),
                        Tensor(out.data(), {c.batch, 1, c.heads, c.value_dim}),
                        with_weights ? Tensor(w.data(), {c.batch, c.heads, 1, 300}) : Tensor());
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    };
    const std::vector<float> with = attend(true), without = attend(false);
    EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * sizeof(float)), 0)
        << PrecisionName(precision);
  }
}

// A bf16 pool: blocks of whole pages of words (twice fp32's positions), the
// bytes held half of fp32's, and the bits of the same cache without a pool.
TEST(KvCachePrecision, Bf16PoolHoldsHalfTheBytesAndGivesTheSameBits) {
  EXPECT_EQ(KvCache::BlockPositionsMultiple(64, 64, Precision::kBf16),
            2 * KvCache::BlockPositionsMultiple(64, 64, Precision::kFp32));
  Case c;
  c.batch = 2, c.kv_heads = 2, c.heads = 4, c.depth = 64, c.value_dim = 64;
  Grow(&c, Data::kNormal, 300, 13);
  const int64_t multiple = KvCache::BlockPositionsMultiple(64, 64, Precision::kBf16);
  KvCacheShape shape{c.batch, 300, c.kv_heads, c.depth, c.value_dim};
  shape.precision = Precision::kBf16;
  shape.block_positions = multiple;
  shape.blocks = 2 * ((300 + multiple - 1) / multiple);
  std::unique_ptr<KvCache> pooled;
  ASSERT_TRUE(KvCache::Create(shape, &pooled).ok());
  std::unique_ptr<KvCache> own = MakeCache(c, 300, Precision::kBf16);
  std::unique_ptr<KvCache> fp32 = MakeCache(c, 300, Precision::kFp32);
  for (KvCache* cache : {pooled.get(), own.get(), fp32.get()}) {
    ASSERT_TRUE(AppendRange(cache, c, 0, 300).ok());
  }
  size_t bytes_bf16 = 0, bytes_fp32 = 0;
  for (const auto& [first, bytes] : internal::KvCacheBytes::Held(*pooled)) bytes_bf16 += bytes;
  for (const auto& [first, bytes] : internal::KvCacheBytes::Held(*fp32)) bytes_fp32 += bytes;
  EXPECT_EQ(bytes_bf16 * 2, bytes_fp32);
  EXPECT_EQ(bytes_bf16, static_cast<size_t>(2 * 300 * 2 * (64 + 64) * 2));
  ExpectPoolGivesOwnBitsThroughAClear(pooled.get(), own.get(), c);
}

// A precision that is none, queries whose heads the cache's do not divide,
// and a bf16 block size that is fp32's but not whole pages of words: each
// refused with the argument named, nothing written.
TEST(KvCachePrecision, RefusesBadPrecisionsHeadsAndBlocks) {
  KvCacheShape shape{1, 8, 2, 64, 64};
  shape.precision = static_cast<Precision>(7);
  std::unique_ptr<KvCache> cache;
  Status s = KvCache::Create(shape, &cache);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("precision is 7"), std::string::npos) << s.message();
  EXPECT_EQ(cache, nullptr);

  shape.precision = Precision::kBf16;
  const int64_t fp32_multiple = KvCache::BlockPositionsMultiple(64, 64, Precision::kFp32);
  shape.block_positions = fp32_multiple;
  shape.blocks = 4;
  s = KvCache::Create(shape, &cache);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("multiple of " + std::to_string(2 * fp32_multiple)), std::string::npos)
      << s.message();

  shape.block_positions = shape.blocks = 0;
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const std::vector<float> k = RandomFloats(2 * 64, 1);
  ASSERT_TRUE(
      cache->Append(ConstTensor(k.data(), {1, 1, 2, 64}), ConstTensor(k.data(), {1, 1, 2, 64}))
          .ok());
  const std::vector<float> q = RandomFloats(3 * 64, 2);
  std::vector<float> out(3 * 64, 5.0f);
  s = cache->Attend(DefaultEngine(), ConstTensor(q.data(), {1, 1, 3, 64}),
                    Tensor(out.data(), {1, 1, 3, 64}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("KvCache: queries (1, 1, 3, 64) have 3 heads"), std::string::npos)
      << s.message();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 5.0f; }));
}

// What Attend refuses is named as the call the caller made, KvCache, in
// any precision (the fp32 cache runs the multi-head op underneath).
TEST(KvCachePrecision, AttendNamesTheCacheInItsMessages) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kInt8}) {
    KvCacheShape shape{1, 8, 1, 16, 16};
    shape.precision = precision;
    std::unique_ptr<KvCache> cache;
    ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
    const std::vector<float> k = RandomFloats(2 * 16, 1);
    ASSERT_TRUE(
        cache->Append(ConstTensor(k.data(), {1, 2, 1, 16}), ConstTensor(k.data(), {1, 2, 1, 16}))
            .ok());
    const std::vector<float> q = RandomFloats(2 * 16, 2);
    std::vector<float> out(2 * 16, 5.0f);
    const Status s = cache->Attend(DefaultEngine(), ConstTensor(q.data(), {1, 1, 2, 16}),
                                   Tensor(out.data(), {1, 1, 2, 8}, {32, 16, 8, 1}));
    EXPECT_EQ(s.message(),
              "KvCache: out has shape (1, 1, 2, 8) but must be (B, N, Hq, Dv) = (1, 1, 2, 16)")
        << PrecisionName(precision);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 5.0f; }));
  }
}

}  // namespace
}  // namespace attnscore::test
