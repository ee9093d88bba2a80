// Peers measured in the same binary as the ops, for ratios from one run:
// memcpy of the bytes the masked softmax moves (counted as read + written,
// like the softmax's own bytes), and one plain oneDNN matmul with the FLOPs
// of each dot-product shape.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>

#include "bench_util.h"
#include "matmul/matmul.h"

namespace attnscore::bench {
namespace {

// memcpy of `bytes` bytes between two buffers, timed over the state's
// iterations; the bytes processed count them read and written.
void CopyBytes(benchmark::State& state, size_t bytes) {
  SharedEngine();  // same context as the other benchmarks
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * state.iterations());
}

// Copies half the softmax's byte count, so reads + writes equal its bytes.
void BM_Memcpy(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const double bytes =
      4.0 * (ValidKeys(lens, 1, keys) + static_cast<double>(batch * queries * keys));
  CopyBytes(state, static_cast<size_t>(bytes / 2));
}

BENCHMARK(BM_Memcpy)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Copies a (B, N, M) float array into another: the op's own footprint (x and
// y), which no longer fits in L3, where BM_Memcpy's half-size copy does.
void BM_MemcpyOpBuffers(benchmark::State& state) {
  CopyBytes(state,
            static_cast<size_t>(state.range(0) * state.range(1) * state.range(2)) * sizeof(float));
}

BENCHMARK(BM_MemcpyOpBuffers)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One plain oneDNN matmul doing as many FLOPs as BM_DotProduct counts for the
// same args, 2·B·N·L·(D + Dv) with L the mean valid length (per batch entry,
// or with BM_OnednnMatmulPerQuery per query, as BM_DotProductPerQuery's), in
// two shapes:
//   inner:0  C (B·N, L)  = A (B·N, D + Dv) · W (D + Dv, L)
//   inner:1  C (B·N, 2L) = A (B·N, D) · W (D, 2L), the op's own Q·Kᵀ widened;
// oneDNN is slower with the shorter inner dimension, so both are reported.
// In a --precision bf16 run A and W are bf16 (C stays f32), as the op's are;
// where oneDNN has no bf16 arithmetic the op runs f32 matmuls on rounded
// values instead (matmul::NativeBf16), and so does this peer.
void DotProductPeer(benchmark::State& state, bool per_query) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2),
                depth = state.range(3);
  const bool inner_is_depth = state.range(4) != 0;
  const bool bf16 = SharedEngine().options().precision == Precision::kBf16 &&  // cap, threads
                    matmul::NativeBf16();
  const std::vector<int64_t> lens = DotProductLengths(batch, queries, keys, per_query);
  const auto mean_valid =
      static_cast<int64_t>(ValidKeys(lens, 1, keys) / static_cast<double>(lens.size()) + 0.5);
  const int64_t m = batch * queries;
  const int64_t k = inner_is_depth ? depth : 2 * depth;
  const int64_t n = inner_is_depth ? 2 * mean_valid : mean_valid;
  OnednnMatmul(state, 1, m, k, n, bf16);
}

void BM_OnednnMatmul(benchmark::State& state) { DotProductPeer(state, /*per_query=*/false); }
void BM_OnednnMatmulPerQuery(benchmark::State& state) { DotProductPeer(state, /*per_query=*/true); }

BENCHMARK(BM_OnednnMatmul)
    ->ArgNames({"batch", "queries", "keys", "dim", "inner"})
    ->ArgsProduct({{8}, {1}, {1024}, {64}, {0, 1}})
    ->ArgsProduct({{4}, {128}, {128}, {64}, {0, 1}})
    ->ArgsProduct({{1}, {1024}, {4096}, {64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

BENCHMARK(BM_OnednnMatmulPerQuery)
    ->ArgNames({"batch", "queries", "keys", "dim", "inner"})
    ->ArgsProduct({{4}, {128}, {128}, {64}, {0, 1}})
    ->ArgsProduct({{1}, {1024}, {4096}, {64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// This machine's limits, which docs/performance.md sets every workload
// against (bench/report.py's limits table):
//   BM_LimitMatmul  one large oneDNN matmul, (1024, 256) · (256, 1024), fp32
//                   or bf16 inputs (precision 0 or 1); bf16 only where the
//                   CPU has bf16 arithmetic, else skipped saying so;
//   BM_LimitCopy    memcpy of 64 MiB, past any L3: read + written bytes;
//   BM_LimitRead    a vector read of 256 KiB (L2), 4 or 16 MiB (L3) or
//                   256 MiB (memory), the whole buffer once per iteration.
void BM_LimitMatmul(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  if (bf16 && !matmul::NativeBf16()) {
    state.SkipWithError(kNoBf16Arithmetic);
    return;
  }
  OnednnMatmul(state, 1, kLimitMatmulRows, kLimitMatmulInner, kLimitMatmulCols, bf16);
}

BENCHMARK(BM_LimitMatmul)
    ->ArgName("precision")
    ->DenseRange(0, 1)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_LimitCopy(benchmark::State& state) {
  CopyBytes(state, static_cast<size_t>(state.range(0)));
}

BENCHMARK(BM_LimitCopy)
    ->ArgName("bytes")
    ->Arg(int64_t{64} << 20)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_LimitRead(benchmark::State& state) { CachedRead(state); }

BENCHMARK(BM_LimitRead)
    ->ArgName("bytes")
    ->Arg(int64_t{256} << 10)
    ->Arg(int64_t{4} << 20)
    ->Arg(int64_t{16} << 20)
    ->Arg(int64_t{256} << 20)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The peer of BM_DotProductTwoThreads' decode rows: a read of as many bytes
// as their K and V, on 2 threads against 1.
void BM_CachedReadTwoThreads(benchmark::State& state) { CachedReadTwoThreads(state); }

BENCHMARK(BM_CachedReadTwoThreads)
    ->ArgName("bytes")
    ->Arg(int64_t{4} * 8 * 1024 * 2 * 64)  // decode (8, 1, 1024): B M (D + Dv) floats
    ->Arg(int64_t{4} * 1 * 4096 * 2 * 64)  // decode (1, 1, 4096)
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
