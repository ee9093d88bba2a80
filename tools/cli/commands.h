// The attnscore tool's entry point: parses the arguments, prints the usage
// for --help, runs `info` and dispatches `run` (cli/run.h) and `bench`
// (cli/bench.h). docs/cli.md is the user's reference.
#ifndef ATTNSCORE_TOOLS_CLI_COMMANDS_H_
#define ATTNSCORE_TOOLS_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace attnscore::cli {

// The --help text.
extern const char kUsage[];

// Runs the command in `argv` (without the program name) and returns the
// process exit code: 0 on success; after one "attnscore: error: ..." line on
// stderr, 2 for bad input or usage and 1 for an internal failure.
int RunCli(const std::vector<std::string>& argv);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_COMMANDS_H_
