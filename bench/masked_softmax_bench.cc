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

}  // namespace
}  // namespace attnscore::bench
