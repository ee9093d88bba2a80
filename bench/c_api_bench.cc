// The C API's cost over the C++ API: d2l's dot-product toy through each,
// same engine options, same data (bench/dot_product_bench.cc has the C++ one).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "attnscore/c_api.h"
#include "bench_util.h"

namespace attnscore::bench {
namespace {

void BM_DotProductToyCApi(benchmark::State& state) {
  attnscore_engine_options options = attnscore_default_engine_options();
  options.threads = SharedEngine().options().threads;
  attnscore_engine* engine = nullptr;
  if (attnscore_status* s = attnscore_engine_create(&options, &engine)) {
    state.SkipWithError(attnscore_status_message(s));
    attnscore_status_free(s);
    return;
  }
  const std::vector<float> q = RandomFloats(2 * 1 * 2, 1);
  const std::vector<float> k(2 * 10 * 2, 1.0f);
  std::vector<float> v(2 * 10 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 40);
  std::vector<float> out(2 * 1 * 4);
  const int64_t lens_data[] = {2, 6};
  const attnscore_tensor_view qv = {q.data(), 3, {2, 1, 2}, {2, 2, 1}};
  const attnscore_tensor_view kv = {k.data(), 3, {2, 10, 2}, {20, 2, 1}};
  const attnscore_tensor_view vv = {v.data(), 3, {2, 10, 4}, {40, 4, 1}};
  const attnscore_tensor ov = {out.data(), 3, {2, 1, 4}, {4, 4, 1}};
  const attnscore_valid_lens lens = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, lens_data, {2, 0}};
  for (auto _ : state) {
    attnscore_status* s = attnscore_dot_product_attention(engine, &qv, &kv, &vv, &lens, &ov, nullptr);
    if (s != nullptr) {
      state.SkipWithError(attnscore_status_message(s));
      attnscore_status_free(s);
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  attnscore_engine_destroy(engine);
}

BENCHMARK(BM_DotProductToyCApi)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace attnscore::bench
