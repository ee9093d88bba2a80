// What the attnscore tool's commands share: exit codes, the error line,
// creating the engine from the common flags, the info text and the cap on
// the outputs the tool allocates. Only the public API (include/attnscore).
#ifndef ATTNSCORE_TOOLS_CLI_COMMON_H_
#define ATTNSCORE_TOOLS_CLI_COMMON_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/args.h"

namespace attnscore::cli {

// The process exit codes (docs/cli.md): kInternal for StatusCode::kInternal,
// kBadInput for every other error, bad usage included.
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

// `text` with every control byte (below 0x20, and 0x7f) written as "\xNN":
// a name from a file or a path cannot break the line or reach the terminal
// as an escape sequence. Bytes from 0x80 (UTF-8) pass unchanged.
std::string EscapeControlBytes(const std::string& text);

// Prints "attnscore: error: MESSAGE" to stderr, always one line (EscapeControlBytes),
// and returns the exit code for `status`, which must not be OK.
int Fail(const Status& status);

// Creates the engine from the common flags --threads, --isa and --precision.
// `op` is the op the engine will run ("" for info): only dot has a bf16 mode,
// so any other op refuses --precision bf16 rather than ignore it. Without
// --isa the engine takes $ATTNSCORE_ISA itself.
Status MakeEngine(const Args& args, const std::string& op, std::unique_ptr<Engine>* engine);

// Prints what `attnscore info` prints: the version line, then
// Engine::Describe(), which after a run also lists each oneDNN matmul the
// process created and the implementation oneDNN chose for it.
void PrintInfo(const Engine& engine);

// The outputs the tool allocates are capped at 2^31 floats (8 GiB), so a
// tiny but hostile input cannot make it ask for tens of GiB (e.g. attention
// weights (B, N, M) from keys (1, 65536, 1)).
constexpr int64_t kMaxOutputFloats = int64_t{1} << 31;

// InvalidArgument "WHAT would need more than 2^31 floats (8 GiB)" when the
// product of `shape` exceeds kMaxOutputFloats (or overflows); OK otherwise.
Status CheckOutputSize(const std::string& what, const std::vector<int64_t>& shape);

}  // namespace attnscore::cli

#endif  // ATTNSCORE_TOOLS_CLI_COMMON_H_
