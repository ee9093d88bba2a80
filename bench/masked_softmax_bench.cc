// Masked softmax (64, 128, 512) with random per-query valid lengths. Its
// bytes/s counts the bytes the op must move (valid scores read, every weight
// written), to set beside BM_Memcpy of the same bytes in peers_bench.cc.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bench_util.h"

namespace attnscore::bench {
namespace {

// The op's rates over all B·N rows of width M with these lengths: bytes it
// must move (valid scores read, every weight written), and valid scores per
// second (each costs an exp; there are no FLOPs to count).
void SetSoftmaxRates(benchmark::State& state, const std::vector<int64_t>& lens, int64_t weights) {
  const int64_t keys = state.range(2);
  const double valid = ValidKeys(lens, 1, keys);
  state.SetBytesProcessed(static_cast<int64_t>(4.0 * (valid + static_cast<double>(weights))) *
                          state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(valid) * state.iterations());
}

// `misaligned` floats past a 64-byte line: a std::vector's data is 16 bytes
// past one (malloc's header), a PyTorch tensor's is on one. Rows of 512
// floats starting on a line share no vector, and the kernel takes them in
// order of length (see SortByValidLength).
float* FloatsPastALine(std::vector<float>& storage, size_t count, size_t misaligned) {
  storage.assign(count + 16 + misaligned, 0.0f);
  float* p = storage.data();
  while (reinterpret_cast<uintptr_t>(p) % 64 != 0) ++p;
  return p + misaligned;
}

void BM_MaskedSoftmax(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  const auto count = static_cast<size_t>(batch * queries * keys);
  const Engine& engine = SharedEngine();
  const std::vector<float> scores = RandomFloats(batch * queries * keys, 1);
  std::vector<float> x_storage, y_storage;
  float* x = FloatsPastALine(x_storage, count, static_cast<size_t>(state.range(3)));
  float* y = FloatsPastALine(y_storage, count, static_cast<size_t>(state.range(3)));
  std::copy(scores.begin(), scores.end(), x);
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const ValidLens valid = ValidLens::PerQuery(lens.data(), batch, queries);
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.MaskedSoftmax(ConstTensor(x, {batch, queries, keys}), valid,
                                    Tensor(y, {batch, queries, keys}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(y);
  }
  label.Apply(state);
  SetSoftmaxRates(state, lens, batch * queries * keys);
}

// misaligned:4 is where a std::vector's floats start, as every earlier
// measurement of this benchmark had them (and as issue 2's line is judged);
// misaligned:0 is a tensor on a line.
BENCHMARK(BM_MaskedSoftmax)
    ->ArgNames({"batch", "queries", "keys", "misaligned"})
    ->Args({64, 128, 512, 4})
    ->Args({64, 128, 512, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// BM_MaskedSoftmax's rows and lengths, on 2 threads against 1
// (TwoThreadsAgainstOne): the rows shared among the threads.
void BM_MaskedSoftmaxTwoThreads(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  const std::vector<float> x = RandomFloats(batch * queries * keys, 1);
  std::vector<float> y(x.size());
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const ValidLens valid = ValidLens::PerQuery(lens.data(), batch, queries);
  EngineCall call{[&](const Engine& engine) {
    return engine.MaskedSoftmax(ConstTensor(x.data(), {batch, queries, keys}), valid,
                                Tensor(y.data(), {batch, queries, keys}));
  }};
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_MaskedSoftmaxTwoThreads)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The same rows and lengths as BM_MaskedSoftmax, with memory taken out: one
// (1, N, M) slice of scores and weights, small enough to stay in L2, is
// computed B times, with each batch entry's lengths in turn. Its time is
// about what the arithmetic alone costs (outputs this small take the
// plain-store row kernel, not the streaming one, and 64 calls' set-up); the
// bytes counted are BM_MaskedSoftmax's, to set beside memcpy the same way.
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
  SetSoftmaxRates(state, lens, batch * queries * keys);
}

BENCHMARK(BM_MaskedSoftmaxInCache)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
