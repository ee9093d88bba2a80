// Bilinear ("general") attention: the op on an encoder-sized shape with
// random per-batch lengths, and the same on 2 threads against 1. Its work
// is the dot product's (section 6 of docs/semantics.md) after one
// projection of the queries, so BM_DotProduct is its peer.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "attnscore/bilinear.h"
#include "bench_util.h"

namespace attnscore::bench {
namespace {

// The op on random W (Dq, Dk), Q, K, V and per-batch lengths.
struct BilinearCall {
  BilinearCall(int64_t batch, int64_t queries, int64_t keys, int64_t depth)
      : batch(batch),
        queries(queries),
        keys(keys),
        depth(depth),
        w(LinearWeights(depth, depth, 5)),
        q(RandomFloats(batch * queries * depth, 1)),
        k(RandomFloats(batch * keys * depth, 2)),
        v(RandomFloats(batch * keys * depth, 3)),
        out(static_cast<size_t>(batch * queries * depth)),
        lens(RandomLengths(batch, keys, 4)),
        valid(ValidLens::PerBatch(lens.data(), batch)) {
    made = BilinearAttention::Create(ConstTensor(w.data(), {depth, depth}), &model);
  }

  Status Run(const Engine& engine) {
    if (!made.ok()) return made;
    const Status s = model->Forward(engine, ConstTensor(q.data(), {batch, queries, depth}),
                                    ConstTensor(k.data(), {batch, keys, depth}),
                                    ConstTensor(v.data(), {batch, keys, depth}), valid,
                                    Tensor(out.data(), {batch, queries, depth}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  int64_t batch, queries, keys, depth;
  std::vector<float> w, q, k, v, out;
  std::vector<int64_t> lens;
  ValidLens valid;
  std::unique_ptr<BilinearAttention> model;
  Status made;
};

void BilinearShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "queries", "keys", "dim"})->Args({8, 128, 512, 64})->UseRealTime();
}

void BM_Bilinear(benchmark::State& state) {
  BilinearCall call(state.range(0), state.range(1), state.range(2), state.range(3));
  CallEachIteration(state, call);
}

BENCHMARK(BM_Bilinear)->Apply(BilinearShapes)->Unit(benchmark::kMicrosecond);

// BM_Bilinear's call on 2 threads against 1 (TwoThreadsAgainstOne).
void BM_BilinearTwoThreads(benchmark::State& state) {
  BilinearCall call(state.range(0), state.range(1), state.range(2), state.range(3));
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_BilinearTwoThreads)
    ->Apply(BilinearShapes)
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace attnscore::bench
