// The attnscore engine: attention scoring functions on the CPU.
//
//   attnscore::EngineOptions options;          // 1 thread, best ISA
//   std::unique_ptr<attnscore::Engine> engine;
//   attnscore::Status s = attnscore::Engine::Create(options, &engine);
//   s = engine->DotProductAttention(q, k, v, lens, out);
//
// An Engine is immutable after Create and safe to call from many threads at
// once. It owns what its calls use besides their outputs: its threads
// (options.threads - 1 workers, started by Create; the caller is the
// first), and a workspace each call takes (one per call running at the
// same time, kept for later calls); nothing is kept between calls outside
// it. One call at a time runs on the threads: a call made while another
// runs is computed by its calling thread alone, with the same bits, so an
// engine never has more than options.threads threads working plus its
// callers. Every call checks all of its arguments first: a call that
// returns a non-OK Status has written nothing to its outputs.
#ifndef ATTNSCORE_ENGINE_H_
#define ATTNSCORE_ENGINE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "attnscore/export.h"
#include "attnscore/multihead_options.h"
#include "attnscore/options.h"
#include "attnscore/runtime_info.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

namespace internal {
struct EngineAccess;  // engine/api: the state a model's call runs with
}  // namespace internal

// The shapes a call's outputs must have, as each op's Check method reports.
struct OutputShapes {
  std::array<int64_t, 3> out{};                // (B, N, F)
  std::array<int64_t, 3> attention_weights{};  // (B, N, M)
};

class ATTNSCORE_API Engine {
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
  // `attention_weights`, when not empty, receives the softmax (B, N, M).
  Status DotProductAttention(ConstTensor queries, ConstTensor keys,
                             ConstTensor values, const ValidLens& valid_lens,
                             Tensor out, Tensor attention_weights = Tensor()) const;

  // Multi-head attention (docs/semantics.md section 5): for each query head
  // h, the dot-product attention above of Q[:, :, h] against the keys and
  // values of head h / (Hq / Hkv), scores scaled by options.scale (default
  // 1/sqrt(D)) and cut by options.causal.
  // Q: (B, N, Hq, D), K: (B, M, Hkv, D), V: (B, M, Hkv, Dv), out: (B, N, Hq, Dv),
  // Hq a multiple of Hkv (Hkv = Hq: multi-head; fewer: grouped-query; 1:
  // multi-query). Any strides: heads-first memory (B, H, N, D) is the view
  // with dims (B, N, H, D) and strides (H·N·D, D, N·D, 1). The valid lengths,
  // (B,) or (B, N), apply to every head. `attention_weights`, when not
  // empty, receives the softmax (B, Hq, N, M).
  Status MultiHeadAttention(ConstTensor queries, ConstTensor keys, ConstTensor values,
                            const ValidLens& valid_lens, const MultiHeadOptions& options,
                            Tensor out, Tensor attention_weights = Tensor()) const;

  // A packed batch of S sequences of their own lengths (docs/semantics.md
  // section 5.8), as FlashAttention's varlen call takes them: Q (Tq, Hq, D),
  // K (Tk, Hkv, D), V (Tk, Hkv, Dv), out (Tq, Hq, Dv); sequence s's queries
  // are rows cu_seqlens_q[s] .. cu_seqlens_q[s + 1] - 1 of Q and out, its
  // keys and values rows cu_seqlens_k[s] .. of K and V, and it is its own
  // (1, N_s, M_s) MultiHeadAttention call with `options` (all but a bias or
  // a mask, shaped for one batch). Nothing padded is computed: a sequence
  // of no query is skipped. Every sequence is checked before any is run.
  Status MultiHeadAttentionPacked(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                  const SequenceOffsets& cu_seqlens_q,
                                  const SequenceOffsets& cu_seqlens_k,
                                  const MultiHeadOptions& options, Tensor out) const;

  // Check*: every check the op makes of its inputs (shapes, strides, valid
  // lengths), without running it, and the shapes of its outputs. A caller
  // that allocates the outputs refuses bad input before allocating any.
  // For MaskedSoftmax both shapes are X's.
  Status CheckMaskedSoftmax(ConstTensor x, const ValidLens& valid_lens,
                            OutputShapes* shapes) const;
  Status CheckDotProductAttention(ConstTensor queries, ConstTensor keys,
                                  ConstTensor values,
                                  const ValidLens& valid_lens,
                                  OutputShapes* shapes) const;
  Status CheckMultiHeadAttention(ConstTensor queries, ConstTensor keys,
                                 ConstTensor values, const ValidLens& valid_lens,
                                 const MultiHeadOptions& options,
                                 MultiHeadShapes* shapes) const;
  // out_shape: (Tq, Hq, Dv).
  Status CheckMultiHeadAttentionPacked(ConstTensor queries, ConstTensor keys, ConstTensor values,
                                       const SequenceOffsets& cu_seqlens_q,
                                       const SequenceOffsets& cu_seqlens_k,
                                       const MultiHeadOptions& options,
                                       std::array<int64_t, 3>* out_shape) const;

  // The options in force: isa is the cap applied (after $ATTNSCORE_ISA).
  const EngineOptions& options() const;

  // Runtime facts: Highway targets (supported, allowed, in use), the oneDNN
  // version and its ISA, each oneDNN matmul the process has created so far
  // with the implementation oneDNN chose for it, and the memory this engine
  // holds between calls.
  RuntimeInfo Info() const;
  // The same as text, one fact per line.
  std::string Describe() const;

 private:
  friend struct internal::EngineAccess;
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_ENGINE_H_
