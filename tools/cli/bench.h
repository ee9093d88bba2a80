// `attnscore bench softmax|dot|additive|concat`: times the op on random data
// (median and min of --repeat runs after 3 warm-up runs) and prints the
// times and rates, as two lines of text or, with --json, one JSON object on
// one line. docs/cli.md lists the flags, what the rates count and the JSON
// fields.
#ifndef ATTNSCORE_TOOLS_CLI_BENCH_H_
#define ATTNSCORE_TOOLS_CLI_BENCH_H_

#include "cli/args.h"

namespace attnscore::cli {

// `args.words` is {"bench", OP}. Returns the exit code: 0 after printing the
// result; otherwise, after one error line, 2 (bad input or usage) or 1
// (internal failure).
int BenchCommand(const Args& args);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_BENCH_H_
