// A long run of mixed calls, as a server makes them: the process's resident
// memory must stay flat once warm (the plan cache is bounded, nothing leaks).
// Lengths vary call to call, so the engine keeps meeting new matmul shapes
// and its plan cache fills, clears and refills many times over.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "attnscore/additive.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

#if defined(__SANITIZE_ADDRESS__)
// ASan holds freed memory in quarantine (up to 256 MiB), so resident memory
// grows by design there; LeakSanitizer checks for leaks at exit instead.
constexpr bool kMeasureResidentMemory = false;
#else
constexpr bool kMeasureResidentMemory = true;
#endif

int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

TEST(Soak, HundredThousandMixedCallsKeepMemoryFlat) {
  constexpr int kCalls = 100000, kWarmUp = 20000, kSamples = 8;
  const Engine& engine = DefaultEngine();
  std::unique_ptr<AdditiveAttention> additive;
  const std::vector<float> w_q = RandomFloats(6 * 8, 1, 0.4f), w_k = RandomFloats(6 * 4, 2, 0.4f),
                           w_v = RandomFloats(6, 3, 0.4f);
  ASSERT_TRUE(AdditiveAttention::Create(ConstTensor(w_q.data(), {6, 8}), ConstTensor(w_k.data(), {6, 4}),
                                        ConstTensor(w_v.data(), {1, 6}), &additive)
                  .ok());
  // Inputs sized for the largest call; each call views a prefix.
  constexpr int64_t kMaxBatch = 3, kMaxQueries = 12, kMaxKeys = 96, kDepth = 8, kValueDim = 4;
  const std::vector<float> q = RandomFloats(kMaxBatch * kMaxQueries * kMaxKeys, 4),
                           k = RandomFloats(kMaxBatch * kMaxKeys * kDepth, 5),
                           v = RandomFloats(kMaxBatch * kMaxKeys * kValueDim, 6);
  std::vector<float> out(kMaxBatch * kMaxQueries * kMaxKeys);
  std::mt19937 rng(7);
  int64_t warm = 0, worst = 0;
  int failures = 0;
  for (int n = 0; n < kCalls; ++n) {
    const int64_t batch = 1 + static_cast<int64_t>(rng() % kMaxBatch);
    const int64_t queries = 4 + static_cast<int64_t>(rng() % (kMaxQueries - 3));  // the matmul path
    const int64_t keys = 8 + static_cast<int64_t>(rng() % (kMaxKeys - 7));
    std::vector<int64_t> lens(static_cast<size_t>(batch));
    for (int64_t& l : lens) l = static_cast<int64_t>(rng() % static_cast<uint32_t>(keys + 2));
    const ValidLens valid = ValidLens::PerBatch(lens.data(), batch);
    Status s;
    switch (n % 3) {
      case 0:
        s = engine.MaskedSoftmax(ConstTensor(q.data(), {batch, queries, keys}), valid,
                                 Tensor(out.data(), {batch, queries, keys}));
        break;
      case 1:
        s = engine.DotProductAttention(ConstTensor(q.data(), {batch, queries, kDepth}),
                                       ConstTensor(k.data(), {batch, keys, kDepth}),
                                       ConstTensor(v.data(), {batch, keys, kValueDim}), valid,
                                       Tensor(out.data(), {batch, queries, kValueDim}));
        break;
      default:
        s = additive->Forward(engine, ConstTensor(q.data(), {batch, queries, 8}),
                              ConstTensor(k.data(), {batch, keys, 4}),
                              ConstTensor(v.data(), {batch, keys, kValueDim}), valid,
                              Tensor(out.data(), {batch, queries, kValueDim}));
    }
    failures += !s.ok();
    if (n + 1 == kWarmUp) warm = ResidentBytes();
    if (n + 1 > kWarmUp && (n + 1 - kWarmUp) % ((kCalls - kWarmUp) / kSamples) == 0) {
      worst = std::max(worst, ResidentBytes());
    }
  }
  EXPECT_EQ(failures, 0);
  std::printf("resident memory: %.1f MiB after %d calls, at most %.1f MiB after %d\n",
              static_cast<double>(warm) / (1 << 20), kWarmUp,
              static_cast<double>(worst) / (1 << 20), kCalls);
  if (kMeasureResidentMemory) {
    EXPECT_GT(warm, 0);
    EXPECT_GT(worst, 0);
    // Flat: 0.2 MiB of growth was measured; 4 MiB over 80,000 calls would
    // be a leak of 50 bytes a call.
    EXPECT_LE(worst - warm, int64_t{4} << 20);
  }
}

}  // namespace
}  // namespace attnscore::test
