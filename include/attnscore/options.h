// How an Engine runs: threads, the instruction-set cap, the precision of the
// matrix products.
#ifndef ATTNSCORE_OPTIONS_H_
#define ATTNSCORE_OPTIONS_H_

#include <string>

#include "attnscore/export.h"

namespace attnscore {

// The highest instruction set the process may use, for both the Highway
// kernels and oneDNN. kBest lets each pick the best the CPU has.
// Engine::Create refuses a value outside the enum (so does Precision).
enum class Isa { kScalar, kSse4, kAvx2, kAvx512, kBest };

// "scalar", "sse4", "avx2", "avx512", "best".
ATTNSCORE_API const char* IsaName(Isa isa);
// Parses one of the names above; false if `name` is none of them.
ATTNSCORE_API bool ParseIsa(const std::string& name, Isa* isa);

// What the dot-product attention's matrix products read. kBf16 rounds Q, K,
// V and the attention weights to bfloat16 (to nearest even) for oneDNN's
// bf16 matmul, which accumulates in fp32; the scores, the softmax, the
// attention weights returned and the output stay fp32. The other ops, and
// dot-product calls that take the row kernels (at most 3 queries per batch
// entry, every tensor with unit column strides), always run in fp32. Where
// oneDNN has no bf16 arithmetic (no avx512_bf16 or AMX, or an ISA cap below
// them), the products run as fp32 matmuls on the rounded values: the same
// results up to the order of the sums, at about fp32's speed, where oneDNN's
// own bf16 emulation is several times slower. Engine::Info says which.
// kInt8 is a KvCache's precision only (kv_cache.h); an Engine refuses it.
enum class Precision { kFp32, kBf16, kInt8 };

// "fp32", "bf16", "int8".
ATTNSCORE_API const char* PrecisionName(Precision precision);
// Parses one of the names above; false if `name` is neither.
ATTNSCORE_API bool ParsePrecision(const std::string& name, Precision* precision);

// The most threads an engine may use per call. Engine::Create refuses more,
// and starts the threads it is given (they live as long as the engine),
// returning a Status when the system cannot start them.
inline constexpr int kMaxThreads = 1024;

struct EngineOptions {
  int threads = 1;  // threads per call, in [1, kMaxThreads]
  // Process-wide cap, fixed by the first engine created. kBest takes
  // $ATTNSCORE_ISA when it is set (any of the names above).
  Isa isa = Isa::kBest;
  Precision precision = Precision::kFp32;
};

}  // namespace attnscore

#endif  // ATTNSCORE_OPTIONS_H_
