// Scaled dot-product attention on the decode, encoder and long shapes, with
// random valid lengths in [1, M]: per batch entry (BM_DotProduct) or per
// query (BM_DotProductPerQuery). GFLOP/s counts only valid keys:
// 2·L·(D + Dv) per query; BM_OnednnMatmul (PerQuery) in peers_bench.cc runs
// one oneDNN matmul of the same FLOPs. bytes/s counts Q, out and the K, V
// rows some query of the entry attends to.
#include <benchmark/benchmark.h>

#include <algorithm>

#include "bench_util.h"

namespace attnscore::bench {
namespace {

void DotProduct(benchmark::State& state, bool per_query) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2),
                depth = state.range(3), value_dim = depth;
  const Engine& engine = SharedEngine();
  const std::vector<float> q = RandomFloats(batch * queries * depth, 1);
  const std::vector<float> k = RandomFloats(batch * keys * depth, 2);
  const std::vector<float> v = RandomFloats(batch * keys * value_dim, 3);
  std::vector<float> out(static_cast<size_t>(batch * queries * value_dim));
  const int64_t rows_per_length = per_query ? 1 : queries;
  const std::vector<int64_t> lens = RandomLengths(batch * queries / rows_per_length, keys, 4);
  const ValidLens valid = per_query ? ValidLens::PerQuery(lens.data(), batch, queries)
                                    : ValidLens::PerBatch(lens.data(), batch);
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.DotProductAttention(
        ConstTensor(q.data(), {batch, queries, depth}), ConstTensor(k.data(), {batch, keys, depth}),
        ConstTensor(v.data(), {batch, keys, value_dim}), valid,
        Tensor(out.data(), {batch, queries, value_dim}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
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
