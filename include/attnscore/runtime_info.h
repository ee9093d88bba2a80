// What the engine runs on, for logs and profiling: Engine::Info().
#ifndef ATTNSCORE_RUNTIME_INFO_H_
#define ATTNSCORE_RUNTIME_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "attnscore/options.h"

namespace attnscore {

// One oneDNN matmul the process has created, and how often it ran.
struct MatmulInfo {
  std::string problem;         // "batch x (m x k) . (k x n)" with its extras
  std::string implementation;  // oneDNN's choice, e.g. "brg:avx512_core"
  int64_t runs = 0;
};

struct RuntimeInfo {
  std::vector<std::string> cpu_targets;      // Highway targets of this CPU, best first
  std::vector<std::string> allowed_targets;  // those the ISA cap allows
  std::string target_in_use;                 // the one the kernels dispatch to now
  std::string onednn_version;                // "2.6.3"
  std::string onednn_isa;                    // the ISA oneDNN uses, after the cap
  bool native_bf16 = false;                  // oneDNN has bf16 arithmetic (avx512_bf16 or AMX)
  EngineOptions options;                     // the engine's, with the ISA cap applied
  // The process's matmuls (every engine's), in the order of their problems.
  std::vector<MatmulInfo> matmuls;
  // The bytes this engine holds between calls: its workspaces' buffers,
  // kept so that the next calls do not allocate.
  int64_t workspace_bytes = 0;
};

}  // namespace attnscore

#endif  // ATTNSCORE_RUNTIME_INFO_H_
