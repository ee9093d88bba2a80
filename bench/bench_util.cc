#include "bench_util.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/additive_scores.h"
#include "kernels/masked_softmax.h"
#include "matmul/matmul.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "ops/dot_product_paths.h"

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

std::unique_ptr<Engine> EngineOrSkip(benchmark::State& state, int threads) {
  return EngineOrSkip(state, threads, ConfiguredOptions().precision);
}

std::unique_ptr<Engine> EngineOrSkip(benchmark::State& state, int threads, Precision precision) {
  SharedEngine();  // the process's context and OpenMP thread count first
  EngineOptions options = ConfiguredOptions();
  options.threads = threads;
  options.precision = precision;
  std::unique_ptr<Engine> engine;
  if (Status s = Engine::Create(options, &engine); !s.ok()) {
    state.SkipWithError(s.message().c_str());
    return nullptr;
  }
  return engine;
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

std::vector<int64_t> RandomLengths(int64_t count, int64_t keys, uint32_t seed, int64_t shortest) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> length(shortest, keys);
  std::vector<int64_t> lens(static_cast<size_t>(count));
  for (int64_t& l : lens) l = length(rng);
  return lens;
}

std::vector<int64_t> DotProductLengths(int64_t batch, int64_t queries, int64_t keys,
                                       bool per_query) {
  const int64_t shortest =
      queries <= ops::dot_product::kRowPathMaxQueries ? std::max<int64_t>(1, keys / 2) : 1;
  return RandomLengths(per_query ? batch * queries : batch, keys, 4, shortest);
}

double ValidKeys(const std::vector<int64_t>& lens, int64_t queries, int64_t keys) {
  double total = 0;
  for (int64_t l : lens) total += static_cast<double>(std::min(l, keys) * queries);
  return total;
}

namespace {
constexpr std::align_val_t kLine{64};
}  // namespace

void LineFloats::Free::operator()(float* p) const { ::operator delete[](p, kLine); }

LineFloats::LineFloats(const std::vector<float>& values, size_t offset)
    : buffer_(
          static_cast<float*>(::operator new[]((values.size() + offset) * sizeof(float), kLine))),
      data_(buffer_.get() + offset) {
  std::copy(values.begin(), values.end(), data_);
}

namespace {
void ReadLoop(benchmark::State& state, const float* data) {
  const auto floats = static_cast<size_t>(state.range(0) / 4);
  for (auto _ : state) benchmark::DoNotOptimize(kernels::MaxAbs(data, floats));
  state.SetBytesProcessed(state.range(0) * state.iterations());
}
}  // namespace

void CachedRead(benchmark::State& state) {
  SharedEngine();
  const std::vector<float> data = RandomFloats(state.range(0) / 4, 5);
  ReadLoop(state, data.data());
}

void CachedReadOnLines(benchmark::State& state) {
  SharedEngine();
  const LineFloats data(RandomFloats(state.range(0) / 4, 5));
  ReadLoop(state, data.data());
}

namespace {
// The middle value (the upper of the two middle ones for an even count).
double Median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// The calls on each side of a round: as many as that side makes in this
// time, at least kMinRoundSideCalls (so that their median leaves out a
// first call slowed by the other side) and at most kMaxRoundSideCalls.
constexpr double kRoundSideSeconds = 2e-3;
constexpr double kMinRoundSideCalls = 3;
constexpr double kMaxRoundSideCalls = 1000;
}  // namespace

bool TimeAlternated(benchmark::State& state, const std::function<double(int side)>& timed,
                    AlternatedTimes* times) {
  // Both sides warmed (scratch, threads, caches), then each side's calls
  // a round sized from its own time.
  std::vector<double> warm[2];
  for (int i = 0; i < 3 && !state.error_occurred(); ++i) {
    for (int side = 0; side < 2; ++side) warm[side].push_back(timed(side));
  }
  if (state.error_occurred()) return false;
  size_t calls[2];
  for (int side = 0; side < 2; ++side) {
    calls[side] = static_cast<size_t>(std::clamp(std::ceil(kRoundSideSeconds / Median(warm[side])),
                                                 kMinRoundSideCalls, kMaxRoundSideCalls));
  }
  std::vector<double> medians[2], ratios;
  size_t round = 0;
  for (auto _ : state) {
    double median[2];
    for (size_t turn = 0; turn < 2; ++turn) {
      const size_t side = (round + turn) % 2;
      std::vector<double> call_times(calls[side]);
      for (double& t : call_times) t = timed(static_cast<int>(side));
      median[side] = Median(call_times);
      medians[side].push_back(median[side] * 1e6);
    }
    if (state.error_occurred()) break;
    ratios.push_back(median[0] / median[1]);
    ++round;
  }
  if (ratios.empty()) return false;
  *times = {{Median(medians[0]), Median(medians[1])}, Median(ratios)};
  return true;
}

void TwoThreadsAgainstOne(benchmark::State& state, const std::function<double(int)>& timed) {
  AlternatedTimes t;
  const auto on_threads = [&](int side) { return timed(side + 1); };  // side 0: 1 thread
  if (!TimeAlternated(state, on_threads, &t)) return;
  state.counters["one_thread_us"] = t.median_us[0];
  state.counters["two_threads_us"] = t.median_us[1];
  state.counters["speedup"] = t.ratio;
}

namespace {
// The process's OpenMP thread count set to `threads` for the scope's life,
// then restored.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) : saved_(omp_get_max_threads()) {
    omp_set_num_threads(threads);
  }
  ~OmpThreadsScope() { omp_set_num_threads(saved_); }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  int saved_;
};

// AgainstItsRead and AgainstLimitMatmul: limit_share is the median of the
// rounds' limit ÷ call times, times `scale`.
void AgainstLimit(benchmark::State& state, const std::function<double()>& call,
                  const std::function<double()>& limit, double scale) {
  AlternatedTimes t;
  const auto limit_then_call = [&](int side) { return side == 0 ? limit() : call(); };
  if (!TimeAlternated(state, limit_then_call, &t)) return;
  state.counters["limit_us"] = t.median_us[0];
  state.counters["op_us"] = t.median_us[1];
  state.counters["limit_share"] = t.ratio * scale;
}
}  // namespace

void AgainstItsRead(benchmark::State& state, const std::function<double()>& call,
                    const std::function<double()>& read) {
  AgainstLimit(state, call, read, 1.0);
}

void AgainstLimitMatmul(benchmark::State& state, const std::function<double()>& call,
                        double call_flops) {
  AgainstLimitMatmul(state, call, call_flops, ConfiguredOptions().precision);
}

void AgainstLimitMatmul(benchmark::State& state, const std::function<double()>& call,
                        double call_flops, Precision precision) {
  const bool bf16 = precision == Precision::kBf16;
  if (bf16 && !matmul::NativeBf16()) {
    state.SkipWithError(kNoBf16Arithmetic);
    return;
  }
  // The call runs on 1 thread, so does its limit: oneDNN splits a matmul
  // among the OpenMP threads it sees when the primitive is made and run.
  const OmpThreadsScope one_thread(1);
  OnednnMatmulCall matmul(1, kLimitMatmulRows, kLimitMatmulInner, kLimitMatmulCols, bf16);
  const auto limit = [&] {
    return SecondsOf(state, [&] {
      matmul.Run();
      return Status::Ok();
    });
  };
  // Rates: call_flops / call time ÷ matmul flops / matmul time.
  AgainstLimit(state, call, limit, call_flops / matmul.Flops());
}

double SecondsOf(benchmark::State& state, const std::function<Status()>& call) {
  const auto start = std::chrono::steady_clock::now();
  const Status s = call();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok() && !state.error_occurred()) state.SkipWithError(s.message().c_str());
  return seconds;
}

double SecondsToRead(const std::vector<std::pair<const void*, size_t>>& spans) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [first, bytes] : spans) {
    benchmark::DoNotOptimize(kernels::MaxAbs(static_cast<const float*>(first), bytes / 4));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CachedReadTwoThreads(benchmark::State& state) {
  SharedEngine();
  const int64_t floats = state.range(0) / 4;
  const std::vector<float> data = RandomFloats(floats, 5);
  TwoThreadsAgainstOne(state, [&](int threads) {
    // On 1 thread, no OpenMP region, as the engine on 1 thread.
    if (threads == 1) return SecondsToRead({{data.data(), static_cast<size_t>(floats) * 4}});
    const auto start = std::chrono::steady_clock::now();
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
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (team != threads && !state.error_occurred()) {
      state.SkipWithError(("OpenMP gave " + std::to_string(team) + " threads of the " +
                           std::to_string(threads) + " asked for")
                              .c_str());
    }
    return seconds;
  });
}

struct OnednnMatmulCall::Parts {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;  // bf16 inputs
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul matmul;
  std::unordered_map<int, dnnl::memory> args;
};

OnednnMatmulCall::OnednnMatmulCall(int64_t batch, int64_t rows, int64_t inner, int64_t cols,
                                   bool bf16)
    : flops_(2.0 * static_cast<double>(batch * rows * cols * inner)) {
  SharedEngine();  // the process's OpenMP thread count, before oneDNN starts
  parts_ = std::make_unique<Parts>();
  Parts& p = *parts_;
  p.a = RandomFloats(batch * rows * inner, 1);
  p.b = RandomFloats(batch * inner * cols, 2);
  p.c.resize(static_cast<size_t>(batch * rows * cols));
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
  if (bf16) p.a16 = upper_halves(p.a), p.b16 = upper_halves(p.b);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dt input = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc a_md({batch, rows, inner}, input, tag::abc),
      b_md({batch, inner, cols}, input, tag::abc), c_md({batch, rows, cols}, dt::f32, tag::abc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), p.engine);
  p.matmul = dnnl::matmul(pd);
  implementation_ = pd.impl_info_str();
  p.args = {{DNNL_ARG_SRC,
             dnnl::memory(a_md, p.engine, bf16 ? static_cast<void*>(p.a16.data()) : p.a.data())},
            {DNNL_ARG_WEIGHTS,
             dnnl::memory(b_md, p.engine, bf16 ? static_cast<void*>(p.b16.data()) : p.b.data())},
            {DNNL_ARG_DST, dnnl::memory(c_md, p.engine, p.c.data())}};
  Run();
}

OnednnMatmulCall::~OnednnMatmulCall() = default;

void OnednnMatmulCall::Run() {
  parts_->matmul.execute(parts_->stream, parts_->args);
  parts_->stream.wait();
  benchmark::DoNotOptimize(parts_->c.data());
}

void OnednnMatmul(benchmark::State& state, int64_t batch, int64_t rows, int64_t inner, int64_t cols,
                  bool bf16) {
  OnednnMatmulCall matmul(batch, rows, inner, cols, bf16);
  for (auto _ : state) matmul.Run();
  state.SetLabel(matmul.Implementation());
  state.counters["GFLOPS"] =
      benchmark::Counter(matmul.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace attnscore::bench
