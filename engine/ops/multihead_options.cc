// The multi-head op's score options (docs/semantics.md sections 5.1 and 5.5
// to 5.7): their checks, and the ScoreForm they make.
#include <cmath>
#include <string>
#include <utility>

#include "base/checks.h"
#include "ops/multihead.h"

namespace attnscore::ops {
namespace {

// (Hq,) logits or slopes, each passing `fine`, else refused naming `what`.
template <class Fine>
Status CheckPerHead(const char* op, const char* name, const ConstTensor& view, int64_t heads,
                    Fine fine, const char* what) {
  if (view.empty()) return Status::Ok();
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckTensor(op, name, view, {heads}, "(Hq,)"));
  for (int64_t h = 0; h < heads; ++h) {
    const float x = view.data[h * view.strides[0]];
    if (!fine(x)) {
      return Status::InvalidArgument(std::string(op) + ": " + name + "[" + std::to_string(h) +
                                     "] is " + std::to_string(x) + "; " + what);
    }
  }
  return Status::Ok();
}

// The checks of a view broadcast to `want`: rank 4, each dim `want`'s or
// 1, strides >= 0 and an extent that does not overflow.
template <typename T>
Status CheckBroadcast(const char* op, const char* name, const TensorView<const T>& view,
                      const int64_t (&want)[4]) {
  if (view.empty()) return Status::Ok();
  const auto shape = [](const int64_t* dims, int rank) {
    std::string s = "(";
    for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(dims[d]);
    return s + ")";
  };
  bool fits = view.rank == 4 && view.data != nullptr;
  for (int d = 0; fits && d < 4; ++d) fits = view.dims[d] == want[d] || view.dims[d] == 1;
  for (int d = 0; fits && d < 4; ++d) fits = view.strides[d] >= 0;
  // Its extent, Σ (dim - 1) · stride elements, must not overflow.
  int64_t extent = 0;
  for (int d = 0; fits && d < 4; ++d) {
    int64_t step = 0;
    fits = !__builtin_mul_overflow(view.dims[d] - 1, view.strides[d], &step) &&
           !__builtin_add_overflow(extent, step, &extent) &&
           !__builtin_mul_overflow(extent, static_cast<int64_t>(sizeof(T)), &step);
  }
  if (!fits) {
    return Status::InvalidArgument(std::string(op) + ": " + name + " has shape " +
                                   shape(view.dims, view.rank) +
                                   "; want (B, Hq, N, M) = " + shape(want, 4) +
                                   ", each dim that or 1, and strides >= 0 that address it");
  }
  return Status::Ok();
}

// A checked view with stride 0 along each dim of 1, so that indexing it by
// the call's (b, h, i, j) reads the broadcast value.
template <typename T>
TensorView<T> Broadcast(TensorView<T> view) {
  for (int d = 0; d < 4 && !view.empty(); ++d) {
    if (view.dims[d] == 1) view.strides[d] = 0;
  }
  return view;
}

}  // namespace

Status CheckScoreOptions(const char* op, float scale, float softcap) {
  if (!std::isfinite(scale)) {
    return Status::InvalidArgument(std::string(op) + ": scale is " + std::to_string(scale) +
                                   "; it must be finite");
  }
  if (!(softcap >= 0.0f) || !std::isfinite(softcap)) {
    return Status::InvalidArgument(std::string(op) + ": softcap is " + std::to_string(softcap) +
                                   "; it must be finite and >= 0 (0: no cap)");
  }
  return Status::Ok();
}

Status CheckSinks(const char* op, const ConstTensor& sinks, int64_t heads) {
  if (sinks.empty()) return Status::Ok();
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckTensor(op, "sinks", sinks, {heads}, "(Hq,)"));
  for (int64_t h = 0; h < heads; ++h) {
    if (std::isnan(sinks.data[h * sinks.strides[0]])) {
      return Status::InvalidArgument(std::string(op) + ": sinks[" + std::to_string(h) +
                                     "] is NaN; a sink is a logit (-Inf: none)");
    }
  }
  return Status::Ok();
}

Status CheckScoreTerms(const char* op, const MultiHeadOptions& options, int64_t batch,
                       int64_t heads, int64_t queries, int64_t keys) {
  ATTNSCORE_RETURN_IF_ERROR(CheckSinks(op, options.sinks, heads));
  ATTNSCORE_RETURN_IF_ERROR(CheckPerHead(
      op, "alibi_slopes", options.alibi_slopes, heads, [](float x) { return std::isfinite(x); },
      "a slope must be finite"));
  const int64_t want[4] = {batch, heads, queries, keys};
  ATTNSCORE_RETURN_IF_ERROR(CheckBroadcast(op, "bias", options.bias, want));
  return CheckBroadcast(op, "mask", options.mask, want);
}

Status OptionsApart(const char* op, const MultiHeadOptions& options, const ConstTensor& out,
                    const ConstTensor& attention) {
  ATTNSCORE_RETURN_IF_ERROR(ReadApart(op, "sinks", options.sinks, out, attention));
  ATTNSCORE_RETURN_IF_ERROR(ReadApart(op, "alibi_slopes", options.alibi_slopes, out, attention));
  ATTNSCORE_RETURN_IF_ERROR(ReadApart(op, "bias", options.bias, out, attention));
  return ReadApart(op, "mask", options.mask, out, attention);
}

ScoreForm FormOf(const MultiHeadOptions& options, int64_t depth, int64_t queries, int64_t keys) {
  ScoreForm form{options.scale != 0.0f
                     ? options.scale
                     : static_cast<float>(1.0 / std::sqrt(static_cast<double>(depth))),
                 options.softcap};
  if (!options.sinks.empty()) {
    form.sinks = options.sinks.data;
    form.sinks_stride = options.sinks.strides[0];
  }
  if (!options.alibi_slopes.empty()) {
    form.slopes = options.alibi_slopes.data;
    form.slopes_stride = options.alibi_slopes.strides[0];
  }
  form.bias = Broadcast(options.bias);  // checked by CheckScoreTerms
  form.mask = Broadcast(options.mask);
  form.position_shift = keys - queries;
  return form;
}

}  // namespace attnscore::ops
