// Peers measured in the same binary as the ops, for ratios from one run:
// memcpy of the bytes the masked softmax moves (counted as read + written,
// like the softmax's own bytes), and one plain oneDNN matmul with the FLOPs
// of each dot-product shape.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>

#include "bench_util.h"
#include "matmul/matmul.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attnscore::bench {
namespace {

// Copies half the softmax's byte count, so reads + writes equal its bytes.
void BM_Memcpy(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  SharedEngine();  // same context as the other benchmarks
  const std::vector<int64_t> lens = RandomLengths(batch * queries, keys, 2);
  const double bytes = 4.0 * (ValidKeys(lens, 1, keys) + static_cast<double>(batch * queries * keys));
  const size_t copied = static_cast<size_t>(bytes / 2);
  std::vector<char> src(copied, 1), dst(copied);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), copied);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * copied) * state.iterations());
}

BENCHMARK(BM_Memcpy)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// Copies a (B, N, M) float array into another: the op's own footprint (x and
// y), which no longer fits in L3, where BM_Memcpy's half-size copy does.
void BM_MemcpyOpBuffers(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2);
  SharedEngine();
  const size_t bytes = static_cast<size_t>(batch * queries * keys) * sizeof(float);
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(2 * bytes) * state.iterations());
}

BENCHMARK(BM_MemcpyOpBuffers)
    ->ArgNames({"batch", "queries", "keys"})
    ->Args({64, 128, 512})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// One plain oneDNN matmul doing as many FLOPs as BM_DotProduct counts for the
// same args, 2·B·N·L·(D + Dv) with L the mean valid length, in two shapes:
//   inner:0  C (B·N, L)  = A (B·N, D + Dv) · W (D + Dv, L)
//   inner:1  C (B·N, 2L) = A (B·N, D) · W (D, 2L), the op's own Q·Kᵀ widened;
// oneDNN is slower with the shorter inner dimension, so both are reported.
// In a --precision bf16 run A and W are bf16 (C stays f32), as the op's are;
// where oneDNN has no bf16 arithmetic the op runs f32 matmuls on rounded
// values instead (matmul::NativeBf16), and so does this peer.
void BM_OnednnMatmul(benchmark::State& state) {
  const int64_t batch = state.range(0), queries = state.range(1), keys = state.range(2),
                depth = state.range(3);
  const bool inner_is_depth = state.range(4) != 0;
  const bool bf16 = SharedEngine().options().precision == Precision::kBf16 &&  // cap, threads
                    matmul::NativeBf16();
  const std::vector<int64_t> lens = RandomLengths(batch, keys, 4);
  const auto mean_valid =
      static_cast<int64_t>(ValidKeys(lens, 1, keys) / static_cast<double>(batch) + 0.5);
  const int64_t m = batch * queries;
  const int64_t k = inner_is_depth ? depth : 2 * depth;
  const int64_t n = inner_is_depth ? 2 * mean_valid : mean_valid;
  std::vector<float> a = RandomFloats(m * k, 1), w = RandomFloats(k * n, 2);
  std::vector<float> c(static_cast<size_t>(m * n));
  // bf16 words of the same values: their upper halves (truncated; the time
  // does not depend on the rounding).
  const auto to_bf16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> words(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], sizeof(bits));
      words[i] = static_cast<uint16_t>(bits >> 16);
    }
    return words;
  };
  std::vector<uint16_t> a16, w16;
  if (bf16) a16 = to_bf16(a), w16 = to_bf16(w);
  void* a_data = bf16 ? static_cast<void*>(a16.data()) : a.data();
  void* w_data = bf16 ? static_cast<void*>(w16.data()) : w.data();
  const dnnl::memory::data_type input = bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;

  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc a_md({m, k}, input, tag::ab), w_md({k, n}, input, tag::ab),
      c_md({m, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, w_md, c_md), engine);
  dnnl::matmul matmul(pd);
  dnnl::memory a_mem(a_md, engine, a_data), w_mem(w_md, engine, w_data),
      c_mem(c_md, engine, c.data());
  for (auto _ : state) {
    matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(pd.impl_info_str());
  const double flops = 2.0 * static_cast<double>(m * n * k);
  state.counters["GFLOPS"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_OnednnMatmul)
    ->ArgNames({"batch", "queries", "keys", "dim", "inner"})
    ->ArgsProduct({{8}, {1}, {1024}, {64}, {0, 1}})
    ->ArgsProduct({{4}, {128}, {128}, {64}, {0, 1}})
    ->ArgsProduct({{1}, {1024}, {4096}, {64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
