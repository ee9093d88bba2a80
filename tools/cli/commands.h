// The attnscore tool's commands. Each returns the process exit code:
// 0 on success, 2 on bad input (after printing "attnscore: error: ...").
#ifndef ATTNSCORE_TOOLS_CLI_COMMANDS_H_
#define ATTNSCORE_TOOLS_CLI_COMMANDS_H_

#include <string>
#include <vector>

namespace attnscore::cli {

extern const char kUsage[];

int RunCli(const std::vector<std::string>& argv);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_COMMANDS_H_
