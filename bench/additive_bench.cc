// Additive attention: the score kernel alone, in (query, key, hidden)
// triples per ns, against Highway's Tanh alone in elements per ns on the same
// target: the kernel does one tanh per triple, so the ratio is how much the
// fast tanh and the register tiling buy over the straightforward vector tanh.
#include <benchmark/benchmark.h>

#include <vector>

#include "bench_util.h"
#include "kernels/additive_scores.h"

namespace attnscore::bench {
namespace {

// One batch entry's scores: queries × keys × hidden triples, every key valid.
// mode 0: the fast tanh (factors); mode 1: Highway's Tanh of a + b.
void BM_AdditiveScoreKernel(benchmark::State& state) {
  const int64_t queries = state.range(0), keys = state.range(1), hidden = state.range(2);
  const auto mode = state.range(3) == 0 ? kernels::TanhMode::kExpProduct
                                        : kernels::TanhMode::kHighway;
  SharedEngine();
  const size_t stride = (keys + kernels::kAdditivePadFloats - 1) / kernels::kAdditivePadFloats *
                        kernels::kAdditivePadFloats;
  std::vector<float> q = RandomFloats(queries * hidden, 1);
  std::vector<float> k_cols = RandomFloats(hidden * static_cast<int64_t>(stride), 2);
  const std::vector<float> w_v = RandomFloats(hidden, 3);
  if (mode == kernels::TanhMode::kExpProduct) {
    kernels::ToTanhFactors(q.data(), q.size());
    kernels::ToTanhFactors(k_cols.data(), k_cols.size());
  }
  float w_sum = 0;
  for (float w : w_v) w_sum += w;
  std::vector<float> scores(queries * stride);
  for (auto _ : state) {
    for (int64_t i = 0; i < queries; i += kernels::kAdditiveRowBlock) {
      const float* q_rows[kernels::kAdditiveRowBlock];
      float* out_rows[kernels::kAdditiveRowBlock];
      const size_t rows = std::min<int64_t>(kernels::kAdditiveRowBlock, queries - i);
      for (size_t r = 0; r < rows; ++r) {
        q_rows[r] = q.data() + (i + r) * hidden;
        out_rows[r] = scores.data() + (i + r) * stride;
      }
      kernels::AdditiveScoreBlock(mode, q_rows, rows, k_cols.data(), stride, hidden, w_v.data(),
                                  w_sum, keys, out_rows);
    }
    benchmark::DoNotOptimize(scores.data());
  }
  state.counters["per_ns"] = benchmark::Counter(
      static_cast<double>(queries * keys * hidden) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_AdditiveScoreKernel)
    ->ArgNames({"queries", "keys", "hidden", "mode"})
    ->Args({64, 512, 256, 0})  // one entry of additive_big
    ->Args({64, 512, 256, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Highway's Tanh over 16 Ki floats (in and out stay in L2).
void BM_HighwayTanh(benchmark::State& state) {
  const int64_t count = state.range(0);
  SharedEngine();
  const std::vector<float> x = RandomFloats(count, 4);
  std::vector<float> y(count);
  for (auto _ : state) {
    kernels::HighwayTanhArray(x.data(), x.size(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["per_ns"] = benchmark::Counter(static_cast<double>(count) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_HighwayTanh)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
