// Masked softmax (64, 128, 512) with random per-query valid lengths. Its
// bytes/s counts the bytes the op must move (valid scores read, every weight
// written), to set beside BM_Memcpy of the same bytes in peers_bench.cc.
#include <benchmark/benchmark.h>

#include "bench_util.h"

namespace attnscore::bench {
namespace {

void BM_MaskedSoftmax(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  const Engine& engine = SharedEngine();
  const std::vector<float> x = RandomFloats(batch * queries * keys, 1);
  std::vector<float> y(x.size());
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const ValidLens valid = ValidLens::PerQuery(lens.data(), batch, queries);
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.MaskedSoftmax(ConstTensor(x.data(), {batch, queries, keys}), valid,
                                    Tensor(y.data(), {batch, queries, keys}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  label.Apply(state);
  const double bytes = 4.0 * (ValidKeys(lens, 1, keys) + static_cast<double>(y.size()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  // Valid scores per second: each costs an exp (there are no FLOPs to count).
  state.SetItemsProcessed(static_cast<int64_t>(ValidKeys(lens, 1, keys)) * state.iterations());
}

BENCHMARK(BM_MaskedSoftmax)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The same rows and lengths as BM_MaskedSoftmax, with memory taken out: one
// (1, N, M) slice of scores and weights, small enough to stay in L2, is
// computed B times, with each batch entry's lengths in turn. Its time is what
// the arithmetic alone costs; the bytes counted are BM_MaskedSoftmax's, so
// its bytes/s says how close to memcpy any memory schedule could bring the op.
void BM_MaskedSoftmaxInCache(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  const Engine& engine = SharedEngine();
  const std::vector<float> x = RandomFloats(queries * keys, 1);
  std::vector<float> y(x.size());
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const ImplementationLabel label;
  for (auto _ : state) {
    for (int64_t b = 0; b < batch; ++b) {
      Status s = engine.MaskedSoftmax(ConstTensor(x.data(), {1, queries, keys}),
                                      ValidLens::PerQuery(lens.data() + b * queries, 1, queries),
                                      Tensor(y.data(), {1, queries, keys}));
      if (!s.ok()) state.SkipWithError(s.message().c_str());
    }
    benchmark::DoNotOptimize(y.data());
  }
  label.Apply(state);
  const double bytes = 4.0 * (ValidKeys(lens, 1, keys) + static_cast<double>(batch * queries * keys));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(ValidKeys(lens, 1, keys)) * state.iterations());
}

BENCHMARK(BM_MaskedSoftmaxInCache)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
