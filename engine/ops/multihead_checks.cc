// The multi-head op's checks and the lengths its heads run with: see
// multihead_checks.h.
#include "ops/multihead_checks.h"

#include <algorithm>
#include <string>

#include "base/checks.h"
#include "base/valid_lens.h"
#include "ops/multihead_window.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "MultiHeadAttention";
using internal::CheckTensor;
using internal::kAnyDim;

Status CheckInputs(const char* op, const ConstTensor& q, const ConstTensor& k, const ConstTensor& v,
                   const MultiHeadOptions& multihead) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(op, "queries", q, {kAnyDim, kAnyDim, kAnyDim, kAnyDim}, "(B, N, Hq, D)"));
  const int64_t batch = q.dims[0], heads = q.dims[2], depth = q.dims[3];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(op, "keys", k, {batch, kAnyDim, kAnyDim, depth}, "(B, M, Hkv, D)"));
  const int64_t keys = k.dims[1], kv_heads = k.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(op, "values", v, {batch, keys, kv_heads, kAnyDim}, "(B, M, Hkv, Dv)"));
  if (heads % kv_heads != 0) {
    return Status::InvalidArgument(
        std::string(op) + ": queries " + ShapeString(q) + " have " + std::to_string(heads) +
        " heads and keys " + ShapeString(k) + " have " + std::to_string(kv_heads) +
        "; the query heads Hq must be a multiple of the key-value heads Hkv");
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckScoreOptions(op, multihead.scale, multihead.softcap));
  ATTNSCORE_RETURN_IF_ERROR(CheckWindow(op, multihead.window));
  ATTNSCORE_RETURN_IF_ERROR(CheckScoreTerms(op, multihead, q.dims[0], heads, q.dims[1], keys));
  return CheckCausal(op, multihead.causal, q, k);
}

}  // namespace

Status CheckMultiHeadOutputs(const char* op, const ConstTensor& q, int64_t keys, int64_t value_dim,
                             const ConstTensor& out, const ConstTensor& attention) {
  const int64_t batch = q.dims[0], queries = q.dims[1], heads = q.dims[2];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(op, "out", out, {batch, queries, heads, value_dim}, "(B, N, Hq, Dv)"));
  if (attention.empty()) return Status::Ok();
  return CheckTensor(op, "attention_weights", attention, {batch, heads, queries, keys},
                     "(B, Hq, N, M)");
}

Status CheckMultiHeadArguments(const char* op, const ConstTensor& q, const ConstTensor& k,
                               const ConstTensor& v, const ValidLens& lens,
                               const MultiHeadOptions& multihead, const ConstTensor& out,
                               const ConstTensor& attention) {
  ATTNSCORE_RETURN_IF_ERROR(CheckInputs(op, q, k, v, multihead));
  const int64_t batch = q.dims[0], queries = q.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckMultiHeadOutputs(op, q, k.dims[1], v.dims[3], out, attention));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(
      op, {{"queries", q}, {"keys", k}, {"values", v}}, out, attention, lens, batch, queries));
  return OptionsApart(op, multihead, out, attention);
}

Status EffectiveLengths(internal::Workspace& workspace, const ValidLens& valid_lens, Causal causal,
                        int64_t batch, int64_t queries, int64_t keys,
                        std::vector<int64_t>* lengths) {
  internal::RowLengths lens;
  ATTNSCORE_RETURN_IF_ERROR(
      internal::RowLengths::Resolve(valid_lens, batch, queries, keys, workspace, &lens));
  const int64_t shift = causal == Causal::kBottomRight ? keys - queries : 0;
  lengths->resize(static_cast<size_t>(batch * queries));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t own = lens.row(b, i);
      (*lengths)[static_cast<size_t>(b * queries + i)] =
          causal == Causal::kNone ? own : std::min(own, shift + i + 1);
    }
  }
  return Status::Ok();
}

Status CheckMultiHeadAttentionInputs(const ConstTensor& q, const ConstTensor& k,
                                     const ConstTensor& v, const ValidLens& valid_lens,
                                     const MultiHeadOptions& multihead, MultiHeadShapes* shapes) {
  ATTNSCORE_RETURN_IF_ERROR(CheckInputs(kOp, q, k, v, multihead));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckValidLens(valid_lens, q.dims[0], q.dims[1], kOp, {}));
  shapes->out = {q.dims[0], q.dims[1], q.dims[2], v.dims[3]};
  shapes->attention_weights = {q.dims[0], q.dims[2], q.dims[1], k.dims[1]};
  return Status::Ok();
}

Status CheckCausal(const char* op, Causal causal, const ConstTensor& q, const ConstTensor& k) {
  switch (causal) {
    case Causal::kNone:
    case Causal::kTopLeft:
      return Status::Ok();
    case Causal::kBottomRight:
      if (k.dims[1] < q.dims[1]) {
        return Status::InvalidArgument(
            std::string(op) +
            ": causal bottom-right aligns the last query with the last key, "
            "so it needs at least as many keys as queries; keys " +
            ShapeString(k) + " have M = " + std::to_string(k.dims[1]) + " and queries " +
            ShapeString(q) + " N = " + std::to_string(q.dims[1]));
      }
      return Status::Ok();
  }
  return Status::InvalidArgument(std::string(op) + ": causal is " +
                                 std::to_string(static_cast<int>(causal)) + ", not a Causal");
}

}  // namespace attnscore::ops
