// Additive attention: the op on d2l's toy and on the mid and big shapes of
// issue 3 (random per-batch lengths, as the dot-product benchmark uses); the
// score kernel alone, in (query, key, hidden) triples per ns (items/s in G),
// against Highway's Tanh alone in elements per ns on the same target: the
// kernel does one tanh per triple, so the ratio is how much the fast tanh and
// the register tiling buy over the straightforward vector tanh.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "attnscore/additive.h"
#include "bench_util.h"
#include "kernels/additive_scores.h"

namespace attnscore::bench {
namespace {

// The op on random weights and inputs with per-batch lengths; the shape is
// the benchmark's arguments (batch, queries, keys, dq, dk, hidden, dv).
struct AdditiveCall {
  explicit AdditiveCall(const benchmark::State& state)
      : batch(state.range(0)),
        queries(state.range(1)),
        keys(state.range(2)),
        query_size(state.range(3)),
        key_size(state.range(4)),
        hidden(state.range(5)),
        value_dim(state.range(6)),
        w_q(LinearWeights(hidden, query_size, 5)),
        w_k(LinearWeights(hidden, key_size, 6)),
        w_v(LinearWeights(1, hidden, 7)),
        q(RandomFloats(batch * queries * query_size, 1)),
        k(RandomFloats(batch * keys * key_size, 2)),
        v(RandomFloats(batch * keys * value_dim, 3)),
        out(static_cast<size_t>(batch * queries * value_dim)),
        lens(RandomLengths(batch, keys, 4)),
        valid(ValidLens::PerBatch(lens.data(), batch)) {
    made = AdditiveAttention::Create(ConstTensor(w_q.data(), {hidden, query_size}),
                                     ConstTensor(w_k.data(), {hidden, key_size}),
                                     ConstTensor(w_v.data(), {1, hidden}), &model);
  }

  Status Run(const Engine& engine) {
    if (!made.ok()) return made;
    const Status s = model->Forward(engine, ConstTensor(q.data(), {batch, queries, query_size}),
                                    ConstTensor(k.data(), {batch, keys, key_size}),
                                    ConstTensor(v.data(), {batch, keys, value_dim}), valid,
                                    Tensor(out.data(), {batch, queries, value_dim}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  int64_t batch, queries, keys, query_size, key_size, hidden, value_dim;
  std::vector<float> w_q, w_k, w_v, q, k, v, out;
  std::vector<int64_t> lens;
  ValidLens valid;
  std::unique_ptr<AdditiveAttention> model;
  Status made;
};

void BM_Additive(benchmark::State& state) {
  AdditiveCall call(state);
  CallEachIteration(state, call);
  // Valid (query, key, hidden) triples: one tanh each.
  state.SetItemsProcessed(static_cast<int64_t>(ValidKeys(call.lens, call.queries, call.keys)) *
                          call.hidden * state.iterations());
}

BENCHMARK(BM_Additive)
    ->ArgNames({"batch", "queries", "keys", "dq", "dk", "hidden", "dv"})
    ->Args({2, 1, 10, 20, 2, 8, 4})                // toy
    ->Args({4, 32, 256, 128, 128, 128, 128})       // mid
    ->Args({8, 64, 512, 256, 256, 256, 256})       // big
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// BM_Additive's big shape on 2 threads against 1 (TwoThreadsAgainstOne).
void BM_AdditiveTwoThreads(benchmark::State& state) {
  AdditiveCall call(state);
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_AdditiveTwoThreads)
    ->ArgNames({"batch", "queries", "keys", "dq", "dk", "hidden", "dv"})
    ->Args({8, 64, 512, 256, 256, 256, 256})  // big
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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
  const ImplementationLabel label;
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
  label.Apply(state);
  state.SetItemsProcessed(queries * keys * hidden * state.iterations());
}

BENCHMARK(BM_AdditiveScoreKernel)
    ->ArgNames({"queries", "keys", "hidden", "mode"})
    ->Args({64, 512, 256, 0})  // one entry of additive_big
    ->Args({64, 512, 256, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The limit of BM_SweepAdditive (sweep_bench.cc) at every key count: its
// scores alone at their best, 16 queries, H 64, the fast tanh, over 4,096
// keys whose features stay in L2 (the op scores its keys in such chunks).
BENCHMARK(BM_AdditiveScoreKernel)
    ->Name("BM_SweepAdditiveKernel")
    ->ArgNames({"queries", "keys", "hidden", "mode"})
    ->Args({16, 4096, 64, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Highway's Tanh over 16 Ki floats (in and out stay in L2).
void BM_HighwayTanh(benchmark::State& state) {
  const int64_t count = state.range(0);
  SharedEngine();
  const std::vector<float> x = RandomFloats(count, 4);
  std::vector<float> y(count);
  const ImplementationLabel label;
  for (auto _ : state) {
    kernels::HighwayTanhArray(x.data(), x.size(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  label.Apply(state);
  state.SetItemsProcessed(count * state.iterations());
}

BENCHMARK(BM_HighwayTanh)->Arg(16384)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
