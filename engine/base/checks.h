// Argument checks shared by every op. Each returns a Status whose message
// starts with the op and names the argument and its shape.
#ifndef ATTNSCORE_BASE_CHECKS_H_
#define ATTNSCORE_BASE_CHECKS_H_

#include <cstdint>
#include <initializer_list>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/valid_lens.h"

namespace attnscore::internal {

// Size of each dim a check expects; kAnyDim accepts any size >= 1.
inline constexpr int64_t kAnyDim = -1;

// `view` is a usable rank-`dims.size()` tensor whose dims match `dims`
// (kAnyDim: any), with a non-null pointer, no zero-size dim, non-negative
// strides and offsets that fit in int64. `layout` ("(B, N, D)") names the dims.
Status CheckTensor(const char* op, const char* name, const ConstTensor& view,
                   std::initializer_list<int64_t> dims, const char* layout);

// An output must not map two elements to one address (e.g. a zero stride).
Status CheckWritable(const char* op, const char* name, const ConstTensor& view);

// Outputs must not share memory with inputs or other outputs; `allow_same`
// lets an output be exactly its input (same pointer, dims and strides).
Status CheckDisjoint(const char* op, const char* out_name, const ConstTensor& out,
                     const char* in_name, const ConstTensor& in, bool allow_same = false);

// What every attention op checks of its outputs once their shapes are
// checked: both writable, apart from the inputs and from each other (an
// empty `attention` is skipped), and valid_lens for `batch` entries of
// `queries` queries, apart from both.
Status CheckOutputsApart(const char* op, std::initializer_list<NamedView> inputs,
                         const ConstTensor& out, const ConstTensor& attention,
                         const ValidLens& valid_lens, int64_t batch, int64_t queries);

// The shape of an attention op's outputs: out (B, N, F), weights (B, N, M).
struct AttentionShape {
  int64_t batch, queries, keys, out_features;
  const char* out_layout;  // how messages name out's dims, e.g. "(B, N, Dv)"
};

// The outputs and lengths of an attention op whose `inputs` are already
// checked: out and the optional weights of `shape`, both writable and apart
// from the inputs and each other, and valid_lens for B entries of N queries.
Status CheckAttentionOutputs(const char* op, std::initializer_list<NamedView> inputs,
                             const AttentionShape& shape, const ValidLens& valid_lens,
                             const ConstTensor& out, const ConstTensor& attention);

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_CHECKS_H_
