// The attnscore engine: attention scoring functions on the CPU.
//
//   attnscore::EngineOptions options;          // 1 thread, best ISA
//   std::unique_ptr<attnscore::Engine> engine;
//   attnscore::Status s = attnscore::Engine::Create(options, &engine);
//   s = engine->DotProductAttention(q, k, v, lens, out);
//
// An Engine is immutable after Create and safe to call from many threads at
// once. Every call checks all of its arguments first: a call that returns a
// non-OK Status has written nothing to its outputs.
#ifndef ATTNSCORE_ENGINE_H_
#define ATTNSCORE_ENGINE_H_

#include <memory>
#include <string>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

// The highest instruction set the process may use, for both the Highway
// kernels and oneDNN. kBest lets each pick the best the CPU has.
enum class Isa { kScalar, kSse4, kAvx2, kAvx512, kBest };

// "scalar", "sse4", "avx2", "avx512", "best".
const char* IsaName(Isa isa);
// Parses one of the names above; false if `name` is none of them.
bool ParseIsa(const std::string& name, Isa* isa);

// What the dot-product attention's matrix products read. kBf16 rounds Q, K,
// V and the attention weights to bfloat16 (to nearest even) for oneDNN's
// bf16 matmul, which accumulates in fp32; the scores, the softmax, the
// weights returned and the output stay fp32. The other ops, and dot-product
// calls that take the row kernels (at most 3 queries per batch entry, every
// tensor with unit column strides), always run in fp32. Where oneDNN has no
// bf16 arithmetic (no avx512_bf16 or AMX, or an ISA cap below them), the
// products run as fp32 matmuls on the rounded values: the same results up
// to the order of the sums, at about fp32's speed, where oneDNN's own bf16
// emulation is several times slower. Engine::Describe says which.
enum class Precision { kFp32, kBf16 };

// "fp32", "bf16".
const char* PrecisionName(Precision precision);
// Parses one of the names above; false if `name` is neither.
bool ParsePrecision(const std::string& name, Precision* precision);

struct EngineOptions {
  int threads = 1;  // threads per call, >= 1
  // Process-wide cap, fixed by the first engine created. kBest takes
  // $ATTNSCORE_ISA when it is set (any of the names above).
  Isa isa = Isa::kBest;
  Precision precision = Precision::kFp32;
};

class Engine {
 public:
  static Status Create(const EngineOptions& options,
                       std::unique_ptr<Engine>* engine);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Y = masked_softmax(X, valid_lens) over the last axis. X, Y: (B, N, M).
  Status MaskedSoftmax(ConstTensor x, const ValidLens& valid_lens,
                       Tensor y) const;

  // out = softmax(Q Kᵀ / sqrt(D), masked) V.
  // Q: (B, N, D), K: (B, M, D), V: (B, M, Dv), out: (B, N, Dv).
  // `weights`, when not empty, receives the attention weights (B, N, M).
  Status DotProductAttention(ConstTensor queries, ConstTensor keys,
                             ConstTensor values, const ValidLens& valid_lens,
                             Tensor out, Tensor weights = Tensor()) const;

  // The options in force: isa is the cap applied (after $ATTNSCORE_ISA).
  const EngineOptions& options() const;

  // Human-readable runtime facts: Highway targets (supported, in use), the
  // oneDNN version and its ISA, threads, and each oneDNN matmul the process
  // has created so far with the implementation oneDNN chose for it.
  std::string Describe() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_ENGINE_H_
