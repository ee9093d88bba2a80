// Multi-head attention (docs/semantics.md section 5): the options of
// Engine::MultiHeadAttention and the shapes its checks report.
#ifndef ATTNSCORE_MULTIHEAD_OPTIONS_H_
#define ATTNSCORE_MULTIHEAD_OPTIONS_H_

#include <array>
#include <cstdint>

#include "attnscore/tensor.h"

namespace attnscore {

// Which keys a query may see beyond its valid length, for self-attention
// and for decoding against a cache. Query i (from 0) of N, keys 0..M-1:
//   kTopLeft      keys 0..i            (the mask aligned to the first key)
//   kBottomRight  keys 0..M - N + i    (aligned to the last; needs M >= N)
// A query's length is then the smaller of its valid length and this bound,
// exactly as if the caller had passed those per-query lengths.
enum class Causal { kNone, kTopLeft, kBottomRight };

// A sliding window (Mistral's, Gemma's; docs/semantics.md section 5.4):
// query i of N against M keys sits at position p = i + M - N (bottom-right,
// as FlashAttention aligns) and sees the keys j with p - left <= j <= p +
// right. -1 leaves that side unbounded; the default sees every key. It cuts
// a query's keys as valid lengths and causal do, and its work follows them:
// keys before a window are not scored. A query the window leaves no key
// gets weights 0 and output 0 (d2l's L = 0 rule, uniform over all M, stays
// with valid lengths of 0).
struct Window {
  int64_t left = -1, right = -1;
};

struct MultiHeadOptions {
  Causal causal = Causal::kNone;
  // What the scores Q Kᵀ are multiplied by; 0 means 1/sqrt(D). Finite.
  float scale = 0.0f;
  // Logit soft-capping (Gemma 2's): with softcap c > 0, each scaled score s
  // becomes c · tanh(s / c), within (−c, c), before the masks and the
  // softmax. 0 means none. Finite and >= 0.
  float softcap = 0.0f;
  Window window;  // left, right >= -1
  // Attention sinks (gpt-oss's, ONNX Runtime's head_sink; docs/semantics.md
  // section 5.5): (Hq,) logits, one per query head, or empty for none. Head
  // h's sink z_h joins each of its softmaxes' denominators, e^{z_h} beside
  // the keys' e^{s_j}, and adds no value: its weights sum to
  // 1 / (1 + e^{z_h} / Σ_j e^{s_j}). Not NaN; read only during the call.
  ConstTensor sinks;
  // ALiBi (BLOOM's, MPT's; section 5.6): (Hq,) finite slopes, or empty for
  // none. Head h's score of key j for query i, at p = i + M - N, loses
  // slope_h · |p - j| after the cap.
  ConstTensor alibi_slopes;
  // An additive bias (section 5.7), added after ALiBi: (B, Hq, N, M), each
  // dim that or 1 (broadcast), -Inf masking its key; or empty.
  ConstTensor bias;
  // A boolean mask (section 5.7), as PyTorch's attn_mask: bytes shaped as
  // the bias, nonzero keeping its key and 0 masking it; or empty.
  TensorView<const uint8_t> mask;
};

// Where a packed batch's sequences begin (FlashAttention's cu_seqlens;
// docs/semantics.md section 5.8): S + 1 offsets, int32 or int64, the first
// 0, none smaller than the one before, the last the packed rows' count;
// sequence s holds rows offsets[s] .. offsets[s + 1] - 1.
struct SequenceOffsets {
  const void* data = nullptr;
  int64_t count = 0;  // S + 1
  bool is_int64 = false;

  static SequenceOffsets Of(const int32_t* offsets, int64_t count) {
    return {offsets, count, false};
  }
  static SequenceOffsets Of(const int64_t* offsets, int64_t count) {
    return {offsets, count, true};
  }
  int64_t at(int64_t s) const {
    return is_int64 ? static_cast<const int64_t*>(data)[s] : static_cast<const int32_t*>(data)[s];
  }
};

// The shapes of a multi-head call's outputs, as the Check methods report them.
struct MultiHeadShapes {
  std::array<int64_t, 4> out{};                // (B, N, Hq, Dv); the module's: (B, N, H, unused 0)
  std::array<int64_t, 4> attention_weights{};  // (B, Hq, N, M)
};

}  // namespace attnscore

#endif  // ATTNSCORE_MULTIHEAD_OPTIONS_H_
