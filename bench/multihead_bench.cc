// Multi-head attention (Engine::MultiHeadAttention) on issue-sized shapes,
// each beside the peer its limit is measured against in the same run:
//   decode   (B 4, N 1, Hq 16, Hkv 4, D 64) over 2,048 keys in a KvCache:
//            bytes/s counts K and V read once; BM_CachedRead reads as many
//            bytes. The same over 256 keys (2 MiB, cache-resident) shows
//            the arithmetic's own cost per key.
//   prefill  (B 1, N 1,024, H 16, D 64), causal: GFLOP/s counts the unmasked
//            half only, 2 (D + Dv) per (query, visible key) per head;
//            BM_OnednnMatmulHeads is one oneDNN matmul of the heads' Q Kᵀ.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "attnscore/kv_cache.h"
#include "bench_util.h"

namespace attnscore::bench {
namespace {

// Args: batch, queries, keys, heads, kv_heads, dim, causal (0 none, 1
// top-left, 2 bottom-right). Token-major Q (B, N, Hq, D), K/V (B, M, Hkv, D).
void BM_MultiHead(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2),
                heads = state.range(3), kv_heads = state.range(4), depth = state.range(5);
  MultiHeadOptions options;
  options.causal = static_cast<Causal>(state.range(6));
  const Engine& engine = SharedEngine();
  const std::vector<float> q = RandomFloats(batch * queries * heads * depth, 1);
  const std::vector<float> k = RandomFloats(batch * keys * kv_heads * depth, 2);
  const std::vector<float> v = RandomFloats(batch * keys * kv_heads * depth, 3);
  std::vector<float> out(static_cast<size_t>(batch * queries * heads * depth));
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.MultiHeadAttention(ConstTensor(q.data(), {batch, queries, heads, depth}),
                                         ConstTensor(k.data(), {batch, keys, kv_heads, depth}),
                                         ConstTensor(v.data(), {batch, keys, kv_heads, depth}),
                                         ValidLens::None(), options,
                                         Tensor(out.data(), {batch, queries, heads, depth}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
  // Visible keys summed over queries (each head sees the same).
  double visible = 0;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t bound = options.causal == Causal::kTopLeft       ? i + 1
                          : options.causal == Causal::kBottomRight ? keys - queries + i + 1
                                                                   : keys;
    visible += static_cast<double>(std::min(bound, keys));
  }
  const double flops = 2.0 * static_cast<double>(batch * heads * 2 * depth) * visible;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // What it must read at least: K and V once (Q and out are small here).
  const double bytes = 4.0 * static_cast<double>(batch * keys * kv_heads * 2 * depth);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

BENCHMARK(BM_MultiHead)
    ->ArgNames({"batch", "queries", "keys", "heads", "kv_heads", "dim", "causal"})
    ->Args({4, 1, 2048, 16, 4, 64, 0})      // decode from token-major K, V
    ->Args({1, 1024, 1024, 16, 16, 64, 1})  // prefill, causal
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One decoding step over a KvCache holding `keys` positions per sequence.
void BM_KvCacheDecode(benchmark::State& state) {
  const int64_t batch = state.range(0), keys = state.range(1), heads = state.range(2),
                kv_heads = state.range(3), depth = state.range(4);
  const Engine& engine = SharedEngine();
  KvCacheShape shape;
  shape.batch = batch, shape.capacity = keys, shape.kv_heads = kv_heads;
  shape.key_dim = depth, shape.value_dim = depth;
  std::unique_ptr<KvCache> cache;
  Status s = KvCache::Create(shape, &cache);
  const std::vector<float> k = RandomFloats(batch * keys * kv_heads * depth, 2);
  const std::vector<float> v = RandomFloats(batch * keys * kv_heads * depth, 3);
  if (s.ok()) {
    s = cache->Append(ConstTensor(k.data(), {batch, keys, kv_heads, depth}),
                      ConstTensor(v.data(), {batch, keys, kv_heads, depth}));
  }
  if (!s.ok()) {
    state.SkipWithError(s.message().c_str());
    return;
  }
  const std::vector<float> q = RandomFloats(batch * heads * depth, 1);
  std::vector<float> out(static_cast<size_t>(batch * heads * depth));
  const ImplementationLabel label;
  for (auto _ : state) {
    s = cache->Attend(engine, ConstTensor(q.data(), {batch, 1, heads, depth}),
                      Tensor(out.data(), {batch, 1, heads, depth}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
  const double bytes = 4.0 * static_cast<double>(batch * keys * kv_heads * 2 * depth);
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

BENCHMARK(BM_KvCacheDecode)
    ->ArgNames({"batch", "keys", "heads", "kv_heads", "dim"})
    ->Args({4, 2048, 16, 4, 64})
    ->Args({4, 256, 16, 4, 64})
    ->Unit(benchmark::kMicrosecond)
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
