// Packed variable-length batches of the multi-head op (docs/semantics.md
// section 5.8): each sequence its own call on views of the packed rows.
#include <array>
#include <cstdint>
#include <string>

#include "base/checks.h"
#include "ops/multihead.h"

namespace attnscore::ops {
namespace {

constexpr const char* kOp = "MultiHeadAttentionPacked";
constexpr const char* kSingleOp = "MultiHeadAttention";  // the checks' own name
using internal::CheckTensor;
using internal::kAnyDim;

// `offsets` as S + 1 of `rows` packed rows: from 0, non-decreasing, to rows.
Status CheckOffsets(const char* name, const SequenceOffsets& offsets, int64_t rows) {
  const std::string prefix = std::string(kOp) + ": " + name;
  if (offsets.data == nullptr || offsets.count < 2) {
    return Status::InvalidArgument(prefix + " has " + std::to_string(offsets.count) + " offsets" +
                                   (offsets.data ? "" : " at null") +
                                   "; want S + 1 >= 2 of them, from 0 to the packed rows");
  }
  if (offsets.at(0) != 0) {
    return Status::InvalidArgument(prefix + "[0] is " + std::to_string(offsets.at(0)) +
                                   "; the first sequence begins at row 0");
  }
  for (int64_t s = 1; s < offsets.count; ++s) {
    if (offsets.at(s) < offsets.at(s - 1)) {
      return Status::InvalidArgument(
          prefix + "[" + std::to_string(s) + "] is " + std::to_string(offsets.at(s)) + ", below " +
          name + "[" + std::to_string(s - 1) + "] = " + std::to_string(offsets.at(s - 1)) +
          "; offsets must not decrease");
    }
  }
  if (offsets.at(offsets.count - 1) != rows) {
    return Status::InvalidArgument(prefix + "[" + std::to_string(offsets.count - 1) + "] is " +
                                   std::to_string(offsets.at(offsets.count - 1)) +
                                   "; the last offset must be the packed rows, " +
                                   std::to_string(rows));
  }
  return Status::Ok();
}

// The offsets' bytes, for ReadApart.
TensorView<const char> BytesOf(const SequenceOffsets& offsets) {
  return TensorView<const char>(static_cast<const char*>(offsets.data),
                                {offsets.count * (offsets.is_int64 ? 8 : 4)});
}

// Rows [first, first + count) of a packed (T, H, F) view as (1, count, H, F).
template <typename T>
TensorView<T> Sequence(const TensorView<T>& t, int64_t first, int64_t count) {
  return TensorView<T>(t.data + first * t.strides[0], {1, count, t.dims[1], t.dims[2]},
                       {count * t.strides[0], t.strides[0], t.strides[1], t.strides[2]});
}

}  // namespace

Status CheckMultiHeadAttentionPacked(const ConstTensor& q, const ConstTensor& k,
                                     const ConstTensor& v, const SequenceOffsets& cu_q,
                                     const SequenceOffsets& cu_k, const MultiHeadOptions& options,
                                     std::array<int64_t, 3>* out_shape) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", q, {kAnyDim, kAnyDim, kAnyDim}, "(Tq, Hq, D)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", k, {kAnyDim, kAnyDim, q.dims[2]}, "(Tk, Hkv, D)"));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", v, {k.dims[0], k.dims[1], kAnyDim}, "(Tk, Hkv, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(CheckOffsets("cu_seqlens_q", cu_q, q.dims[0]));
  ATTNSCORE_RETURN_IF_ERROR(CheckOffsets("cu_seqlens_k", cu_k, k.dims[0]));
  if (cu_q.count != cu_k.count) {
    return Status::InvalidArgument(std::string(kOp) + ": cu_seqlens_q has " +
                                   std::to_string(cu_q.count) + " offsets and cu_seqlens_k " +
                                   std::to_string(cu_k.count) + "; both are S + 1");
  }
  if (!options.bias.empty() || !options.mask.empty()) {
    return Status::InvalidArgument(std::string(kOp) +
                                   ": a bias or mask is shaped (B, Hq, N, M) for one batch; a "
                                   "packed call takes neither");
  }
  // Every sequence checked as its own call, messages naming the sequence.
  for (int64_t s = 0; s + 1 < cu_q.count; ++s) {
    const int64_t n = cu_q.at(s + 1) - cu_q.at(s), m = cu_k.at(s + 1) - cu_k.at(s);
    if (n == 0) continue;
    if (m == 0) {
      return Status::InvalidArgument(std::string(kOp) + ": sequence " + std::to_string(s) +
                                     " has " + std::to_string(n) +
                                     " queries and no key; each sequence with queries needs keys");
    }
    MultiHeadShapes shapes;
    const Status checked = CheckMultiHeadAttentionInputs(
        Sequence(q, cu_q.at(s), n), Sequence(k, cu_k.at(s), m), Sequence(v, cu_k.at(s), m),
        ValidLens::None(), options, &shapes);
    if (!checked.ok()) {  // its message, named for the sequence
      const std::string own = std::string(kSingleOp) + ": ";
      std::string message = checked.message();
      if (message.rfind(own, 0) == 0) message.erase(0, own.size());
      return Status::InvalidArgument(std::string(kOp) + ": sequence " + std::to_string(s) + ": " +
                                     message);
    }
  }
  *out_shape = {q.dims[0], q.dims[1], v.dims[2]};
  return Status::Ok();
}

Status MultiHeadAttentionPacked(const internal::CallContext& call, const ConstTensor& q,
                                const ConstTensor& k, const ConstTensor& v,
                                const SequenceOffsets& cu_q, const SequenceOffsets& cu_k,
                                const MultiHeadOptions& options, const Tensor& out) {
  std::array<int64_t, 3> out_shape{};
  ATTNSCORE_RETURN_IF_ERROR(
      CheckMultiHeadAttentionPacked(q, k, v, cu_q, cu_k, options, &out_shape));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "out", out, {out_shape[0], out_shape[1], out_shape[2]}, "(Tq, Hq, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(
      kOp, {{"queries", q}, {"keys", k}, {"values", v}}, out, Tensor(), ValidLens::None(), 1, 1));
  // The options' views and the offsets, read while out is written, apart
  // from all of out (each sequence's own call checks only its rows).
  ATTNSCORE_RETURN_IF_ERROR(OptionsApart(kOp, options, out, Tensor()));
  ATTNSCORE_RETURN_IF_ERROR(ReadApart(kOp, "cu_seqlens_q", BytesOf(cu_q), out, Tensor()));
  ATTNSCORE_RETURN_IF_ERROR(ReadApart(kOp, "cu_seqlens_k", BytesOf(cu_k), out, Tensor()));
  for (int64_t s = 0; s + 1 < cu_q.count; ++s) {
    const int64_t n = cu_q.at(s + 1) - cu_q.at(s), m = cu_k.at(s + 1) - cu_k.at(s);
    if (n == 0) continue;
    ATTNSCORE_RETURN_IF_ERROR(MultiHeadAttention(call, kOp, Sequence(q, cu_q.at(s), n),
                                                 Sequence(k, cu_k.at(s), m),
                                                 Sequence(v, cu_k.at(s), m), ValidLens::None(),
                                                 options, Sequence(out, cu_q.at(s), n), Tensor()));
  }
  return Status::Ok();
}

}  // namespace attnscore::ops
