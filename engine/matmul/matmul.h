// The oneDNN adapter: every oneDNN call in the engine lives in engine/matmul
// (matmul.cc: plans; onednn_isa.cc: the ISA cap), so the 2.x-only API
// (matmul::desc, set_output_scales) is in one place.
#ifndef ATTNSCORE_MATMUL_MATMUL_H_
#define ATTNSCORE_MATMUL_MATMUL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/options.h"
#include "attnscore/status.h"

namespace attnscore::internal {
class Workspace;
}  // namespace attnscore::internal

namespace attnscore::matmul {

// A batch of matrices addressed by element strides. A transposed operand is
// just swapped strides: no copy is ever made.
struct Layout {
  int64_t rows = 0, cols = 0;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 1;
};

// C[b] = scale · A[b] · B[b] (+ bias) (+ C[b]) for b < batch;
// A: (m, k), B: (k, n), C: (m, n).
struct Problem {
  int64_t batch = 1;
  Layout a, b, c;
  float scale = 1.0f;
  bool shared_b = false;    // one B for every batch entry (b.batch_stride unused)
  bool bias = false;        // adds a row of n biases, given to Run; needs scale 1
  bool accumulate = false;  // adds to what C holds instead of overwriting it
  bool bf16 = false;        // A and B are bfloat16 (uint16_t words); C stays f32
};

// What runs one Problem: single-threaded oneDNN primitives over tasks that
// the call's threads share; immutable and shareable, so many
// threads may Run it at once. Results do not depend on the thread count.
class Plan {
 public:
  virtual ~Plan() = default;
  // `a`, `b`: floats, or bf16 words for a bf16 problem. `bias`: n floats
  // when the problem has a bias, else unused. `workspace`: the calling
  // engine call's (inputs oneDNN cannot read are packed there).
  virtual Status Run(internal::Workspace& workspace, const void* a, const void* b, float* c,
                     const float* bias = nullptr) const = 0;
  // oneDNN's name for the implementation it chose, e.g. "brg:avx512_core"
  // (two names joined by " + " when a shorter last task got another).
  virtual const char* implementation() const = 0;
  // How many times Run has been called, by any thread.
  virtual int64_t runs() const = 0;
};

// The cached plan for `problem`, created on first use. Thread-safe.
Status GetPlan(const Problem& problem, std::shared_ptr<const Plan>* plan);

// What the cache holds now, for profiling: each plan's problem, written
// "batch x (m x k) . (k x n)" with its extras, oneDNN's implementation and
// its run count.
struct PlanSummary {
  std::string problem;
  std::string implementation;
  int64_t runs = 0;
};
std::vector<PlanSummary> CachedPlans();

// Whether oneDNN has bf16 arithmetic here, within the ISA cap: avx512_bf16
// or AMX. Without it oneDNN still runs bf16 problems but emulates them, and
// dot_long took 4.4-4.8x fp32's time that way (an AVX-512 Xeon without
// avx512_bf16). So the engine gives f32 matmuls the bf16-rounded inputs
// there instead: products of bf16 values are exact in f32, so the results
// are the same up to the order of the sums. Call after SetMaxIsa.
bool NativeBf16();

// Caps oneDNN's ISA for the process; must come before the first plan.
Status SetMaxIsa(Isa isa);

// "2.6.3", and the ISA oneDNN actually uses (after any cap).
std::string OnednnVersion();
std::string OnednnIsa();

}  // namespace attnscore::matmul

#endif  // ATTNSCORE_MATMUL_MATMUL_H_
