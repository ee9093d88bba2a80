// Scaled dot-product attention on the decode, encoder and long shapes, with
// random valid lengths in [1, M]: per batch entry (BM_DotProduct) or per
// query (BM_DotProductPerQuery). GFLOP/s counts only valid keys:
// 2·L·(D + Dv) per query; BM_OnednnMatmul (PerQuery) in peers_bench.cc runs
// one oneDNN matmul of the same FLOPs. bytes/s counts Q, out and the K, V
// rows some query of the entry attends to. BM_DotProductTwoThreads times
// the decode, encoder and long calls on 2 threads against 1.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "bench_util.h"

namespace attnscore::bench {
namespace {

// One dot-product call on random inputs: (B, N, D) queries, (B, M, D) keys
// and values, lengths random in [1, M] per batch entry or per query.
struct DotProductCall {
  DotProductCall(int64_t batch, int64_t queries, int64_t keys, int64_t depth, bool per_query)
      : batch(batch),
        queries(queries),
        keys(keys),
        depth(depth),
        per_query(per_query),
        rows_per_length(per_query ? 1 : queries),
        q(RandomFloats(batch * queries * depth, 1)),
        k(RandomFloats(batch * keys * depth, 2)),
        v(RandomFloats(batch * keys * depth, 3)),
        out(static_cast<size_t>(batch * queries * depth)),
        lens(RandomLengths(batch * queries / rows_per_length, keys, 4)) {}

  Status Run(const Engine& engine) {
    const ValidLens valid = per_query ? ValidLens::PerQuery(lens.data(), batch, queries)
                                      : ValidLens::PerBatch(lens.data(), batch);
    Status s = engine.DotProductAttention(ConstTensor(q.data(), {batch, queries, depth}),
                                          ConstTensor(k.data(), {batch, keys, depth}),
                                          ConstTensor(v.data(), {batch, keys, depth}), valid,
                                          Tensor(out.data(), {batch, queries, depth}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  const int64_t batch, queries, keys, depth;
  const bool per_query;
  const int64_t rows_per_length;  // rows sharing each length
  const std::vector<float> q, k, v;
  std::vector<float> out;
  const std::vector<int64_t> lens;
};

void DotProduct(benchmark::State& state, bool per_query) {
  DotProductCall call(state.range(0), state.range(1), state.range(2), state.range(3), per_query);
  const int64_t batch = call.batch, queries = call.queries, keys = call.keys;
  const int64_t depth = call.depth, value_dim = depth, rows_per_length = call.rows_per_length;
  const std::vector<int64_t>& lens = call.lens;
  const Engine& engine = SharedEngine();
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = call.Run(engine);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
  }
  label.Apply(state);
  // (query, key) pairs attended, and K, V rows read: each entry's longest.
  const double valid_keys = ValidKeys(lens, rows_per_length, keys);
  double rows_read = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const auto first = lens.begin() + b * (queries / rows_per_length);
    rows_read += static_cast<double>(
        std::min(keys, *std::max_element(first, first + queries / rows_per_length)));
  }
  const double flops = 2.0 * valid_keys * static_cast<double>(depth + value_dim);
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  const double bytes = 4.0 * (static_cast<double>(batch * queries * (depth + value_dim)) +
                              rows_read * static_cast<double>(depth + value_dim));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
}

void BM_DotProduct(benchmark::State& state) { DotProduct(state, /*per_query=*/false); }
void BM_DotProductPerQuery(benchmark::State& state) { DotProduct(state, /*per_query=*/true); }

BENCHMARK(BM_DotProduct)
    ->ArgNames({"batch", "queries", "keys", "dim"})
    ->Args({8, 1, 1024, 64})     // decode
    ->Args({1, 1, 4096, 64})     // decode, one sequence: its keys split among threads
    ->Args({4, 128, 128, 64})    // encoder
    ->Args({1, 1024, 4096, 64})  // long
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_DotProductPerQuery)
    ->ArgNames({"batch", "queries", "keys", "dim"})
    ->Args({4, 128, 128, 64})    // encoder
    ->Args({1, 1024, 4096, 64})  // long
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// BM_DotProduct's call (or, with per_query, BM_DotProductPerQuery's) on 2
// threads against 1 (TwoThreadsAgainstOne). The decode rows' peers are
// BM_CachedReadTwoThreads in peers_bench.cc: a read alone, 2 threads against 1.
void BM_DotProductTwoThreads(benchmark::State& state) {
  DotProductCall call(state.range(0), state.range(1), state.range(2), state.range(3),
                      state.range(4) != 0);
  std::unique_ptr<Engine> engines[2];
  for (int threads = 1; threads <= 2; ++threads) {
    Status s = EngineWithThreads(threads, &engines[threads - 1]);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
  }
  const ImplementationLabel label;
  TwoThreadsAgainstOne(state, [&](int threads) {
    const auto start = std::chrono::steady_clock::now();
    Status s = call.Run(*engines[threads - 1]);
    if (!s.ok() && !state.error_occurred()) state.SkipWithError(s.message().c_str());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  label.Apply(state);
}

BENCHMARK(BM_DotProductTwoThreads)
    ->ArgNames({"batch", "queries", "keys", "dim", "per_query"})
    ->Args({8, 1, 1024, 64, 0})     // decode
    ->Args({1, 1, 4096, 64, 0})     // decode, one sequence: its keys split among threads
    ->Args({4, 128, 128, 64, 0})    // encoder
    ->Args({4, 128, 128, 64, 1})    // encoder, per-query lengths
    ->Args({1, 1024, 4096, 64, 0})  // long
    ->Iterations(7)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// d2l's toy call, as the seed makes it: queries (2, 1, 2), keys of ones
// (2, 10, 2), values 0..39 as (10, 4) for both entries, valid lengths 2 and 6.
// At this size the call is all overhead, which is what it measures.
void BM_DotProductToy(benchmark::State& state) {
  const Engine& engine = SharedEngine();
  const std::vector<float> q = RandomFloats(2 * 1 * 2, 1);
  const std::vector<float> k(2 * 10 * 2, 1.0f);
  std::vector<float> v(2 * 10 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 40);
  std::vector<float> out(2 * 1 * 4);
  const int64_t lens[] = {2, 6};
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.DotProductAttention(ConstTensor(q.data(), {2, 1, 2}),
                                          ConstTensor(k.data(), {2, 10, 2}),
                                          ConstTensor(v.data(), {2, 10, 4}),
                                          ValidLens::PerBatch(lens, 2), Tensor(out.data(), {2, 1, 4}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
}

BENCHMARK(BM_DotProductToy)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
