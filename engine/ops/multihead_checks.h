// The multi-head op's checks, shared by its forms (ops/multihead.cc: the
// op over floats and over a KvCache's rows), and the lengths its heads run
// with.
#ifndef ATTNSCORE_OPS_MULTIHEAD_CHECKS_H_
#define ATTNSCORE_OPS_MULTIHEAD_CHECKS_H_

#include <cstdint>
#include <vector>

#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/workspace.h"
#include "ops/multihead.h"

namespace attnscore::ops {

// out (B, N, Hq, Dv) and, when not empty, attention_weights (B, Hq, N, M).
Status CheckMultiHeadOutputs(const char* op, const ConstTensor& q, int64_t keys, int64_t value_dim,
                             const ConstTensor& out, const ConstTensor& attention);

// Every check of a call: Q, K, V and the options, the outputs' shapes, and
// the outputs apart from what the call reads. Messages name `op`.
Status CheckMultiHeadArguments(const char* op, const ConstTensor& q, const ConstTensor& k,
                               const ConstTensor& v, const ValidLens& lens,
                               const MultiHeadOptions& multihead, const ConstTensor& out,
                               const ConstTensor& attention);

// The lengths the heads run with, (B, N): the caller's, each cut to its
// query's causal bound (query i of N sees keys 0..i, or 0..M - N + i),
// clamped to [0, M].
Status EffectiveLengths(internal::Workspace& workspace, const ValidLens& valid_lens, Causal causal,
                        int64_t batch, int64_t queries, int64_t keys,
                        std::vector<int64_t>* lengths);

}  // namespace attnscore::ops

#endif  // ATTNSCORE_OPS_MULTIHEAD_CHECKS_H_
