// What `attnscore bench`'s benches share (tools/cli/bench_common.cc): timing,
// the JSON line, the checks of what a bench allocates; and the benches kept
// in files of their own.
#ifndef ATTNSCORE_TOOLS_CLI_BENCH_COMMON_H_
#define ATTNSCORE_TOOLS_CLI_BENCH_COMMON_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/args.h"

namespace attnscore::cli {

using Json = nlohmann::ordered_json;  // keeps the keys in insertion order

double Median(std::vector<double> v);
// `x` rounded to `decimals` places, so that the JSON number has at most
// that many (it is printed in its shortest form: 12.5, not 12.500).
double Rounded(double x, int decimals);
// `j` as JSON on one line with ", " between items and ": " after keys.
std::string OneLine(const Json& j);
// The distinct implementations oneDNN chose for the process's matmuls.
Json OnednnImplementations(const RuntimeInfo& info);
// Runs `call` 3 times, then `repeat` times timed: each run's µs.
Status TimeCalls(const std::function<Status()>& call, int64_t repeat,
                 std::vector<double>* times_us);

// A bench's tensors, by name and dims.
using BenchBuffers = std::vector<std::pair<std::string, std::vector<int64_t>>>;
// Each of bench `op`'s tensors within CheckOutputSize's bounds, and all of
// them within this machine's memory.
Status CheckBenchBuffers(const std::string& op, const BenchBuffers& buffers);
// --info prints after the results, so not with --json's one line.
Status CheckInfoWithoutJson(const Args& args);
// Whether all of `text` is a number (Inf included, NaN not), into *value.
bool ParseNumber(const std::string& text, double* value);

// bench multihead_attention_packed (tools/cli/bench_packed.cc); `word` is
// the entry's name as given.
int BenchPacked(const Args& args, const std::string& word);
// bench kv_cache_step (tools/cli/bench_packed.cc): AttendPacked on a step
// of one prefill and B - 1 decodes over a filled cache.
int BenchStep(const Args& args, const std::string& word);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_BENCH_COMMON_H_
