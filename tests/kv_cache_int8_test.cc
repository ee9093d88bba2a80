// A KvCache that holds int8 codes (KvCacheShape::precision = kInt8,
// docs/semantics.md section 5.3): its error against float64 attention over
// the caller's fp32 keys and values, set beside bf16 storage's, on the data
// the docs name; attention over exactly the values its codes stand for
// (coded here from the docs' definition, the engine's coder not used), as
// positions arrive in appends of any size; its pool and its bytes; its
// refusals (its bits for any thread count: kv_cache_precision_test.cc).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "api/kv_cache_bytes.h"
#include "attnscore/attnscore.h"
#include "kv_cache_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

constexpr int64_t kGroup = 16;  // key positions that share their scales

// The case with each key and value replaced by what its int8 code stands
// for: keys per head in groups of kGroup positions, per channel lo = least,
// step = (greatest − lo) / 255, code = nearest of 0..255 to (x − lo) /
// step; values per position and head, scale = max |x| / 127, code = nearest
// of −127..127 to x / scale.
Case Coded(const Case& c) {
  Case coded = c;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t held = static_cast<int64_t>(c.k[b].size()) / (c.kv_heads * c.depth);
    const auto key = [&](int64_t t, int64_t g, int64_t d) -> float& {
      return coded.k[b][static_cast<size_t>((t * c.kv_heads + g) * c.depth + d)];
    };
    for (int64_t g = 0; g < c.kv_heads; ++g) {
      for (int64_t first = 0; first < held; first += kGroup) {
        const int64_t last = std::min(held, first + kGroup);
        for (int64_t d = 0; d < c.depth; ++d) {
          float lo = key(first, g, d), hi = lo;
          for (int64_t t = first; t < last; ++t) {
            lo = std::min(lo, key(t, g, d));
            hi = std::max(hi, key(t, g, d));
          }
          const auto step = static_cast<float>((static_cast<double>(hi) - lo) / 255.0);
          for (int64_t t = first; t < last; ++t) {
            const double code =
                step > 0
                    ? std::clamp(std::nearbyint((key(t, g, d) - double{lo}) / step), 0.0, 255.0)
                    : 0.0;
            key(t, g, d) = static_cast<float>(lo + static_cast<double>(step) * code);
          }
        }
      }
      for (int64_t t = 0; t < held; ++t) {
        float* row = coded.v[b].data() + (t * c.kv_heads + g) * c.value_dim;
        double largest = 0;
        for (int64_t e = 0; e < c.value_dim; ++e)
          largest = std::max(largest, std::abs(double{row[e]}));
        const auto scale = static_cast<float>(largest / 127.0);
        for (int64_t e = 0; e < c.value_dim; ++e) {
          const double code =
              scale > 0 ? std::clamp(std::nearbyint(row[e] / double{scale}), -127.0, 127.0) : 0.0;
          row[e] = static_cast<float>(static_cast<double>(scale) * code);
        }
      }
    }
  }
  return coded;
}

// The bound of docs/semantics.md section 5.3: after a 2,000-position
// append and then one position at a time, each decoding step's error
// against float64 math on the fp32 keys and values is at most 3x the error
// of bf16 storage, or 3e-3 · std(V), whichever is larger; on sharp queries
// 4x (this data's first step errs 3.9x bf16's: 8-bit codes over a group's
// range against bf16's 8 bits of each value).
TEST(KvCacheInt8, DecodeErrsWithinItsBoundBesideBf16Storage) {
  for (Data data :
       {Data::kNormal, Data::kOutlierChannel, Data::kScaledPositions, Data::kSharpQueries}) {
    ForEachDecodeStep(Precision::kInt8, data, [&](int64_t step, const StepErrors& e) {
      const double times = data == Data::kSharpQueries ? 4 : 3;
      const double bound = std::max(times * e.bf16, 3e-3 * e.value_std);
      EXPECT_LE(e.error, bound) << Name(data) << ", step " << step << ": error " << e.error
                                << " against bf16 storage's " << e.bf16;
    });
  }
}

// Positions arriving in appends of any size (a group filled across several,
// the newest group open) are held as the docs' codes of their keys as
// given: a prefill of N queries with weights is float64 math on the coded
// keys and values, within float32's accumulation error.
TEST(KvCacheInt8, AttendsToWhatTheCodesStandForAsPositionsArrive) {
  Case c;
  c.batch = 2, c.kv_heads = 2, c.heads = 4, c.depth = 40, c.value_dim = 24;  // tails on every ISA
  Grow(&c, Data::kOutlierChannel, 75, 5);
  std::unique_ptr<KvCache> cache = MakeCache(c, 80, Precision::kInt8);
  for (const auto& [from, to] :
       {std::pair{0, 5}, std::pair{5, 6}, std::pair{6, 37}, std::pair{37, 75}}) {
    ASSERT_TRUE(AppendRange(cache.get(), c, from, to).ok());
    const int64_t n = std::min<int64_t>(to, 6);
    const std::vector<float> q = Queries(c, Data::kNormal, n, static_cast<uint32_t>(to));
    std::vector<float> out(static_cast<size_t>(c.batch * n * c.heads * c.value_dim));
    std::vector<float> weights(static_cast<size_t>(c.batch * c.heads * n * to), -1.0f);
    const Status s =
        cache->Attend(DefaultEngine(), ConstTensor(q.data(), {c.batch, n, c.heads, c.depth}),
                      Tensor(out.data(), {c.batch, n, c.heads, c.value_dim}),
                      Tensor(weights.data(), {c.batch, c.heads, n, to}));
    ASSERT_TRUE(s.ok()) << s.message();
    Case seen = c;
    for (int64_t b = 0; b < c.batch; ++b) {
      seen.k[b].resize(static_cast<size_t>(to * c.kv_heads * c.depth));
      seen.v[b].resize(static_cast<size_t>(to * c.kv_heads * c.value_dim));
    }
    EXPECT_LE(MaxError(out, Reference(Coded(seen), q, n, /*rounded=*/false)), 2e-5)
        << "after positions " << from << ".." << to;
    for (int64_t row = 0; row < c.batch * c.heads * n; ++row) {
      const float* w = weights.data() + row * to;
      double sum = 0;
      for (int64_t j = 0; j < to; ++j) sum += w[j];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

// An int8 pool: blocks of whole pages of codes and whole key groups; the
// bytes held are the codes and their scales; the bits are those of the same
// cache without a pool, also after a sequence is cleared and refilled.
TEST(KvCacheInt8, PoolHoldsCodesAndScalesAndGivesTheSameBits) {
  const int64_t multiple = KvCache::BlockPositionsMultiple(64, 64, Precision::kInt8);
  EXPECT_EQ(multiple % kGroup, 0);
  EXPECT_EQ(multiple * 64 % static_cast<int64_t>(::sysconf(_SC_PAGESIZE)), 0);
  Case c;
  c.batch = 2, c.kv_heads = 2, c.heads = 4, c.depth = 64, c.value_dim = 64;
  Grow(&c, Data::kNormal, 300, 13);
  KvCacheShape shape{c.batch, 300, c.kv_heads, c.depth, c.value_dim};
  shape.precision = Precision::kInt8;
  shape.block_positions = multiple;
  shape.blocks = 2 * ((300 + multiple - 1) / multiple);
  std::unique_ptr<KvCache> pooled;
  ASSERT_TRUE(KvCache::Create(shape, &pooled).ok());
  std::unique_ptr<KvCache> own = MakeCache(c, 300, Precision::kInt8);
  for (KvCache* cache : {pooled.get(), own.get()}) ASSERT_TRUE(AppendRange(cache, c, 0, 300).ok());
  size_t held = 0;
  for (const auto& [first, bytes] : internal::KvCacheBytes::Held(*pooled)) held += bytes;
  // Per sequence and head: 300 · (D + Dv) codes, 19 groups' lo and step
  // per channel, 300 value scales.
  EXPECT_EQ(held, static_cast<size_t>(2 * 2 * (300 * 128 + 19 * 2 * 64 * 4 + 300 * 4)));
  ExpectPoolGivesOwnBitsThroughAClear(pooled.get(), own.get(), c);
}

// A key or value that is not finite is refused, its index named, and the
// cache is left as it was; a block size that is not whole key groups and
// pages of codes is refused naming int8; an engine refuses int8.
TEST(KvCacheInt8, RefusesWhatItCannotCode) {
  Case c;
  c.batch = 1, c.kv_heads = 2, c.heads = 2, c.depth = 16, c.value_dim = 16;
  Grow(&c, Data::kNormal, 20, 3);
  std::unique_ptr<KvCache> cache = MakeCache(c, 40, Precision::kInt8);
  ASSERT_TRUE(AppendRange(cache.get(), c, 0, 10).ok());
  const std::vector<float> q = Queries(c, Data::kNormal, 1, 5);
  const ConstTensor queries(q.data(), {1, 1, 2, 16});
  std::vector<float> before(32), after(32);
  ASSERT_TRUE(cache->Attend(DefaultEngine(), queries, Tensor(before.data(), {1, 1, 2, 16})).ok());
  for (const float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (const bool in_keys : {true, false}) {
      std::vector<float> k(c.k[0].begin() + 10 * 32, c.k[0].begin() + 13 * 32);
      std::vector<float> v(c.v[0].begin() + 10 * 32, c.v[0].begin() + 13 * 32);
      (in_keys ? k : v)[2 * 32 + 16 + 7] = bad;  // position 2, head 1, element 7
      const Status s =
          cache->AppendTo(0, ConstTensor(k.data(), {3, 2, 16}), ConstTensor(v.data(), {3, 2, 16}));
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(std::string(in_keys ? "keys" : "values") + "[2, 1, 7] is " +
                                 (std::isnan(bad) ? "nan" : "inf")),
                std::string::npos)
          << s.message();
      EXPECT_NE(s.message().find("int8 cache holds finite"), std::string::npos) << s.message();
      EXPECT_EQ(cache->length(0), 10);
    }
  }
  ASSERT_TRUE(cache->Attend(DefaultEngine(), queries, Tensor(after.data(), {1, 1, 2, 16})).ok());
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);

  KvCacheShape shape{1, 64, 2, 64, 64};
  shape.precision = Precision::kInt8;
  shape.block_positions =
      KvCache::BlockPositionsMultiple(64, 64, Precision::kBf16) / 2 + kGroup / 2;
  shape.blocks = 4;
  std::unique_ptr<KvCache> pooled;
  const Status s = KvCache::Create(shape, &pooled);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("in int8"), std::string::npos) << s.message();
  EXPECT_EQ(pooled, nullptr);

  EngineOptions options;
  options.precision = Precision::kInt8;
  std::unique_ptr<Engine> engine;
  const Status refused = Engine::Create(options, &engine);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("int8, which only a KvCache holds"), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace attnscore::test
