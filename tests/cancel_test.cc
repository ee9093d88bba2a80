// Cancelling calls (attnscore/cancel.h): a cancelled token stops every op
// and model, on each of the dot product's paths, with kCancelled naming the
// call; an uncancelled one changes no bit; scopes nest and end; cache
// appends are never cancelled; a token cancelled from another thread stops
// a long call; the C API's token does the same.
#include "attnscore/cancel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "attnscore/additive.h"
#include "attnscore/c_api.h"
#include "attnscore/engine.h"
#include "attnscore/kv_cache.h"
#include "test_util.h"

namespace attnscore {
namespace {

using test::EngineWithThreads;
using test::RandomFloats;

// A dot-product call of (B, N, M, D = Dv) and its output.
struct DotCall {
  int64_t b, n, m, d;
  std::vector<float> q, k, v, out;
  DotCall(int64_t b_, int64_t n_, int64_t m_, int64_t d_)
      : b(b_),
        n(n_),
        m(m_),
        d(d_),
        q(RandomFloats(b * n * d, 1)),
        k(RandomFloats(b * m * d, 2)),
        v(RandomFloats(b * m * d, 3)),
        out(b * n * d, -7.0f) {}
  Status Run(const Engine& engine) {
    return engine.DotProductAttention(
        ConstTensor(q.data(), {b, n, d}), ConstTensor(k.data(), {b, m, d}),
        ConstTensor(v.data(), {b, m, d}), ValidLens::None(), Tensor(out.data(), {b, n, d}));
  }
};

void ExpectCancelled(const Status& s, const char* op) {
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.message();
  EXPECT_EQ(s.message(), std::string(op) + ": cancelled; its outputs are partly written");
}

// Row path (N <= 3), tile path, gemm path (large), on 1 and 2 threads.
TEST(Cancel, ACancelledTokenStopsTheDotProductOnEveryPath) {
  for (int threads : {1, 2}) {
    auto engine = EngineWithThreads(threads);
    for (auto shape :
         {std::vector<int64_t>{4, 1, 2048, 64}, {2, 64, 300, 32}, {1, 1024, 4096, 64}}) {
      DotCall call(shape[0], shape[1], shape[2], shape[3]);
      CancelToken token;
      token.Cancel();
      CancelScope scope(token);
      ExpectCancelled(call.Run(*engine), "DotProductAttention");
    }
  }
}

TEST(Cancel, AnUncancelledTokenChangesNoBit) {
  auto engine = EngineWithThreads(2);
  DotCall plain(2, 64, 300, 32), checked(2, 64, 300, 32);
  ASSERT_TRUE(plain.Run(*engine).ok());
  CancelToken token;
  CancelScope scope(token);
  ASSERT_TRUE(checked.Run(*engine).ok());
  EXPECT_EQ(0, std::memcmp(plain.out.data(), checked.out.data(), plain.out.size() * 4));
}

TEST(Cancel, OtherOpsModelsAndTheCacheStopToo) {
  auto engine = EngineWithThreads(1);
  CancelToken token;
  token.Cancel();
  const std::vector<float> x = RandomFloats(2 * 8 * 16, 4);
  std::vector<float> y(x.size());
  std::vector<float> w_q = RandomFloats(8 * 6, 5), w_k = RandomFloats(8 * 4, 6),
                     w_v = RandomFloats(8, 7);
  std::unique_ptr<AdditiveAttention> additive;
  ASSERT_TRUE(AdditiveAttention::Create(ConstTensor(w_q.data(), {8, 6}),
                                        ConstTensor(w_k.data(), {8, 4}),
                                        ConstTensor(w_v.data(), {1, 8}), &additive)
                  .ok());
  const std::vector<float> q = RandomFloats(2 * 3 * 6, 8), k = RandomFloats(2 * 5 * 4, 9),
                           v = RandomFloats(2 * 5 * 3, 10);
  std::vector<float> out(2 * 3 * 3);
  KvCacheShape shape{2, 16, 1, 4, 4};
  std::unique_ptr<KvCache> cache;
  ASSERT_TRUE(KvCache::Create(shape, &cache).ok());
  const std::vector<float> kv = RandomFloats(2 * 3 * 4, 11);
  std::vector<float> attended(2 * 1 * 2 * 4);
  const std::vector<float> heads = RandomFloats(attended.size(), 12);

  CancelScope scope(token);
  ExpectCancelled(engine->MaskedSoftmax(ConstTensor(x.data(), {2, 8, 16}), ValidLens::None(),
                                        Tensor(y.data(), {2, 8, 16})),
                  "MaskedSoftmax");
  ExpectCancelled(
      additive->Forward(*engine, ConstTensor(q.data(), {2, 3, 6}), ConstTensor(k.data(), {2, 5, 4}),
                        ConstTensor(v.data(), {2, 5, 3}), ValidLens::None(),
                        Tensor(out.data(), {2, 3, 3})),
      "AdditiveAttention");
  // Appending is never cancelled: a cache is never left half-appended.
  ASSERT_TRUE(
      cache->Append(ConstTensor(kv.data(), {2, 3, 1, 4}), ConstTensor(kv.data(), {2, 3, 1, 4}))
          .ok());
  EXPECT_EQ(cache->length(0), 3);
  const Status s = cache->Attend(*engine, ConstTensor(heads.data(), {2, 1, 2, 4}),
                                 Tensor(attended.data(), {2, 1, 2, 4}));
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.message();
}

TEST(Cancel, ScopesNestAndEnd) {
  auto engine = EngineWithThreads(1);
  DotCall call(2, 64, 300, 32);
  CancelToken cancelled, live;
  cancelled.Cancel();
  {
    CancelScope outer(cancelled);
    {
      CancelScope inner(live);  // the innermost counts
      EXPECT_TRUE(call.Run(*engine).ok());
    }
    ExpectCancelled(call.Run(*engine), "DotProductAttention");
  }
  EXPECT_TRUE(call.Run(*engine).ok());  // no scope: nothing is checked
  std::thread other([&] {               // nor on another thread
    EXPECT_TRUE(call.Run(*engine).ok());
  });
  {
    CancelScope scope(cancelled);
    other.join();
  }
  cancelled.Reset();
  CancelScope scope(cancelled);
  EXPECT_TRUE(call.Run(*engine).ok());
}

// A long call; another thread cancels it 20 ms in (or before
// it starts, if this thread is held off that long: the same outcome). It
// stops with rows left unwritten.
TEST(Cancel, ATokenCancelledDuringACallStopsIt) {
  for (int threads : {1, 2}) {
    auto engine = EngineWithThreads(threads);
    DotCall call(1, 4096, 32768, 64);  // 3.4e10 FLOPs: a tenth of a second at best
    CancelToken token;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      token.Cancel();
    });
    Status s;
    {
      CancelScope scope(token);
      s = call.Run(*engine);
    }
    canceller.join();
    ExpectCancelled(s, "DotProductAttention");
    int64_t unwritten = 0;
    for (float x : call.out) unwritten += x == -7.0f;
    EXPECT_GT(unwritten, 0) << threads << " threads";
  }
}

TEST(Cancel, TheCApiTokenStopsCalls) {
  attnscore_cancel_token* token = attnscore_cancel_token_create();
  ASSERT_NE(token, nullptr);
  EXPECT_EQ(attnscore_cancel_token_cancelled(token), 0);
  attnscore_cancel_token_cancel(token);
  EXPECT_EQ(attnscore_cancel_token_cancelled(token), 1);
  EXPECT_EQ(attnscore_cancel_token_cancelled(nullptr), 0);
  attnscore_cancel_token_cancel(nullptr);  // ignored

  attnscore_engine* engine = nullptr;
  const attnscore_engine_options options = attnscore_default_engine_options();
  ASSERT_EQ(attnscore_engine_create(&options, &engine), nullptr);
  std::vector<float> x = RandomFloats(2 * 4 * 8, 13), y(x.size());
  const attnscore_tensor_view x_view{x.data(), 3, {2, 4, 8}, {32, 8, 1}};
  const attnscore_tensor y_view{y.data(), 3, {2, 4, 8}, {32, 8, 1}};
  EXPECT_EQ(attnscore_set_thread_cancel_token(token), nullptr);
  attnscore_status* status = attnscore_masked_softmax(engine, &x_view, nullptr, &y_view);
  EXPECT_EQ(attnscore_status_get_code(status), ATTNSCORE_CANCELLED);
  EXPECT_STREQ(attnscore_status_code_name(ATTNSCORE_CANCELLED), "cancelled");
  attnscore_status_free(status);
  attnscore_cancel_token_reset(token);
  EXPECT_EQ(attnscore_masked_softmax(engine, &x_view, nullptr, &y_view), nullptr);
  EXPECT_EQ(attnscore_set_thread_cancel_token(nullptr), token);  // the one set before
  attnscore_engine_destroy(engine);
  attnscore_cancel_token_destroy(token);
}

}  // namespace
}  // namespace attnscore
