// `attnscore run OP`, for every entry of the catalogue: reads the inputs
// (.npy, and a .safetensors model for a model), runs the entry once through
// its generic call and writes --out and, if asked, --weights-out (the
// attention weights). The flags come from the entry's spec (cli/flags.h);
// docs/cli.md describes them and the files.
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
