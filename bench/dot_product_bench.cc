// Scaled dot-product attention on the decode, encoder and long shapes, with
// random valid lengths (DotProductLengths: decode's in [M/2, M], the others'
// in [1, M]): per batch entry (BM_DotProduct) or per query
// (BM_DotProductPerQuery). GFLOP/s counts only valid keys:
// 2·L·(D + Dv) per query; BM_OnednnMatmul (PerQuery) in peers_bench.cc runs
// one oneDNN matmul of the same FLOPs. bytes/s counts Q, out and the K, V
// rows some query of the entry attends to. BM_DotProductTwoThreads times
// the decode, encoder and long calls on 2 threads against 1;
// BM_DotProductAgainstLimit, some of them against their limits, and
// BM_DotProductBf16AgainstLimit, the long one in bf16 against its bf16 limit.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "ops/dot_product_paths.h"

namespace attnscore::bench {
namespace {

// One dot-product call on random inputs: (B, N, D) queries, (B, M, D) keys
// and values, lengths random (DotProductLengths) per batch entry or per query.
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
        lens(DotProductLengths(batch, queries, keys, per_query)) {}

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

  // 2·L·(D + Dv) per query over its L valid keys (Dv = D here).
  double Flops() const {
    return 2.0 * ValidKeys(lens, rows_per_length, keys) * static_cast<double>(2 * depth);
  }

  // The K and V rows entry b reads: those below its longest length.
  int64_t RowsRead(int64_t b) const {
    const int64_t lengths = queries / rows_per_length;  // per entry
    const auto first = lens.begin() + b * lengths;
    return std::min(keys, *std::max_element(first, first + lengths));
  }

  // Q, out and each entry's K and V rows read.
  double Bytes() const {
    double rows_read = 0;
    for (int64_t b = 0; b < batch; ++b) rows_read += static_cast<double>(RowsRead(b));
    return 4.0 * static_cast<double>(2 * depth) *
           (static_cast<double>(batch * queries) + rows_read);
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
  RunEachIteration(state, SharedEngine(), call);
  state.counters["GFLOPS"] =
      benchmark::Counter(call.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(call.Bytes()) * state.iterations());
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
  CallTwoThreadsAgainstOne(state, call);
}

BENCHMARK(BM_DotProductTwoThreads)
    ->ArgNames({"batch", "queries", "keys", "dim", "per_query"})
    ->Args({8, 1, 1024, 64, 0})     // decode
    ->Args({1, 1, 4096, 64, 0})     // decode, one sequence: its keys split among threads
    ->Args({4, 128, 128, 64, 0})    // encoder
    ->Args({4, 128, 128, 64, 1})    // encoder, per-query lengths
    ->Args({1, 1024, 4096, 64, 0})  // long
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// BM_DotProduct's call (or, with per_query, BM_DotProductPerQuery's)
// against the limit that bounds it, alternated on 1 thread: decode (at most
// 3 queries) against a read of the K and V rows it reads, each entry's below
// its longest length, from the call's own buffers (AgainstItsRead); the
// others against the matmul limit (AgainstLimitMatmul).
void BM_DotProductAgainstLimit(benchmark::State& state) {
  DotProductCall call(state.range(0), state.range(1), state.range(2), state.range(3),
                      state.range(4) != 0);
  const std::unique_ptr<Engine> engine = EngineOrSkip(state, 1);
  if (!engine) return;
  const auto timed_call = [&] { return SecondsOf(state, [&] { return call.Run(*engine); }); };
  const ImplementationLabel label;
  // Decode, as report.py tells it: the engine's row path.
  if (call.queries <= ops::dot_product::kRowPathMaxQueries) {
    std::vector<std::pair<const void*, size_t>> rows;
    for (int64_t b = 0; b < call.batch; ++b) {
      const auto bytes = static_cast<size_t>(call.RowsRead(b) * call.depth) * sizeof(float);
      rows.emplace_back(call.k.data() + b * call.keys * call.depth, bytes);
      rows.emplace_back(call.v.data() + b * call.keys * call.depth, bytes);
    }
    AgainstItsRead(state, timed_call, [&] { return SecondsToRead(rows); });
  } else {
    AgainstLimitMatmul(state, timed_call, call.Flops());
  }
  label.Apply(state);
}

BENCHMARK(BM_DotProductAgainstLimit)
    ->ArgNames({"batch", "queries", "keys", "dim", "per_query"})
    ->Args({8, 1, 1024, 64, 0})     // decode
    ->Args({1, 1, 4096, 64, 0})     // decode, one sequence
    ->Args({4, 128, 128, 64, 1})    // encoder, per-query lengths
    ->Args({1, 1024, 4096, 64, 0})  // long
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The long call in bf16 against oneDNN's bf16 matmul, whatever --precision
// says, alternated on 1 thread; skipped where the CPU has no bf16
// arithmetic (the engine's bf16 mode then runs fp32 matmuls, see
// matmul::NativeBf16).
void BM_DotProductBf16AgainstLimit(benchmark::State& state) {
  DotProductCall call(state.range(0), state.range(1), state.range(2), state.range(3),
                      state.range(4) != 0);
  const std::unique_ptr<Engine> engine = EngineOrSkip(state, 1, Precision::kBf16);
  if (!engine) return;
  const ImplementationLabel label;
  AgainstLimitMatmul(
      state, [&] { return SecondsOf(state, [&] { return call.Run(*engine); }); }, call.Flops(),
      Precision::kBf16);
  label.Apply(state);
}

BENCHMARK(BM_DotProductBf16AgainstLimit)
    ->ArgNames({"batch", "queries", "keys", "dim", "per_query"})
    ->Args({1, 1024, 4096, 64, 0})  // long
    ->Iterations(15)
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
    Status s = engine.DotProductAttention(
        ConstTensor(q.data(), {2, 1, 2}), ConstTensor(k.data(), {2, 10, 2}),
        ConstTensor(v.data(), {2, 10, 4}), ValidLens::PerBatch(lens, 2),
        Tensor(out.data(), {2, 1, 4}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
}

BENCHMARK(BM_DotProductToy)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
