// Concat attention (the seq2seq tutorial's Attn): the op at the tutorial's
// sizes, a decoder step over a batch, and a batched encoder-sized shape, with
// random per-batch lengths; and its peer, oneDNN alone doing the two linear
// layers the way PyTorch's module does them, on inputs already concatenated:
//   [Q;K] (B·N, Dq + Dk) · attn.weightᵀ + bias, [Q;applied] (B·N, Dq + Dv) ·
//   attn_combine.weightᵀ + bias.
// Those carry nearly all of the op's FLOPs, so op time / peer time is what
// the softmax, W V and splitting each layer into two blocks cost.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "attnscore/concat.h"
#include "bench_util.h"
#include "base/workspace.h"
#include "matmul/matmul.h"

namespace attnscore::bench {
namespace {

void ConcatShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "queries", "dq", "dk", "rows", "dv", "out"})
      ->Args({1, 1, 32, 32, 32, 64, 64})         // the tutorial
      ->Args({64, 1, 256, 256, 64, 256, 256})    // a decoder step over a batch
      ->Args({8, 256, 256, 256, 128, 256, 256})  // encoder-sized
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

struct Shape {
  int64_t batch, queries, query_size, key_size, rows, value_size, outputs;
};

Shape ShapeOf(const benchmark::State& state) {
  return {state.range(0), state.range(1), state.range(2), state.range(3),
          state.range(4), state.range(5), state.range(6)};
}

// FLOPs of the two linear layers and of W V over every position: what both
// benchmarks are credited with, so their GFLOP/s compare directly.
double Flops(const Shape& s) {
  const double rows = static_cast<double>(s.batch * s.queries);
  return 2.0 * rows *
         static_cast<double>(s.rows * (s.query_size + s.key_size) + s.rows * s.value_size +
                             s.outputs * (s.query_size + s.value_size));
}

// The op on a shape, with random weights and inputs and per-batch lengths.
struct ConcatCall {
  explicit ConcatCall(const Shape& shape)
      : s(shape),
        attn_w(LinearWeights(s.rows, s.query_size + s.key_size, 5)),
        attn_b(LinearWeights(1, s.rows, 6)),
        combine_w(LinearWeights(s.outputs, s.query_size + s.value_size, 7)),
        combine_b(LinearWeights(1, s.outputs, 8)),
        q(RandomFloats(s.batch * s.queries * s.query_size, 1)),
        k(RandomFloats(s.batch * s.queries * s.key_size, 2)),
        v(RandomFloats(s.batch * s.rows * s.value_size, 3)),
        out(static_cast<size_t>(s.batch * s.queries * s.outputs)),
        lens(RandomLengths(s.batch, s.rows, 4)),
        valid(ValidLens::PerBatch(lens.data(), s.batch)) {
    const int64_t score_in = s.query_size + s.key_size, combine_in = s.query_size + s.value_size;
    made = ConcatAttention::Create(s.query_size, ConstTensor(attn_w.data(), {s.rows, score_in}),
                                   ConstTensor(attn_b.data(), {s.rows}),
                                   ConstTensor(combine_w.data(), {s.outputs, combine_in}),
                                   ConstTensor(combine_b.data(), {s.outputs}), &model);
  }

  Status Run(const Engine& engine) {
    if (!made.ok()) return made;
    const Status st =
        model->Forward(engine, ConstTensor(q.data(), {s.batch, s.queries, s.query_size}),
                       ConstTensor(k.data(), {s.batch, s.queries, s.key_size}),
                       ConstTensor(v.data(), {s.batch, s.rows, s.value_size}), valid,
                       Tensor(out.data(), {s.batch, s.queries, s.outputs}));
    benchmark::DoNotOptimize(out.data());
    return st;
  }

  Shape s;
  std::vector<float> attn_w, attn_b, combine_w, combine_b, q, k, v, out;
  std::vector<int64_t> lens;
  ValidLens valid;
  std::unique_ptr<ConcatAttention> model;
  Status made;
};

void BM_Concat(benchmark::State& state) {
  ConcatCall call(ShapeOf(state));
  CallEachIteration(state, call);
  state.counters["GFLOPs"] =
      benchmark::Counter(Flops(call.s) * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Concat)->Apply(ConcatShapes);

// The encoder-sized shape on 2 threads against 1 (TwoThreadsAgainstOne).
void BM_ConcatTwoThreads(benchmark::State& state) {
  ConcatCall call(ShapeOf(state));
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_ConcatTwoThreads)
    ->ArgNames({"batch", "queries", "dq", "dk", "rows", "dv", "out"})
    ->Args({8, 256, 256, 256, 128, 256, 256})  // encoder-sized
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The peer: two plain oneDNN matmuls with bias over the concatenated inputs.
void BM_ConcatLinearLayersOnednn(benchmark::State& state) {
  const Shape s = ShapeOf(state);
  SharedEngine();  // applies the ISA cap and thread count first
  const int64_t rows = s.batch * s.queries;
  const int64_t score_in = s.query_size + s.key_size, combine_in = s.query_size + s.value_size;
  auto linear = [&](int64_t in, int64_t out, std::shared_ptr<const matmul::Plan>* plan) {
    matmul::Problem p;
    p.a = {rows, in, 0, in, 1};
    p.b = {in, out, 0, out, 1};
    p.c = {rows, out, 0, out, 1};
    p.bias = true;
    return matmul::GetPlan(p, plan);
  };
  std::shared_ptr<const matmul::Plan> scores_plan, combine_plan;
  Status st = linear(score_in, s.rows, &scores_plan);
  if (st.ok()) st = linear(combine_in, s.outputs, &combine_plan);
  if (!st.ok()) state.SkipWithError(st.message().c_str());
  const std::vector<float> q_k = RandomFloats(rows * score_in, 1), q_applied = RandomFloats(rows * combine_in, 2);
  const std::vector<float> attn_w = RandomFloats(score_in * s.rows, 3), attn_b = RandomFloats(s.rows, 4);
  const std::vector<float> combine_w = RandomFloats(combine_in * s.outputs, 5),
                           combine_b = RandomFloats(s.outputs, 6);
  std::vector<float> scores(static_cast<size_t>(rows * s.rows)), out(static_cast<size_t>(rows * s.outputs));
  const ImplementationLabel label;
  // A workspace of one thread, as a 1-thread engine's call lends one.
  internal::Workspace workspace(1);
  for (auto _ : state) {
    if (!st.ok()) break;
    st = scores_plan->Run(workspace, q_k.data(), attn_w.data(), scores.data(), attn_b.data());
    if (st.ok()) {
      st = combine_plan->Run(workspace, q_applied.data(), combine_w.data(), out.data(),
                             combine_b.data());
    }
    if (!st.ok()) state.SkipWithError(st.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
  state.counters["GFLOPs"] = benchmark::Counter(Flops(s) * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ConcatLinearLayersOnednn)->Apply(ConcatShapes);

}  // namespace
}  // namespace attnscore::bench
