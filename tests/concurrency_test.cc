// One Engine (and one model) shared by several threads issuing mixed ops and
// shapes: every call must give bitwise the result of the same call made alone.
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "attnscore/additive.h"
#include "attnscore/bilinear.h"
#include "attnscore/concat.h"
#include "attnscore/kv_cache.h"
#include "attnscore/multihead.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

struct Call {
  bool dot;
  int64_t batch, queries, keys, depth, value_dim;
  std::vector<float> q, k, v;
  std::vector<int64_t> lens;  // per batch entry
  std::vector<float> expected;

  std::vector<float> Run(const Engine& engine) const {
    std::vector<float> out(static_cast<size_t>(batch * queries * (dot ? value_dim : keys)));
    const ValidLens valid = ValidLens::PerBatch(lens.data(), batch);
    const Status s =
        dot ? engine.DotProductAttention(ConstTensor(q.data(), {batch, queries, depth}),
                                         ConstTensor(k.data(), {batch, keys, depth}),
                                         ConstTensor(v.data(), {batch, keys, value_dim}), valid,
                                         Tensor(out.data(), {batch, queries, value_dim}))
            : engine.MaskedSoftmax(ConstTensor(q.data(), {batch, queries, keys}), valid,
                                   Tensor(out.data(), {batch, queries, keys}));
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }
};

std::vector<Call> MakeCalls() {
  std::vector<Call> calls;
  uint32_t seed = 1;
  for (int n = 0; n < 12; ++n) {
    Call c;
    c.dot = n % 3 != 0;
    c.batch = 1 + n % 3;
    c.queries = 1 + 7 * (n % 4);
    c.keys = 5 + 13 * n;
    c.depth = 8 + 8 * (n % 2);
    c.value_dim = 3 + n % 5;
    const int64_t q_size = c.dot ? c.batch * c.queries * c.depth : c.batch * c.queries * c.keys;
    c.q = RandomFloats(static_cast<size_t>(q_size), seed++);
    c.k = RandomFloats(static_cast<size_t>(c.batch * c.keys * c.depth), seed++);
    c.v = RandomFloats(static_cast<size_t>(c.batch * c.keys * c.value_dim), seed++);
    for (int64_t b = 0; b < c.batch; ++b) c.lens.push_back((b * 7 + n) % (c.keys + 2));
    calls.push_back(std::move(c));
  }
  return calls;
}

using Calls = std::vector<std::function<std::vector<float>()>>;

// Runs each of `calls` serially, then from `threads` threads at once, `rounds`
// calls each, and expects every concurrent result to equal the serial one
// bit for bit.
void ExpectSerialResultsUnderLoad(const Calls& calls, int thread_count = 4, int rounds = 60) {
  std::vector<std::vector<float>> expected;
  for (const auto& call : calls) expected.push_back(call());
  // Threads walk the calls at different prime strides, larger than any call
  // list here, so each visits every call and different ops and shapes overlap.
  constexpr size_t kStrides[] = {29, 31, 37, 41, 43, 47, 53, 59};
  std::vector<int> mismatches(static_cast<size_t>(thread_count), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < thread_count; ++t) {
    threads.emplace_back([&, t] {
      const size_t stride = kStrides[static_cast<size_t>(t) % std::size(kStrides)];
      for (int round = 0; round < rounds; ++round) {
        const size_t n = (static_cast<size_t>(round) * stride + static_cast<size_t>(t)) % calls.size();
        const std::vector<float> got = calls[n]();
        if (got.size() != expected[n].size() ||
            std::memcmp(got.data(), expected[n].data(), got.size() * sizeof(float)) != 0) {
          ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < thread_count; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

TEST(Concurrency, SharedEngineGivesTheSerialResults) {
  const std::vector<Call> calls = MakeCalls();
  Calls runs;
  for (const Call& c : calls) runs.push_back([&c] { return c.Run(DefaultEngine()); });
  ExpectSerialResultsUnderLoad(runs);
}

// Attn(Dq 6, Dk 5, M 17, Dv 4, O 3).
constexpr int64_t kDq = 6, kDk = 5, kRows = 17, kDv = 4, kOut = 3;

std::unique_ptr<ConcatAttention> MakeConcatModel() {
  const std::vector<float> attn_w = RandomFloats(kRows * (kDq + kDk), 1, 0.3f),
                           attn_b = RandomFloats(kRows, 2, 0.3f),
                           combine_w = RandomFloats(kOut * (kDq + kDv), 3, 0.3f),
                           combine_b = RandomFloats(kOut, 4, 0.3f);
  std::unique_ptr<ConcatAttention> model;
  const Status s = ConcatAttention::Create(kDq, ConstTensor(attn_w.data(), {kRows, kDq + kDk}),
                                           ConstTensor(attn_b.data(), {kRows}),
                                           ConstTensor(combine_w.data(), {kOut, kDq + kDv}),
                                           ConstTensor(combine_b.data(), {kOut}), &model);
  EXPECT_TRUE(s.ok()) << s.message();
  return model;
}

// Calls of 1 to 3 entries with 1 to 22 queries, so both ways of W V (row by
// row, oneDNN) run side by side; each returns out and the weights.
Calls ConcatCalls(const ConcatAttention& model, const Engine& engine) {
  struct Inputs {
    int64_t batch, queries;
    std::vector<float> q, k, v;
    std::vector<int64_t> lens;
  };
  Calls runs;
  for (int n = 0; n < 8; ++n) {
    auto in = std::make_shared<Inputs>(Inputs{1 + n % 3, 1 + 7 * (n % 4), {}, {}, {}, {}});
    in->q = RandomFloats(static_cast<size_t>(in->batch * in->queries * kDq), 10 + n);
    in->k = RandomFloats(static_cast<size_t>(in->batch * in->queries * kDk), 20 + n);
    in->v = RandomFloats(static_cast<size_t>(in->batch * kRows * kDv), 30 + n);
    for (int64_t b = 0; b < in->batch; ++b) in->lens.push_back((b * 7 + n) % (kRows + 2));
    runs.push_back([in, &model, &engine] {
      std::vector<float> out(static_cast<size_t>(in->batch * in->queries * (kOut + kRows)));
      const Status s = model.Forward(
          engine, ConstTensor(in->q.data(), {in->batch, in->queries, kDq}),
          ConstTensor(in->k.data(), {in->batch, in->queries, kDk}),
          ConstTensor(in->v.data(), {in->batch, kRows, kDv}),
          ValidLens::PerBatch(in->lens.data(), in->batch),
          Tensor(out.data(), {in->batch, in->queries, kOut}),
          Tensor(out.data() + in->batch * in->queries * kOut, {in->batch, in->queries, kRows}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
  }
  return runs;
}

// d2l's AdditiveAttention with H = 9, Dq = 7, Dk = 5; calls of 1 to 3 entries,
// 1 to 19 queries and 3 to 63 keys, per-batch lengths; out and weights.
Calls AdditiveCalls(const AdditiveAttention& model, const Engine& engine) {
  struct Inputs {
    int64_t batch, queries, keys, value_dim;
    std::vector<float> q, k, v;
    std::vector<int64_t> lens;
  };
  Calls runs;
  for (int n = 0; n < 8; ++n) {
    auto in = std::make_shared<Inputs>(Inputs{1 + n % 3, 1 + 6 * (n % 4), 3 + 20 * (n % 4), 2 + n % 3,
                                              {}, {}, {}, {}});
    in->q = RandomFloats(static_cast<size_t>(in->batch * in->queries * 7), 40 + n);
    in->k = RandomFloats(static_cast<size_t>(in->batch * in->keys * 5), 50 + n);
    in->v = RandomFloats(static_cast<size_t>(in->batch * in->keys * in->value_dim), 60 + n);
    for (int64_t b = 0; b < in->batch; ++b) in->lens.push_back((b * 5 + n) % (in->keys + 2));
    runs.push_back([in, &model, &engine] {
      const int64_t outs = in->batch * in->queries * in->value_dim;
      std::vector<float> out(static_cast<size_t>(outs + in->batch * in->queries * in->keys));
      const Status s = model.Forward(
          engine, ConstTensor(in->q.data(), {in->batch, in->queries, 7}),
          ConstTensor(in->k.data(), {in->batch, in->keys, 5}),
          ConstTensor(in->v.data(), {in->batch, in->keys, in->value_dim}),
          ValidLens::PerBatch(in->lens.data(), in->batch),
          Tensor(out.data(), {in->batch, in->queries, in->value_dim}),
          Tensor(out.data() + outs, {in->batch, in->queries, in->keys}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
  }
  return runs;
}

std::unique_ptr<AdditiveAttention> MakeAdditiveModel() {
  const std::vector<float> w_q = RandomFloats(9 * 7, 5, 0.4f), w_k = RandomFloats(9 * 5, 6, 0.4f),
                           w_v = RandomFloats(9, 7, 0.4f);
  std::unique_ptr<AdditiveAttention> model;
  const Status s = AdditiveAttention::Create(ConstTensor(w_q.data(), {9, 7}), ConstTensor(w_k.data(), {9, 5}),
                                             ConstTensor(w_v.data(), {1, 9}), &model);
  EXPECT_TRUE(s.ok()) << s.message();
  return model;
}

TEST(Concurrency, SharedConcatModelGivesTheSerialResults) {
  const std::unique_ptr<ConcatAttention> model = MakeConcatModel();
  ASSERT_NE(model, nullptr);
  ExpectSerialResultsUnderLoad(ConcatCalls(*model, DefaultEngine()));
}

// Every call of the mixed load, on `engine`.
Calls MixedCalls(const std::vector<Call>& calls, const ConcatAttention& concat,
                 const AdditiveAttention& additive, const Engine& engine) {
  Calls runs;
  for (const Call& c : calls) runs.push_back([&c, &engine] { return c.Run(engine); });
  for (auto& run : ConcatCalls(concat, engine)) runs.push_back(std::move(run));
  for (auto& run : AdditiveCalls(additive, engine)) runs.push_back(std::move(run));
  return runs;
}

// A server's load: one engine and one model of each kind shared by 8 threads
// issuing every op on mixed shapes, 10,000 calls in all. (tools/check runs
// it under ThreadSanitizer too, where its engine's 1 thread keeps OpenMP,
// which TSan cannot see into, out of the way.)
TEST(Concurrency, EightThreadsTenThousandMixedCallsGiveTheSerialResults) {
  const std::unique_ptr<ConcatAttention> concat = MakeConcatModel();
  const std::unique_ptr<AdditiveAttention> additive = MakeAdditiveModel();
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(additive, nullptr);
  const std::vector<Call> calls = MakeCalls();
  ExpectSerialResultsUnderLoad(MixedCalls(calls, *concat, *additive, DefaultEngine()),
                               /*thread_count=*/8, /*rounds=*/1250);
}

// The ops and models with heads, and bilinear attention, shared by 4
// threads: the engine's multi-head op (GQA, causal), one d2l
// MultiHeadAttention module (H = 8, 2 heads, biases), one KvCache (filled
// first; threads only attend) and one BilinearAttention (Dq 6, Dk 5), on
// mixed shapes, with out and weights.
TEST(Concurrency, SharedHeadsCacheAndBilinearGiveTheSerialResults) {
  const Engine& engine = DefaultEngine();
  const std::vector<float> w = RandomFloats(8 * 8, 70, 0.3f), bias = RandomFloats(8, 71, 0.3f),
                           bilinear_w = RandomFloats(6 * 5, 72, 0.3f);
  MultiHeadWeights weights;
  weights.w_q = weights.w_k = weights.w_v = weights.w_o = ConstTensor(w.data(), {8, 8});
  weights.b_q = weights.b_k = weights.b_v = weights.b_o = ConstTensor(bias.data(), {8});
  std::unique_ptr<MultiHeadAttention> module;
  std::unique_ptr<BilinearAttention> bilinear;
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(MultiHeadAttention::Create(2, weights, &module).ok());
  ASSERT_TRUE(BilinearAttention::Create(ConstTensor(bilinear_w.data(), {6, 5}), &bilinear).ok());
  constexpr int64_t kSequences = 2, kCached = 37, kHq = 4, kHkv = 2, kD = 8;
  const KvCacheShape shape{
      .batch = kSequences, .capacity = 64, .kv_heads = kHkv, .key_dim = kD, .value_dim = kD};
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const std::vector<float> cached_k = RandomFloats(kSequences * kCached * kHkv * kD, 73),
                           cached_v = RandomFloats(kSequences * kCached * kHkv * kD, 74);
  ASSERT_TRUE(cache
                  ->Append(ConstTensor(cached_k.data(), {kSequences, kCached, kHkv, kD}),
                           ConstTensor(cached_v.data(), {kSequences, kCached, kHkv, kD}))
                  .ok());

  struct Inputs {
    int64_t batch, queries, keys;
    std::vector<float> q, k, v, cache_q;
    std::vector<int64_t> lens;
  };
  Calls runs;
  // N of 1, 6 and 11 queries against M of 3, 20 and 7 keys (so M < N once).
  constexpr int64_t kKeys[] = {3, 20, 7};
  for (int n = 0; n < 6; ++n) {
    auto in = std::make_shared<Inputs>(
        Inputs{1 + n % 2, 1 + 5 * (n % 3), kKeys[n % 3], {}, {}, {}, {}, {}});
    const int64_t b = in->batch, queries = in->queries, keys = in->keys;
    in->q = RandomFloats(static_cast<size_t>(b * queries * 8), 80 + n);
    in->k = RandomFloats(static_cast<size_t>(b * keys * 8), 90 + n);
    in->v = RandomFloats(static_cast<size_t>(b * keys * 8), 100 + n);
    in->cache_q = RandomFloats(static_cast<size_t>(kSequences * queries * kHq * kD), 110 + n);
    for (int64_t e = 0; e < b; ++e) in->lens.push_back((e * 5 + n) % (keys + 2));
    const ValidLens lens = ValidLens::PerBatch(in->lens.data(), b);
    // The op: Q (B, N, 4, 2), K (B, M, 2, 2), V (B, M, 2, 4), causal from the bottom right
    // where M >= N, else from the top left.
    runs.push_back([in, lens, &engine] {
      const int64_t b = in->batch, n = in->queries, m = in->keys;
      std::vector<float> out(static_cast<size_t>(b * n * 4 * 4 + b * 4 * n * m));
      MultiHeadOptions options;
      options.causal = m >= n ? Causal::kBottomRight : Causal::kTopLeft;
      const Status s = engine.MultiHeadAttention(
          ConstTensor(in->q.data(), {b, n, 4, 2}), ConstTensor(in->k.data(), {b, m, 2, 2}),
          ConstTensor(in->v.data(), {b, m, 2, 4}), lens, options, Tensor(out.data(), {b, n, 4, 4}),
          Tensor(out.data() + b * n * 16, {b, 4, n, m}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
    runs.push_back([in, lens, &engine, &module] {
      const int64_t b = in->batch, n = in->queries, m = in->keys;
      std::vector<float> out(static_cast<size_t>(b * n * 8 + b * 2 * n * m));
      const Status s = module->Forward(
          engine, ConstTensor(in->q.data(), {b, n, 8}), ConstTensor(in->k.data(), {b, m, 8}),
          ConstTensor(in->v.data(), {b, m, 8}), lens, Causal::kNone, Tensor(out.data(), {b, n, 8}),
          Tensor(out.data() + b * n * 8, {b, 2, n, m}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
    // Bilinear: Q (B, N, 6) and K (B, M, 5) taken from the same floats, V (B, M, 8).
    runs.push_back([in, lens, &engine, &bilinear] {
      const int64_t b = in->batch, n = in->queries, m = in->keys;
      std::vector<float> out(static_cast<size_t>(b * n * 8 + b * n * m));
      const Status s = bilinear->Forward(
          engine, ConstTensor(in->q.data(), {b, n, 6}), ConstTensor(in->k.data(), {b, m, 5}),
          ConstTensor(in->v.data(), {b, m, 8}), lens, Tensor(out.data(), {b, n, 8}),
          Tensor(out.data() + b * n * 8, {b, n, m}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
    // The cache: the last N of each sequence's cached keys attend (N < 37).
    runs.push_back([in, &engine, &cache] {
      const int64_t n = in->queries;
      std::vector<float> out(
          static_cast<size_t>(kSequences * n * kHq * kD + kSequences * kHq * n * kCached));
      const Status s = cache->Attend(
          engine, ConstTensor(in->cache_q.data(), {kSequences, n, kHq, kD}),
          Tensor(out.data(), {kSequences, n, kHq, kD}),
          Tensor(out.data() + kSequences * n * kHq * kD, {kSequences, kHq, n, kCached}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
  }
  ExpectSerialResultsUnderLoad(runs);
}

// The same load on a 2-thread engine gives the 1-thread results bit for bit,
// alone and shared by 4 threads.
TEST(Concurrency, TwoThreadEngineGivesTheOneThreadResults) {
  const std::unique_ptr<ConcatAttention> concat = MakeConcatModel();
  const std::unique_ptr<AdditiveAttention> additive = MakeAdditiveModel();
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(additive, nullptr);
  EngineOptions two_threads;
  two_threads.threads = 2;
  two_threads.isa = DefaultEngine().options().isa;
  std::unique_ptr<Engine> wide;
  ASSERT_TRUE(Engine::Create(two_threads, &wide).ok());
  const std::vector<Call> calls = MakeCalls();
  const Calls one = MixedCalls(calls, *concat, *additive, DefaultEngine());
  const Calls two = MixedCalls(calls, *concat, *additive, *wide);
  for (size_t n = 0; n < one.size(); ++n) {
    const std::vector<float> a = one[n](), b = two[n]();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "call " << n;
  }
  ExpectSerialResultsUnderLoad(two);
}

// Two engines, each with its own workspaces, serve calls at once from the
// same threads: every result is the serial one. Under ThreadSanitizer (1-
// thread engines, see tools/check) this checks that calls share no memory
// but what they are given.
TEST(Concurrency, TwoEnginesServeAtOnce) {
  const std::unique_ptr<ConcatAttention> concat = MakeConcatModel();
  const std::unique_ptr<AdditiveAttention> additive = MakeAdditiveModel();
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(additive, nullptr);
  const std::unique_ptr<Engine> first = EngineWithThreads(1), second = EngineWithThreads(1);
  const std::vector<Call> calls = MakeCalls();
  Calls both = MixedCalls(calls, *concat, *additive, *first);
  for (auto& call : MixedCalls(calls, *concat, *additive, *second)) both.push_back(call);
  ExpectSerialResultsUnderLoad(both);
}

// The same with engines of 1 and 2 threads: a call's workspace has a buffer
// set per thread of its engine, and the two engines' calls interleave.
// (Not under ThreadSanitizer: libgomp's barriers are not instrumented.)
TEST(Concurrency, TwoThreadAndOneThreadEnginesServeAtOnce) {
  const std::unique_ptr<ConcatAttention> concat = MakeConcatModel();
  const std::unique_ptr<AdditiveAttention> additive = MakeAdditiveModel();
  ASSERT_NE(concat, nullptr);
  ASSERT_NE(additive, nullptr);
  const std::unique_ptr<Engine> one = EngineWithThreads(1), two = EngineWithThreads(2);
  const std::vector<Call> calls = MakeCalls();
  Calls both = MixedCalls(calls, *concat, *additive, *one);
  const Calls wide = MixedCalls(calls, *concat, *additive, *two);
  for (size_t n = 0; n < wide.size(); ++n) {
    const std::vector<float> a = both[n](), b = wide[n]();
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "call " << n;
  }
  for (const auto& call : wide) both.push_back(call);
  ExpectSerialResultsUnderLoad(both);
}

}  // namespace
}  // namespace attnscore::test
