// Multi-head attention (Engine::MultiHeadAttention) on issue-sized shapes,
// each beside the peer its limit is measured against in the same run:
//   decode   (B 4, N 1, Hq 16, Hkv 4, D 64) over 2,048 keys in a KvCache:
//            bytes/s counts K and V read once; BM_CachedRead reads as many
//            bytes. The same over 256 keys (2 MiB, cache-resident) shows
//            the arithmetic's own cost per key. BM_KvCacheDecodeAgainstRead
//            times the 2,048-key step alternated with a read of its bytes,
//            BM_KvCachePooledDecodeAgainstOwn with the step from a pooled
//            cache.
//   prefill  (B 1, N 1,024, H 16, D 64), causal: GFLOP/s counts the unmasked
//            half only, 2 (D + Dv) per (query, visible key) per head;
//            BM_OnednnMatmulHeads is one oneDNN matmul of the heads' Q Kᵀ;
//            BM_MultiHeadAgainstMatmul times it alternated with the matmul
//            limit, BM_MultiHeadTwoThreads on 2 threads against 1.
//   window   (B 1, N = M = 16,384, H 1, D 64), causal, window (1,024, 0):
//            BM_MultiHeadWindowAgainstMatmul, alternated with the matmul
//            limit, credited with the pairs the window leaves visible.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "api/kv_cache_bytes.h"
#include "attnscore/kv_cache.h"
#include "attnscore/multihead.h"
#include "bench_util.h"
#include "kv_cache_decode_call.h"

namespace attnscore::bench {
namespace {

// One multi-head call on random token-major Q (B, N, Hq, D), K and V (B, M,
// Hkv, D), no valid lengths, the causal option given.
struct MultiHeadCall {
  MultiHeadCall(int64_t batch, int64_t queries, int64_t keys, int64_t heads, int64_t kv_heads,
                int64_t depth, Causal causal)
      : batch(batch),
        queries(queries),
        keys(keys),
        heads(heads),
        kv_heads(kv_heads),
        depth(depth),
        q(RandomFloats(batch * queries * heads * depth, 1)),
        k(RandomFloats(batch * keys * kv_heads * depth, 2)),
        v(RandomFloats(batch * keys * kv_heads * depth, 3)),
        out(static_cast<size_t>(batch * queries * heads * depth)) {
    options.causal = causal;
  }

  Status Run(const Engine& engine) {
    Status s = engine.MultiHeadAttention(ConstTensor(q.data(), {batch, queries, heads, depth}),
                                         ConstTensor(k.data(), {batch, keys, kv_heads, depth}),
                                         ConstTensor(v.data(), {batch, keys, kv_heads, depth}),
                                         ValidLens::None(), options,
                                         Tensor(out.data(), {batch, queries, heads, depth}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  // 2·(D + Dv) per visible (query, key) pair per head: query i at p = i +
  // M - N sees keys [p - left, min(its causal bound, M)) with a window.
  double Flops() const {
    double visible = 0;  // summed over queries; each head sees the same
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t bound = options.causal == Causal::kTopLeft       ? i + 1
                            : options.causal == Causal::kBottomRight ? keys - queries + i + 1
                                                                     : keys;
      const int64_t left = options.window.left;
      const int64_t first = left < 0 ? 0 : std::max<int64_t>(0, keys - queries + i - left);
      visible += static_cast<double>(std::max<int64_t>(0, std::min(bound, keys) - first));
    }
    return 2.0 * static_cast<double>(batch * heads * 2 * depth) * visible;
  }

  const int64_t batch, queries, keys, heads, kv_heads, depth;
  MultiHeadOptions options;
  const std::vector<float> q, k, v;
  std::vector<float> out;
};

// Args: batch, queries, keys, heads, kv_heads, dim, causal (0 none, 1
// top-left, 2 bottom-right).
void BM_MultiHead(benchmark::State& state) {
  MultiHeadCall call(state.range(0), state.range(1), state.range(2), state.range(3), state.range(4),
                     state.range(5), static_cast<Causal>(state.range(6)));
  RunEachIteration(state, SharedEngine(), call);
  state.counters["GFLOPS"] =
      benchmark::Counter(call.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // What it must read at least: K and V once (Q and out are small here).
  const double bytes =
      4.0 * static_cast<double>(call.batch * call.keys * call.kv_heads * 2 * call.depth);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

BENCHMARK(BM_MultiHead)
    ->ArgNames({"batch", "queries", "keys", "heads", "kv_heads", "dim", "causal"})
    ->Args({4, 1, 2048, 16, 4, 64, 0})      // decode from token-major K, V
    ->Args({1, 1024, 1024, 16, 16, 64, 1})  // prefill, causal
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// BM_MultiHead's prefill against the matmul limit, alternated on 1 thread
// (AgainstLimitMatmul), credited with its visible pairs' FLOPs only.
void BM_MultiHeadAgainstMatmul(benchmark::State& state) {
  MultiHeadCall call(state.range(0), state.range(1), state.range(2), state.range(3), state.range(4),
                     state.range(5), static_cast<Causal>(state.range(6)));
  CallAgainstLimitMatmul(state, call);
}

BENCHMARK(BM_MultiHeadAgainstMatmul)
    ->ArgNames({"batch", "queries", "keys", "heads", "kv_heads", "dim", "causal"})
    ->Args({1, 1024, 1024, 16, 16, 64, 1})  // prefill, causal
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// BM_MultiHead's prefill on 2 threads against 1, alternated in one process
// (TwoThreadsAgainstOne): every head's tiles shared among the threads.
void BM_MultiHeadTwoThreads(benchmark::State& state) {
  MultiHeadCall call(state.range(0), state.range(1), state.range(2), state.range(3), state.range(4),
                     state.range(5), static_cast<Causal>(state.range(6)));
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_MultiHeadTwoThreads)
    ->ArgNames({"batch", "queries", "keys", "heads", "kv_heads", "dim", "causal"})
    ->Args({1, 1024, 1024, 16, 16, 64, 1})  // prefill, causal
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// d2l's MultiHeadAttention module (random weights, no bias: num_hiddens =
// heads · dim) on (B, N, H) queries and (B, M, H) keys and values, causal
// as given, on 2 threads against 1 (TwoThreadsAgainstOne): its four
// projections and the heads between them.
void BM_MultiHeadModuleTwoThreads(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2),
                heads = state.range(3), hidden = heads * state.range(4);
  const auto causal = static_cast<Causal>(state.range(5));
  std::vector<std::vector<float>> w;
  for (uint32_t layer = 0; layer < 4; ++layer)
    w.push_back(LinearWeights(hidden, hidden, 5 + layer));
  MultiHeadWeights weights;
  weights.w_q = ConstTensor(w[0].data(), {hidden, hidden});
  weights.w_k = ConstTensor(w[1].data(), {hidden, hidden});
  weights.w_v = ConstTensor(w[2].data(), {hidden, hidden});
  weights.w_o = ConstTensor(w[3].data(), {hidden, hidden});
  std::unique_ptr<MultiHeadAttention> model;
  const Status made = MultiHeadAttention::Create(heads, weights, &model);
  if (!made.ok()) {
    state.SkipWithError(made.message().c_str());
    return;
  }
  const std::vector<float> q = RandomFloats(batch * queries * hidden, 1);
  const std::vector<float> kv = RandomFloats(batch * keys * hidden, 2);
  std::vector<float> out(static_cast<size_t>(batch * queries * hidden));
  EngineCall call{[&](const Engine& engine) {
    return model->Forward(engine, ConstTensor(q.data(), {batch, queries, hidden}),
                          ConstTensor(kv.data(), {batch, keys, hidden}),
                          ConstTensor(kv.data(), {batch, keys, hidden}), ValidLens::None(), causal,
                          Tensor(out.data(), {batch, queries, hidden}));
  }};
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_MultiHeadModuleTwoThreads)
    ->ArgNames({"batch", "queries", "keys", "heads", "dim", "causal"})
    ->Args({1, 1024, 1024, 16, 64, 1})  // prefill, causal
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Causal prefill of N = M tokens with a window (left, 0), one head, against
// the matmul limit as above: the work should follow the window's pairs.
void BM_MultiHeadWindowAgainstMatmul(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  MultiHeadCall call(1, tokens, tokens, 1, 1, state.range(1), Causal::kBottomRight);
  call.options.window = {state.range(2), 0};
  CallAgainstLimitMatmul(state, call);
}

BENCHMARK(BM_MultiHeadWindowAgainstMatmul)
    ->ArgNames({"tokens", "dim", "window_left"})
    ->Args({16384, 64, 1024})
    ->Iterations(9)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_KvCacheDecode(benchmark::State& state) {
  const int64_t batch = state.range(0), keys = state.range(1), kv_heads = state.range(3),
                depth = state.range(4);
  KvCacheDecodeCall call(batch, keys, state.range(2), kv_heads, depth);
  if (!call.status.ok()) {
    state.SkipWithError(call.status.message().c_str());
    return;
  }
  RunEachIteration(state, SharedEngine(), call);
  const double bytes = 4.0 * static_cast<double>(batch * keys * kv_heads * 2 * depth);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

BENCHMARK(BM_KvCacheDecode)
    ->ArgNames({"batch", "keys", "heads", "kv_heads", "dim"})
    ->Args({4, 2048, 16, 4, 64})
    ->Args({4, 256, 16, 4, 64})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// BM_KvCacheDecode's step against a read of the K and V it reads, where the
// cache holds them (internal::KvCacheBytes: in bf16, its words; in int8, its
// codes and their scales), from a cache of each precision (precision: 0
// fp32, 1 bf16, 2 int8), alternated on 1 thread (AgainstItsRead). A read of the caller's copies
// instead, 16 MiB beside the cache's 16, found them evicted by the step's rounds: 231-257 µs on a
// Zen 5 with 32 MiB of L3, where the same read alone takes 159-165.
void BM_KvCacheDecodeAgainstRead(benchmark::State& state) {
  KvCacheDecodeCall call(state.range(0), state.range(1), state.range(2), state.range(3),
                         state.range(4), /*pooled=*/false, static_cast<Precision>(state.range(5)));
  if (!call.status.ok()) {
    state.SkipWithError(call.status.message().c_str());
    return;
  }
  const std::unique_ptr<Engine> engine = EngineOrSkip(state, 1);
  if (!engine) return;
  const std::vector<std::pair<const void*, size_t>> held =
      internal::KvCacheBytes::Held(*call.cache);
  const ImplementationLabel label;
  AgainstItsRead(
      state, [&] { return SecondsOf(state, [&] { return call.Run(*engine); }); },
      [&] { return SecondsToRead(held); });
  label.Apply(state);
}

BENCHMARK(BM_KvCacheDecodeAgainstRead)
    ->ArgNames({"batch", "keys", "heads", "kv_heads", "dim", "precision"})
    ->Args({4, 2048, 16, 4, 64, 0})
    ->Args({4, 2048, 16, 4, 64, 1})
    ->Args({4, 2048, 16, 4, 64, 2})
    // A row alone per KV head (Hq = Hkv): the cached kernels' one-row
    // tiles, from L3 (4 MiB in fp32).
    ->Args({1, 1024, 8, 8, 64, 0})
    ->Args({1, 1024, 8, 8, 64, 1})
    ->Args({1, 1024, 8, 8, 64, 2})
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The step from a cache whose sequences share a pool of blocks (small
// pages, memory taken as positions arrive) against the same step from a
// cache of their own (huge pages), alternated on 1 thread: pooled_over_own
// is the median round's time pooled ÷ own.
void BM_KvCachePooledDecodeAgainstOwn(benchmark::State& state) {
  KvCacheDecodeCall own(state.range(0), state.range(1), state.range(2), state.range(3),
                        state.range(4));
  KvCacheDecodeCall pooled(state.range(0), state.range(1), state.range(2), state.range(3),
                           state.range(4), /*pooled=*/true);
  for (const KvCacheDecodeCall* call : {&own, &pooled}) {
    if (!call->status.ok()) {
      state.SkipWithError(call->status.message().c_str());
      return;
    }
  }
  const std::unique_ptr<Engine> engine = EngineOrSkip(state, 1);
  if (!engine) return;
  const ImplementationLabel label;
  AlternatedTimes t;
  const auto pooled_then_own = [&](int side) {
    KvCacheDecodeCall& call = side == 0 ? pooled : own;
    return SecondsOf(state, [&] { return call.Run(*engine); });
  };
  if (!TimeAlternated(state, pooled_then_own, &t)) return;
  state.counters["pooled_us"] = t.median_us[0];
  state.counters["own_us"] = t.median_us[1];
  state.counters["pooled_over_own"] = t.ratio;
  label.Apply(state);
}

BENCHMARK(BM_KvCachePooledDecodeAgainstOwn)
    ->ArgNames({"batch", "keys", "heads", "kv_heads", "dim"})
    ->Args({4, 2048, 16, 4, 64})
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Reads the decode's K and V bytes as often as the op does (bench_util.h).
void BM_CachedRead(benchmark::State& state) { CachedRead(state); }

BENCHMARK(BM_CachedRead)
    ->ArgName("bytes")
    ->Arg(int64_t{4} * 4 * 2048 * 4 * 2 * 64)  // decode: B Hkv M (D + Dv) floats
    ->Arg(int64_t{4} * 4 * 256 * 4 * 2 * 64)   // the same over 256 keys
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The heads' scores Q Kᵀ as one batched oneDNN matmul, (H, N, D) · (H, D, M):
// the fp32 matmul rate a prefill's products could reach.
void BM_OnednnMatmulHeads(benchmark::State& state) {
  OnednnMatmul(state, state.range(0), state.range(1), state.range(3), state.range(2));
}

BENCHMARK(BM_OnednnMatmulHeads)
    ->ArgNames({"heads", "rows", "cols", "dim"})
    ->Args({16, 1024, 1024, 64})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
