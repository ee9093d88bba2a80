// Multi-head attention (docs/semantics.md section 5): the dot-product
// attention of section 2 per query head, K and V shared by groups of heads.
#ifndef ATTNSCORE_OPS_MULTIHEAD_H_
#define ATTNSCORE_OPS_MULTIHEAD_H_

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/multihead_options.h"
#include "attnscore/options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/call_scope.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops {

// The checks of Q, K, V, the lengths and the options, and the outputs' shapes.
Status CheckMultiHeadAttentionInputs(const ConstTensor& queries, const ConstTensor& keys,
                                     const ConstTensor& values, const ValidLens& valid_lens,
                                     const MultiHeadOptions& multihead, MultiHeadShapes* shapes);

// Engine::MultiHeadAttention without the call scope (threads, denormals).
// Q (B, N, Hq, D), K (B, M, Hkv, D), V (B, M, Hkv, Dv), out (B, N, Hq, Dv),
// attention_weights (B, Hq, N, M) or empty; Hq a multiple of Hkv. Messages
// name `op`, the call the caller made ("MultiHeadAttention", "KvCache").
Status MultiHeadAttention(const internal::CallContext& call, const char* op, ConstTensor queries,
                          ConstTensor keys, ConstTensor values, const ValidLens& valid_lens,
                          const MultiHeadOptions& multihead, Tensor out, Tensor attention_weights);

// Engine::CheckMultiHeadAttentionPacked: Q, K, V, the offsets, the options
// and each sequence as its own call, and out's shape (Tq, Hq, Dv).
Status CheckMultiHeadAttentionPacked(const ConstTensor& queries, const ConstTensor& keys,
                                     const ConstTensor& values, const SequenceOffsets& cu_seqlens_q,
                                     const SequenceOffsets& cu_seqlens_k,
                                     const MultiHeadOptions& options,
                                     std::array<int64_t, 3>* out_shape);
// Engine::MultiHeadAttentionPacked without the call scope
// (ops/multihead_packed.cc).
Status MultiHeadAttentionPacked(const internal::CallContext& call, const ConstTensor& queries,
                                const ConstTensor& keys, const ConstTensor& values,
                                const SequenceOffsets& cu_seqlens_q,
                                const SequenceOffsets& cu_seqlens_k,
                                const MultiHeadOptions& options, const Tensor& out);

// MultiHeadAttention over keys and values held in fewer bits (a KvCache's,
// whose checks the caller has made): bfloat16 words, or int8 codes with
// their scales (dot_product_paths.h). Q (B, N, Hq, D) any strides, K (B, M,
// Hkv, D) and V (B, M, Hkv, Dv) by strides with each row's elements
// contiguous, per-query `valid_lens` carrying the cache's causal bound
// (query i sees keys 0 .. M - N + i at most: its own position is always
// among them), scores as `options` say (checked; causal unused). Runs the
// decode form of the op (the grouped row path), a query position at a
// time. Messages name `op`.
Status CachedAttention(const internal::CallContext& call, const char* op, ConstTensor queries,
                       const dot_product::Bf16KeyView& keys, TensorView<const uint16_t> values,
                       const ValidLens& valid_lens, const MultiHeadOptions& options, Tensor out,
                       Tensor attention_weights);
Status CachedAttention(const internal::CallContext& call, const char* op, ConstTensor queries,
                       const dot_product::Int8KeyView& keys,
                       const dot_product::Int8ValueView& values, const ValidLens& valid_lens,
                       const MultiHeadOptions& options, Tensor out, Tensor attention_weights);

// The checks of a call's scale (finite) and soft cap (finite and >= 0).
Status CheckScoreOptions(const char* op, float scale, float softcap);

// The checks of attention sinks: empty, or (Hq,) without NaN.
Status CheckSinks(const char* op, const ConstTensor& sinks, int64_t heads);
// The checks of the options that shape a (B, Hq, N, M) call's scores past
// the factor and the cap (ops/multihead_options.cc): the sinks, ALiBi's
// slopes ((Hq,), finite), the bias and the mask ((B, Hq, N, M), each dim
// that or 1).
Status CheckScoreTerms(const char* op, const MultiHeadOptions& options, int64_t batch,
                       int64_t heads, int64_t queries, int64_t keys);
// The outputs share no memory with the options' views, which are read as
// the outputs are written.
Status OptionsApart(const char* op, const MultiHeadOptions& options, const ConstTensor& out,
                    const ConstTensor& attention);
// One such view (`name`'s, strides >= 0, its extent checked) shares no
// byte with out nor, when not empty, with attention; OK when it is empty.
template <typename T>
Status ReadApart(const char* op, const char* name, const TensorView<T>& view,
                 const ConstTensor& out, const ConstTensor& attention) {
  if (view.empty()) return Status::Ok();
  // The bytes [first, last] a view spans.
  const auto span = [](const auto& t) {
    const auto* first = reinterpret_cast<const char*>(t.data);
    int64_t last = 0;
    for (int d = 0; d < t.rank; ++d) last += (t.dims[d] - 1) * t.strides[d];
    return std::pair{first, first + (last + 1) * static_cast<int64_t>(sizeof(*t.data)) - 1};
  };
  const auto [first, last] = span(view);
  for (const auto& [output, written] :
       {std::pair<const char*, ConstTensor>{"out", out}, {"attention_weights", attention}}) {
    if (written.empty()) continue;
    const auto [begin, end] = span(written);
    if (begin <= last && first <= end) {
      return Status::InvalidArgument(std::string(op) + ": " + output + " overlaps " + name);
    }
  }
  return Status::Ok();
}
// The ScoreForm of a checked call of `depth` D, N `queries`, M `keys`:
// scale 0 made 1/sqrt(D), the bias and the mask broadcast by zero strides,
// query i at position i + M - N. Its place is head 0's: the caller places
// each head.
ScoreForm FormOf(const MultiHeadOptions& options, int64_t depth, int64_t queries, int64_t keys);

// The checks a causal mask adds: a known Causal, and M >= N for bottom-right.
Status CheckCausal(const char* op, Causal causal, const ConstTensor& queries,
                   const ConstTensor& keys);

// d2l's MultiHeadAttention module (docs/semantics.md section 5.2).
struct MultiHeadParams {
  int64_t heads = 0, hidden = 0, query_size = 0, key_size = 0, value_size = 0;
  bool bias = false;
  // Each layer's weight transposed, (in, H): x · w is the layer of row x
  // without its bias.
  std::vector<float> w_q, w_k, w_v, w_o;
  std::vector<float> b_q, b_k, b_v, b_o;  // (H) each, or all empty
  int64_t head_size() const { return hidden / heads; }
};

// One nn.Linear layer's views: weight (out, in) and bias (out) or empty.
struct LinearViews {
  ConstTensor weight, bias;
};

// Checks and copies W_q, W_k, W_v and W_o (with all four biases or none).
Status MakeMultiHeadParams(int64_t heads, const LinearViews& q, const LinearViews& k,
                           const LinearViews& v, const LinearViews& o, MultiHeadParams* params);

// The same from a .safetensors state_dict holding exactly those tensors.
Status LoadMultiHeadParams(const std::string& path, int64_t heads, MultiHeadParams* params);

// The checks of a forward pass's Q, K, V, lengths and mask.
Status CheckMultiHeadInputs(const MultiHeadParams& params, const ConstTensor& queries,
                            const ConstTensor& keys, const ConstTensor& values,
                            const ValidLens& valid_lens, Causal causal);

// MultiHeadAttention::Forward without the call scope (threads, denormals).
Status MultiHeadForward(const internal::CallContext& call, const MultiHeadParams& params,
                        ConstTensor queries, ConstTensor keys, ConstTensor values,
                        const ValidLens& valid_lens, Causal causal, Tensor out,
                        Tensor attention_weights);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MULTIHEAD_H_
