// How cost grows with the key count M: one batch entry, D = Dv = 64, M from
// 64 to 131,072 doubling, each workload beside the limit it is measured
// against at the same M. bench/sweep.py runs these (and bench/report.py
// leaves them out) and draws docs/sweep.md:
//   BM_SweepDecode    N = 1, every key valid, alternated round by round in
//                     one process with a read of its own K and V
//                     (AgainstItsRead): counters op_us and limit_us.
//   BM_SweepDecodeOffLines  the same call with Q, K and V 16 bytes past a
//                     64-byte line, where malloc puts a large std::vector's
//                     floats (and NumPy an array's); every other workload's
//                     inputs lie on lines, as PyTorch allocates a tensor's
//                     (LineFloats). bytes/s counts K and V read once;
//                     BM_SweepRead reads as many bytes on lines.
//   BM_SweepPrefill   N = M, query i sees keys 0..i (the per-query lengths of
//                     causal self-attention). GFLOP/s counts visible keys
//                     only, 2 (D + Dv) per (query, key); BM_SweepMatmul is one
//                     oneDNN matmul with that inner dimension, square, (n,
//                     D + Dv) · (D + Dv, n) with n = min(M, 1024): from M =
//                     1,024 on, the same 1024 × 1024 product at every M.
//   BM_SweepMultiHeadPrefill  the multi-head op, 8 heads of 64 (as many K/V
//                     heads), N = M, causal, M up to 16,384: BM_SweepPrefill's
//                     FLOPs 8 times over, against the same matmul.
//   BM_SweepGqaDecode{Fp32,Bf16,Int8}  a decoding step from a KvCache of
//                     that precision: B 1, 8 query heads over 2 KV heads, D
//                     64, M keys, in turn with a read of the bytes the cache
//                     holds for them (K and V; in int8, codes and their
//                     scales): counters op_us, limit_us and bytes.
//   BM_SweepAdditive  N = 16, Dq = Dk = H = Dv = 64, every key valid. Items/s
//                     counts (query, key, hidden) triples, one tanh each;
//                     its limit, BM_SweepAdditiveKernel (additive_bench.cc),
//                     is the op's score kernel alone at its best, on 4,096
//                     keys in cache.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "api/kv_cache_bytes.h"
#include "attnscore/additive.h"
#include "attnscore/multihead.h"
#include "bench_util.h"
#include "kv_cache_decode_call.h"

namespace attnscore::bench {
namespace {

constexpr int64_t kDepth = 64;
constexpr int64_t kFewestKeys = 64, kMostKeys = 131072;
constexpr int64_t kMultiHeadHeads = 8, kMultiHeadMostKeys = 16384;

void SweepKeys(benchmark::internal::Benchmark* b) {
  b->ArgName("keys");
  for (int64_t m = kFewestKeys; m <= kMostKeys; m *= 2) b->Arg(m);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// N queries over M keys of one entry with per-query lengths `lens` (N), Q,
// K and V `offset` floats past a 64-byte line.
struct SweepDotProduct {
  SweepDotProduct(int64_t queries, int64_t keys, std::vector<int64_t> lens, size_t offset)
      : queries(queries),
        keys(keys),
        lens(std::move(lens)),
        q(RandomFloats(queries * kDepth, 1), offset),
        k(RandomFloats(keys * kDepth, 2), offset),
        v(RandomFloats(keys * kDepth, 3), offset),
        out(static_cast<size_t>(queries * kDepth)) {}

  Status Run(const Engine& engine) {
    Status s = engine.DotProductAttention(
        ConstTensor(q.data(), {1, queries, kDepth}), ConstTensor(k.data(), {1, keys, kDepth}),
        ConstTensor(v.data(), {1, keys, kDepth}), ValidLens::PerQuery(lens.data(), 1, queries),
        Tensor(out.data(), {1, queries, kDepth}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  const int64_t queries, keys;
  const std::vector<int64_t> lens;
  const LineFloats q, k, v;
  std::vector<float> out;
};

void RunDotProduct(benchmark::State& state, int64_t queries, const std::vector<int64_t>& lens,
                   size_t offset = 0) {
  SweepDotProduct call(queries, state.range(0), lens, offset);
  RunEachIteration(state, SharedEngine(), call);
  double visible = 0;
  for (int64_t l : lens) visible += static_cast<double>(l);
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * visible * 2 * kDepth * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(static_cast<int64_t>(4.0 * static_cast<double>(call.keys * 2 * kDepth)) *
                          state.iterations());
}

// `call` (a Run(engine) returning a Status) in turn with a read of `spans`,
// round by round, on the shared engine (AgainstItsRead), labelled.
template <class Call>
void AgainstReadOf(benchmark::State& state, Call& call,
                   const std::vector<std::pair<const void*, size_t>>& spans) {
  const Engine& engine = SharedEngine();
  const ImplementationLabel label;
  AgainstItsRead(
      state, [&] { return SecondsOf(state, [&] { return call.Run(engine); }); },
      [&] { return SecondsToRead(spans); });
  label.Apply(state);
}

// The decode in turn with the read of its own K and V, round by round. Run
// minutes apart, as the sweep runs its families, the two moved apart by
// more than the changes the share is to show: two sweeps of one build (a
// Zen 5 under KVM) put decode of 1,024 keys at 74% and 58% of the read, of
// 32,768 keys at 92% and 66%; taking turns, two runs gave 84.1% and 84.0%,
// 92.5% and 92.6%.
void BM_SweepDecode(benchmark::State& state) {
  SweepDotProduct call(1, state.range(0), {state.range(0)}, 0);
  const auto bytes = static_cast<size_t>(call.keys * kDepth) * sizeof(float);
  AgainstReadOf(state, call, {{call.k.data(), bytes}, {call.v.data(), bytes}});
}
BENCHMARK(BM_SweepDecode)->Apply(SweepKeys);

void BM_SweepDecodeOffLines(benchmark::State& state) {
  RunDotProduct(state, 1, {state.range(0)}, /*offset=*/4);
}
BENCHMARK(BM_SweepDecodeOffLines)->Apply(SweepKeys);

void BM_SweepRead(benchmark::State& state) { CachedReadOnLines(state); }
// K and V of the decode at each M: M (D + Dv) floats.
BENCHMARK(BM_SweepRead)
    ->ArgName("bytes")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t m = kFewestKeys; m <= kMostKeys; m *= 2) b->Arg(m * 2 * kDepth * 4);
    });

void BM_SweepPrefill(benchmark::State& state) {
  std::vector<int64_t> lens(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < lens.size(); ++i) lens[i] = static_cast<int64_t>(i) + 1;
  RunDotProduct(state, state.range(0), lens);
}
BENCHMARK(BM_SweepPrefill)->Apply(SweepKeys);

void BM_SweepMultiHeadPrefill(benchmark::State& state) {
  const int64_t keys = state.range(0), heads = kMultiHeadHeads;
  const Engine& engine = SharedEngine();
  const LineFloats q(RandomFloats(keys * heads * kDepth, 1));
  const LineFloats k(RandomFloats(keys * heads * kDepth, 2));
  const LineFloats v(RandomFloats(keys * heads * kDepth, 3));
  std::vector<float> out(static_cast<size_t>(keys * heads * kDepth));
  MultiHeadOptions options;
  options.causal = Causal::kBottomRight;
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = engine.MultiHeadAttention(ConstTensor(q.data(), {1, keys, heads, kDepth}),
                                         ConstTensor(k.data(), {1, keys, heads, kDepth}),
                                         ConstTensor(v.data(), {1, keys, heads, kDepth}),
                                         ValidLens::None(), options,
                                         Tensor(out.data(), {1, keys, heads, kDepth}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
  const double visible = 0.5 * static_cast<double>(keys) * static_cast<double>(keys + 1);
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(heads) * 2.0 * visible * 2 * kDepth * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SweepMultiHeadPrefill)
    ->ArgName("keys")
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->Apply([](benchmark::internal::Benchmark* b) {
      for (int64_t m = kFewestKeys; m <= kMultiHeadMostKeys; m *= 2) b->Arg(m);
    });

void BM_SweepMatmul(benchmark::State& state) {
  const int64_t side = std::min<int64_t>(state.range(0), 1024);
  OnednnMatmul(state, 1, side, 2 * kDepth, side);
}
BENCHMARK(BM_SweepMatmul)->Apply(SweepKeys);

constexpr int64_t kGqaHeads = 8, kGqaKvHeads = 2;

// The step in turn with a read of the bytes its cache holds, round by
// round, as BM_SweepDecode with its K and V: counters op_us and limit_us,
// and bytes, those the cache holds. Run apart, in two sweeps of one build
// (a Zen 5 under KVM) the fp32 read of 32,768 or 65,536 keys and the bf16
// read of 131,072 came out slower than the steps they bound (the steps at
// 132-157% of the reads' rate).
void SweepGqa(benchmark::State& state, Precision precision) {
  KvCacheDecodeCall call(1, state.range(0), kGqaHeads, kGqaKvHeads, kDepth, /*pooled=*/false,
                         precision);
  if (!call.status.ok()) {
    state.SkipWithError(call.status.message().c_str());
    return;
  }
  const std::vector<std::pair<const void*, size_t>> held =
      internal::KvCacheBytes::Held(*call.cache);
  AgainstReadOf(state, call, held);
  double bytes = 0;
  for (const auto& span : held) bytes += static_cast<double>(span.second);
  state.counters["bytes"] = bytes;
}

void BM_SweepGqaDecodeFp32(benchmark::State& state) { SweepGqa(state, Precision::kFp32); }
void BM_SweepGqaDecodeBf16(benchmark::State& state) { SweepGqa(state, Precision::kBf16); }
void BM_SweepGqaDecodeInt8(benchmark::State& state) { SweepGqa(state, Precision::kInt8); }
BENCHMARK(BM_SweepGqaDecodeFp32)->Apply(SweepKeys);
BENCHMARK(BM_SweepGqaDecodeBf16)->Apply(SweepKeys);
BENCHMARK(BM_SweepGqaDecodeInt8)->Apply(SweepKeys);

void BM_SweepAdditive(benchmark::State& state) {
  constexpr int64_t kQueries = 16, kSize = 64;
  const int64_t keys = state.range(0);
  const Engine& engine = SharedEngine();
  const std::vector<float> w_q = LinearWeights(kSize, kSize, 5),
                           w_k = LinearWeights(kSize, kSize, 6), w_v = LinearWeights(1, kSize, 7);
  std::unique_ptr<AdditiveAttention> model;
  Status s = AdditiveAttention::Create(ConstTensor(w_q.data(), {kSize, kSize}),
                                       ConstTensor(w_k.data(), {kSize, kSize}),
                                       ConstTensor(w_v.data(), {1, kSize}), &model);
  if (!s.ok()) state.SkipWithError(s.message().c_str());
  const LineFloats q(RandomFloats(kQueries * kSize, 1));
  const LineFloats k(RandomFloats(keys * kSize, 2));
  const LineFloats v(RandomFloats(keys * kSize, 3));
  std::vector<float> out(static_cast<size_t>(kQueries * kSize));
  const ImplementationLabel label;
  for (auto _ : state) {
    if (!model) break;
    s = model->Forward(engine, ConstTensor(q.data(), {1, kQueries, kSize}),
                       ConstTensor(k.data(), {1, keys, kSize}),
                       ConstTensor(v.data(), {1, keys, kSize}), ValidLens::None(),
                       Tensor(out.data(), {1, kQueries, kSize}));
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  label.Apply(state);
  state.SetItemsProcessed(kQueries * keys * kSize * state.iterations());
}
BENCHMARK(BM_SweepAdditive)->Apply(SweepKeys);

}  // namespace
}  // namespace attnscore::bench
