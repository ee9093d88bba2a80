// `attnscore run softmax|dot|additive|concat`: reads the inputs (.npy, and a
// .safetensors model for additive and concat), runs the op once and writes
// --out and, if asked, --weights-out (the attention weights). docs/cli.md
// describes the flags and the files.
#ifndef ATTNSCORE_TOOLS_CLI_RUN_H_
#define ATTNSCORE_TOOLS_CLI_RUN_H_

#include "cli/args.h"

namespace attnscore::cli {

// `args.words` is {"run", OP}. Returns the exit code: 0 when every output
// was written; otherwise, after one error line, 2 (bad input or usage) or 1
// (internal failure), and no output file was created or changed.
int RunCommand(const Args& args);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_RUN_H_
