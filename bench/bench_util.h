// Shared set-up for the benchmarks: random inputs, valid lengths, context.
#ifndef ATTNSCORE_BENCH_BENCH_UTIL_H_
#define ATTNSCORE_BENCH_BENCH_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "attnscore/engine.h"

namespace attnscore::bench {

// One engine per process, 1 thread unless ATTNSCORE_BENCH_THREADS says more,
// ISA from ATTNSCORE_ISA; the peers get the same OpenMP thread count. Records
// the Highway target, oneDNN facts and thread counts in the benchmark JSON
// context before the first benchmark runs.
const Engine& SharedEngine();

// n floats ~ N(0, 1), fixed seed.
std::vector<float> RandomFloats(int64_t n, uint32_t seed);

// Weights as nn.Linear initialises them: uniform in ±1/sqrt(fan_in).
std::vector<float> LinearWeights(int64_t out_features, int64_t in_features, uint32_t seed);

// Lengths uniform in [1, keys], fixed seed: `count` of them.
std::vector<int64_t> RandomLengths(int64_t count, int64_t keys, uint32_t seed);

// Sum of min(len, keys): the keys the rows attend to, for per-batch lengths
// shared by `queries` rows each.
double ValidKeys(const std::vector<int64_t>& lens, int64_t queries, int64_t keys);

}  // namespace attnscore::bench

#endif  // ATTNSCORE_BENCH_BENCH_UTIL_H_
