// Shared set-up for the benchmarks: random inputs, valid lengths, context.
#ifndef ATTNSCORE_BENCH_BENCH_UTIL_H_
#define ATTNSCORE_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/engine.h"

namespace attnscore::bench {

// One engine per process, made on first use with the options main set from
// --isa and --threads (else $ATTNSCORE_ISA and $ATTNSCORE_BENCH_THREADS; 1
// thread); the peers get the same OpenMP thread count. Records the Highway
// target, the ISA cap, oneDNN facts and thread counts in the benchmark JSON
// context; main makes it before the first benchmark runs.
void SetEngineOptions(const EngineOptions& options);
const Engine& SharedEngine();

// A further engine with the shared one's options (ISA cap, precision) but
// `threads` threads, for a benchmark that sets its own thread counts; null,
// the state skipped with the reason, if it cannot be made.
std::unique_ptr<Engine> EngineOrSkip(benchmark::State& state, int threads);
// The same in `precision`, whatever --precision says.
std::unique_ptr<Engine> EngineOrSkip(benchmark::State& state, int threads, Precision precision);

// Labels a benchmark with what ran it: the Highway target in use and the
// implementations oneDNN chose for the engine's matmuls that ran between
// construction and Apply, e.g. "AVX3, onednn brg:avx512_core". main copies
// the labels into the JSON context. Construct it just before the timing loop.
class ImplementationLabel {
 public:
  ImplementationLabel();
  void Apply(benchmark::State& state) const;

 private:
  std::map<std::string, int64_t> runs_;  // by problem and implementation
};

// Times call.Run(engine), a Status, once per iteration of the state (a
// failure skips the state with its message), and labels the state
// (ImplementationLabel). A template, so the loop holds no indirect call.
template <class Call>
void RunEachIteration(benchmark::State& state, const Engine& engine, Call& call) {
  const ImplementationLabel label;
  for (auto _ : state) {
    Status s = call.Run(engine);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
  }
  label.Apply(state);
}

// n floats ~ N(0, 1), fixed seed.
std::vector<float> RandomFloats(int64_t n, uint32_t seed);

// A copy of `values` from `offset` floats past a 64-byte line. On the line
// (offset 0) as PyTorch allocates a tensor (posix_memalign to 64 bytes, on
// small pages); a std::vector's floats lie where malloc puts them, 16 bytes
// past a line for a large one.
class LineFloats {
 public:
  explicit LineFloats(const std::vector<float>& values, size_t offset = 0);
  const float* data() const { return data_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], Free> buffer_;
  float* data_;
};

// Weights as nn.Linear initialises them: uniform in ±1/sqrt(fan_in).
std::vector<float> LinearWeights(int64_t out_features, int64_t in_features, uint32_t seed);

// Lengths uniform in [shortest, keys], fixed seed: `count` of them.
std::vector<int64_t> RandomLengths(int64_t count, int64_t keys, uint32_t seed,
                                   int64_t shortest = 1);

// The dot-product benchmarks' valid lengths for (B, N, M) calls, one per
// query or one per batch entry. A decode call (N at most the engine's
// dot_product::kRowPathMaxQueries, its row path) gets lengths uniform in
// [M/2, M], as a decoding step's cache is mostly valid; the others, uniform
// in [1, M].
std::vector<int64_t> DotProductLengths(int64_t batch, int64_t queries, int64_t keys,
                                       bool per_query);

// Sum of min(len, keys): the keys the rows attend to, for per-batch lengths
// shared by `queries` rows each.
double ValidKeys(const std::vector<int64_t>& lens, int64_t queries, int64_t keys);

// The cache-resident read peer, over state.range(0) bytes: reads them as
// often as the op reads its own, so they are as cache-resident as the op's,
// with one vector load and max per vector (kernels::MaxAbs at the Highway
// target in use), which outruns the caches beyond L1. Bytes/s is the rate.
void CachedRead(benchmark::State& state);
// The same read of bytes on 64-byte lines (LineFloats).
void CachedReadOnLines(benchmark::State& state);

// Two calls timed against each other, alternated within one process: on a
// shared, noisy machine two separate runs differ by more than the ratios
// measured here. `timed(side)` makes side 0's or side 1's call and returns
// its seconds (or skips the state with an error). Each iteration of the
// state is a round: about 2 ms of side 0's calls (at least three), then
// about 2 ms of side 1's, back to back as a server makes them (which side
// goes first alternates); a side's median call in a round leaves out a
// first call slowed by the other side's use of the caches. Gives each
// side's median over rounds of its median call, in µs, and the median of
// the rounds' ratios side 0 ÷ side 1; false (and no times) when no round
// ran.
struct AlternatedTimes {
  double median_us[2];
  double ratio;
};
bool TimeAlternated(benchmark::State& state, const std::function<double(int side)>& timed,
                    AlternatedTimes* times);

// A call on 2 threads against the same call on 1 (TimeAlternated).
// `timed(threads)` makes the call on that many threads and returns its
// seconds. Sets the counters one_thread_us and two_threads_us, and speedup,
// 1-thread ÷ 2-thread (above 1: 2 threads are faster).
void TwoThreadsAgainstOne(benchmark::State& state, const std::function<double(int)>& timed);

// CachedRead's read of state.range(0) bytes through TwoThreadsAgainstOne:
// on 2 threads each reads its half. How far this machine's caches let 2
// threads outrun 1 on a read alone.
void CachedReadTwoThreads(benchmark::State& state);

// A call against the limit that bounds it, alternated on 1 thread
// (TimeAlternated): `call()` makes the call and returns its seconds. Sets
// the counters op_us and limit_us, the medians of the two sides, and
// limit_share, the call's rate as a share of the limit's (1: as fast as the
// limit), the median over the rounds.
//
// AgainstItsRead: the limit is `read()`, a read with CachedRead's kernel of
// the bytes the call must read (SecondsToRead); the share is read ÷ call.
void AgainstItsRead(benchmark::State& state, const std::function<double()>& call,
                    const std::function<double()>& read);
// The shape of BM_LimitMatmul's matmul, (rows, inner) · (inner, cols), and
// what it says where it skips bf16.
inline constexpr int64_t kLimitMatmulRows = 1024, kLimitMatmulInner = 256, kLimitMatmulCols = 1024;
inline constexpr char kNoBf16Arithmetic[] =
    "this CPU has no bf16 arithmetic (no avx512_bf16 or AMX)";
// AgainstLimitMatmul: the limit is a oneDNN matmul of BM_LimitMatmul's
// shape, on 1 OpenMP thread (whatever --threads says), in `precision`, by
// default the engine's (skipped, saying so as BM_LimitMatmul does, for bf16
// on a CPU without bf16 arithmetic); the share is of GFLOP/s, the call
// credited with `call_flops`.
void AgainstLimitMatmul(benchmark::State& state, const std::function<double()>& call,
                        double call_flops);
void AgainstLimitMatmul(benchmark::State& state, const std::function<double()>& call,
                        double call_flops, Precision precision);

// Seconds `call` takes; a failed call skips the state with its message
// (the first failure's).
double SecondsOf(benchmark::State& state, const std::function<Status()>& call);

// Seconds to read `spans` (first byte, bytes; floats, or a cache's bf16
// words read as floats) once with CachedRead's kernel: the read side of
// AgainstItsRead.
double SecondsToRead(const std::vector<std::pair<const void*, size_t>>& spans);

// One batched oneDNN matmul, (batch, rows, inner) · (batch, inner, cols),
// fp32 output, on random fp32 inputs or (bf16) their upper halves, made
// once on the process's OpenMP threads and run on demand. Before the first
// Run(), it has run once: a process's first oneDNN gemm makes its kernels
// just in time, which is not the matmul's time.
class OnednnMatmulCall {
 public:
  OnednnMatmulCall(int64_t batch, int64_t rows, int64_t inner, int64_t cols, bool bf16);
  ~OnednnMatmulCall();
  void Run();  // returns once the product is written
  double Flops() const { return flops_; }
  const std::string& Implementation() const { return implementation_; }

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
  double flops_;
  std::string implementation_;
};

// OnednnMatmulCall timed over the state's iterations: the matmul rate a
// workload's products could reach. Labels the state with oneDNN's
// implementation and sets its GFLOPS counter.
void OnednnMatmul(benchmark::State& state, int64_t batch, int64_t rows, int64_t inner, int64_t cols,
                  bool bf16 = false);

// A call as a function of the engine it runs on, for the Call* helpers
// below where a benchmark's set-up is all the call needs.
struct EngineCall {
  std::function<Status(const Engine&)> run;
  Status Run(const Engine& engine) const { return run(engine); }
};

// call.Run(SharedEngine()) once per iteration, labelled with the
// implementation; the state skipped with the first failure's message.
template <class Call>
void CallEachIteration(benchmark::State& state, Call& call) {
  const Engine& engine = SharedEngine();
  const ImplementationLabel label;
  for (auto _ : state) {
    const Status s = call.Run(engine);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      break;
    }
  }
  label.Apply(state);
}

// TwoThreadsAgainstOne of call.Run(engine) on engines of 1 and 2 threads,
// labelled with the implementation; skipped where an engine is not made.
template <class Call>
void CallTwoThreadsAgainstOne(benchmark::State& state, Call& call) {
  const std::unique_ptr<Engine> engines[2] = {EngineOrSkip(state, 1), EngineOrSkip(state, 2)};
  if (!engines[0] || !engines[1]) return;
  const ImplementationLabel label;
  TwoThreadsAgainstOne(state, [&](int threads) {
    return SecondsOf(state, [&] { return call.Run(*engines[threads - 1]); });
  });
  label.Apply(state);
}

// AgainstLimitMatmul of call.Run(engine) on a 1-thread engine, credited
// with call.Flops(), labelled with the implementation.
template <class Call>
void CallAgainstLimitMatmul(benchmark::State& state, Call& call) {
  const std::unique_ptr<Engine> engine = EngineOrSkip(state, 1);
  if (!engine) return;
  const ImplementationLabel label;
  AgainstLimitMatmul(
      state, [&] { return SecondsOf(state, [&] { return call.Run(*engine); }); }, call.Flops());
  label.Apply(state);
}

}  // namespace attnscore::bench

#endif  // ATTNSCORE_BENCH_BENCH_UTIL_H_
