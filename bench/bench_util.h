// Shared set-up for the benchmarks: random inputs, valid lengths, context.
#ifndef ATTNSCORE_BENCH_BENCH_UTIL_H_
#define ATTNSCORE_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
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
// `threads` threads, for a benchmark that sets thread counts side by side.
Status EngineWithThreads(int threads, std::unique_ptr<Engine>* engine);

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

// n floats ~ N(0, 1), fixed seed.
std::vector<float> RandomFloats(int64_t n, uint32_t seed);

// Weights as nn.Linear initialises them: uniform in ±1/sqrt(fan_in).
std::vector<float> LinearWeights(int64_t out_features, int64_t in_features, uint32_t seed);

// Lengths uniform in [1, keys], fixed seed: `count` of them.
std::vector<int64_t> RandomLengths(int64_t count, int64_t keys, uint32_t seed);

// Sum of min(len, keys): the keys the rows attend to, for per-batch lengths
// shared by `queries` rows each.
double ValidKeys(const std::vector<int64_t>& lens, int64_t queries, int64_t keys);

// The cache-resident read peer, over state.range(0) bytes: reads them as
// often as the op reads its own, so they are as cache-resident as the op's,
// with one vector load and max per vector (kernels::MaxAbs at the Highway
// target in use), which outruns the caches beyond L1. Bytes/s is the rate.
void CachedRead(benchmark::State& state);

// A call on 2 threads against the same call on 1, alternated within one
// process: on a shared, noisy machine two separate runs differ by more than
// the speed-up measured. `timed(threads)` makes the call on that many
// threads and returns its seconds (or skips the state with an error). Each
// iteration of the state is a round: about 2 ms of calls on 1 thread (at
// least one call), then as many on 2, back to back as a server makes them
// (which side goes first alternates). Sets the counters one_thread_us and
// two_threads_us, the medians over rounds of each side's median call, and
// speedup, the median of the rounds' ratios of the two (above 1: 2 threads
// are faster).
void TwoThreadsAgainstOne(benchmark::State& state, const std::function<double(int)>& timed);

// CachedRead's read of state.range(0) bytes through TwoThreadsAgainstOne:
// on 2 threads each reads its half. How far this machine's caches let 2
// threads outrun 1 on a read alone.
void CachedReadTwoThreads(benchmark::State& state);

// One batched oneDNN fp32 matmul, (batch, rows, inner) · (batch, inner,
// cols), random inputs, timed over the state's iterations: the matmul rate
// a workload's products could reach. Labels the state with oneDNN's
// implementation and sets its GFLOPS counter.
void OnednnMatmul(benchmark::State& state, int64_t batch, int64_t rows, int64_t inner,
                  int64_t cols, bool bf16 = false);

}  // namespace attnscore::bench

#endif  // ATTNSCORE_BENCH_BENCH_UTIL_H_
