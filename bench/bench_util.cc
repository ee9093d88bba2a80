#include "bench_util.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/additive_scores.h"
#include "kernels/masked_softmax.h"
#include "matmul/matmul.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attnscore::bench {

namespace {
EngineOptions& ConfiguredOptions() {
  static EngineOptions options;
  return options;
}

std::map<std::string, int64_t> PlanRuns() {
  std::map<std::string, int64_t> runs;
  for (const matmul::PlanSummary& plan : matmul::CachedPlans()) {
    runs[plan.implementation + "\n" + plan.problem] += plan.runs;
  }
  return runs;
}
}  // namespace

void SetEngineOptions(const EngineOptions& options) { ConfiguredOptions() = options; }

const Engine& SharedEngine() {
  static std::unique_ptr<Engine> engine = [] {
    const EngineOptions& options = ConfiguredOptions();
    std::unique_ptr<Engine> created;
    Status s = Engine::Create(options, &created);
    if (!s.ok()) {
      std::fprintf(stderr, "attnscore_bench: error: %s\n", s.message().c_str());
      std::exit(2);
    }
    // Peers run outside engine calls, where OpenMP would use every core:
    // the whole process gets the engine's thread count, so a ratio compares
    // like with like (a 1-thread op against a 2-thread oneDNN peer once made
    // the peer look 1.9x faster).
    omp_set_num_threads(options.threads);
    benchmark::AddCustomContext("highway_target", kernels::MaskedSoftmaxTarget());
    benchmark::AddCustomContext("isa_cap", IsaName(created->options().isa));
    benchmark::AddCustomContext("onednn_version", matmul::OnednnVersion());
    benchmark::AddCustomContext("onednn_isa", matmul::OnednnIsa());
    benchmark::AddCustomContext("engine_threads", std::to_string(options.threads));
    benchmark::AddCustomContext("precision", PrecisionName(options.precision));
    benchmark::AddCustomContext("omp_max_threads", std::to_string(omp_get_max_threads()));
    return created;
  }();
  return *engine;
}

Status EngineWithThreads(int threads, std::unique_ptr<Engine>* engine) {
  SharedEngine();  // the process's context and OpenMP thread count first
  EngineOptions options = ConfiguredOptions();
  options.threads = threads;
  return Engine::Create(options, engine);
}

ImplementationLabel::ImplementationLabel() : runs_(PlanRuns()) {}

void ImplementationLabel::Apply(benchmark::State& state) const {
  std::set<std::string> used;
  for (const auto& [key, runs] : PlanRuns()) {
    const auto before = runs_.find(key);
    if (runs > (before == runs_.end() ? 0 : before->second)) used.insert(key.substr(0, key.find('\n')));
  }
  std::string label = kernels::MaskedSoftmaxTarget();
  const char* separator = ", onednn ";
  for (const std::string& name : used) {
    label += separator + name;
    separator = " + ";
  }
  state.SetLabel(label);
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> LinearWeights(int64_t out_features, int64_t in_features, uint32_t seed) {
  std::mt19937 rng(seed);
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  std::vector<float> w(static_cast<size_t>(out_features * in_features));
  for (float& x : w) x = uniform(rng);
  return w;
}

std::vector<int64_t> RandomLengths(int64_t count, int64_t keys, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> length(1, keys);
  std::vector<int64_t> lens(static_cast<size_t>(count));
  for (int64_t& l : lens) l = length(rng);
  return lens;
}

double ValidKeys(const std::vector<int64_t>& lens, int64_t queries, int64_t keys) {
  double total = 0;
  for (int64_t l : lens) total += static_cast<double>(std::min(l, keys) * queries);
  return total;
}

void CachedRead(benchmark::State& state) {
  SharedEngine();
  const int64_t floats = state.range(0) / 4;
  const std::vector<float> data = RandomFloats(floats, 5);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels::MaxAbs(data.data(), static_cast<size_t>(floats)));
  }
  state.SetBytesProcessed(state.range(0) * state.iterations());
}

namespace {
// The middle value (the upper of the two middle ones for an even count).
double Median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// The calls on each side of a round: as many as 1 thread makes in this
// time, at least one and at most kMaxRoundSideCalls.
constexpr double kRoundSideSeconds = 2e-3;
constexpr double kMaxRoundSideCalls = 1000;
}  // namespace

void TwoThreadsAgainstOne(benchmark::State& state, const std::function<double(int)>& timed) {
  // Both sides warmed (scratch, threads), then the rounds sized from 1 thread.
  std::vector<double> warm;
  for (int i = 0; i < 3 && !state.error_occurred(); ++i) {
    warm.push_back(timed(1));
    timed(2);
  }
  if (state.error_occurred()) return;
  const auto calls = static_cast<size_t>(
      std::clamp(std::ceil(kRoundSideSeconds / Median(warm)), 1.0, kMaxRoundSideCalls));
  std::vector<double> medians[2], speedups;
  size_t round = 0;
  for (auto _ : state) {
    double median[2];
    for (size_t turn = 0; turn < 2; ++turn) {
      const size_t side = (round + turn) % 2;  // 0: 1 thread
      std::vector<double> times(calls);
      for (double& t : times) t = timed(static_cast<int>(side) + 1);
      median[side] = Median(times);
      medians[side].push_back(median[side] * 1e6);
    }
    if (state.error_occurred()) break;
    speedups.push_back(median[0] / median[1]);
    ++round;
  }
  if (speedups.empty()) return;
  state.counters["one_thread_us"] = Median(medians[0]);
  state.counters["two_threads_us"] = Median(medians[1]);
  state.counters["speedup"] = Median(speedups);
}

void CachedReadTwoThreads(benchmark::State& state) {
  SharedEngine();
  const int64_t floats = state.range(0) / 4;
  const std::vector<float> data = RandomFloats(floats, 5);
  TwoThreadsAgainstOne(state, [&](int threads) {
    const auto start = std::chrono::steady_clock::now();
    if (threads == 1) {  // no OpenMP region, as the engine on 1 thread
      benchmark::DoNotOptimize(kernels::MaxAbs(data.data(), static_cast<size_t>(floats)));
    } else {
      int team = 0;
#pragma omp parallel num_threads(threads)
      {
        // Thread t of the n reads floats [floats·t/n, floats·(t + 1)/n).
        const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        const int64_t first = floats * t / n, last = floats * (t + 1) / n;
        benchmark::DoNotOptimize(
            kernels::MaxAbs(data.data() + first, static_cast<size_t>(last - first)));
        if (t == 0) team = static_cast<int>(n);
      }
      if (team != threads && !state.error_occurred()) {
        state.SkipWithError(("OpenMP gave " + std::to_string(team) + " threads of the " +
                             std::to_string(threads) + " asked for")
                                .c_str());
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
}

void OnednnMatmul(benchmark::State& state, int64_t batch, int64_t rows, int64_t inner,
                  int64_t cols, bool bf16) {
  SharedEngine();  // the OpenMP thread count
  std::vector<float> a = RandomFloats(batch * rows * inner, 1),
                     b = RandomFloats(batch * inner * cols, 2);
  std::vector<float> c(static_cast<size_t>(batch * rows * cols));
  // bf16 inputs: each float's upper half (truncated; the time does not
  // depend on the rounding).
  const auto upper_halves = [](const std::vector<float>& x) {
    std::vector<uint16_t> words(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &x[i], sizeof(bits));
      words[i] = static_cast<uint16_t>(bits >> 16);
    }
    return words;
  };
  std::vector<uint16_t> a16, b16;
  if (bf16) a16 = upper_halves(a), b16 = upper_halves(b);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dt input = bf16 ? dt::bf16 : dt::f32;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc a_md({batch, rows, inner}, input, tag::abc),
      b_md({batch, inner, cols}, input, tag::abc), c_md({batch, rows, cols}, dt::f32, tag::abc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  dnnl::matmul matmul(pd);
  dnnl::memory a_mem(a_md, engine, bf16 ? static_cast<void*>(a16.data()) : a.data()),
      b_mem(b_md, engine, bf16 ? static_cast<void*>(b16.data()) : b.data()),
      c_mem(c_md, engine, c.data());
  // One run before the timed ones: a process's first oneDNN gemm makes its
  // kernels just in time, which is not the matmul's time (nothing else in
  // the suite need have run one before).
  matmul.execute(stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  stream.wait();
  for (auto _ : state) {
    matmul.execute(stream,
                   {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(pd.impl_info_str());
  const double flops = 2.0 * static_cast<double>(batch * rows * cols * inner);
  state.counters["GFLOPS"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace attnscore::bench
