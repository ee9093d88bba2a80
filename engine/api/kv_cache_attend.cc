// KvCache::Attend and AttendPacked: the queries of runs of consecutive
// sequences, each run one call of the multi-head op (or of its form over
// bf16 or int8 rows) on views of the cache, each query's length its causal
// bound in its own sequence.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "api/engine_access.h"
#include "api/kv_cache_storage.h"
#include "base/call_scope.h"
#include "base/checks.h"
#include "ops/multihead.h"
#include "ops/multihead_window.h"

namespace attnscore {
namespace {

using internal::CheckTensor;
using internal::kAnyDim;
using kv_cache_storage::kOp;

// The multi-head op's options for a cache's call: the causal bound is in
// the per-query lengths the call is given.
MultiHeadOptions MultiHeadOf(const KvCacheAttendOptions& options) {
  MultiHeadOptions multihead;
  multihead.scale = options.scale;
  multihead.softcap = options.softcap;
  multihead.window = options.window;
  multihead.sinks = options.sinks;
  multihead.alibi_slopes = options.alibi_slopes;
  multihead.bias = options.bias;
  multihead.mask = options.mask;
  return multihead;
}

// Whether the scores depend on where a query sits (a window, ALiBi): the op
// places query i of N at M - N + i, so such a call's sequences must share
// one length M.
bool Positional(const KvCacheAttendOptions& options) {
  return options.window.left >= 0 || !options.alibi_slopes.empty();
}

// Entries [first, first + count) of a (B, ...) view; a dim of 1 (a
// broadcast bias or mask) stays as it is.
template <class View>
View Entries(View view, int64_t first, int64_t count) {
  if (view.empty() || view.dims[0] == 1) return view;
  view.data += first * view.strides[0];
  view.dims[0] = count;
  return view;
}
ops::dot_product::Int8KeyView Entries(ops::dot_product::Int8KeyView view, int64_t first,
                                      int64_t count) {
  view.params += first * view.params_strides[0];
  static_cast<TensorView<const uint8_t>&>(view) =
      Entries(TensorView<const uint8_t>(view), first, count);
  return view;
}
ops::dot_product::Int8ValueView Entries(ops::dot_product::Int8ValueView view, int64_t first,
                                        int64_t count) {
  view.scales += first * view.scales_strides[0];
  static_cast<TensorView<const int8_t>&>(view) =
      Entries(TensorView<const int8_t>(view), first, count);
  return view;
}

// A (B, Hq, N, L) bias or mask cut to the run's first `keys` columns (a
// column dim of 1 stays).
template <typename T>
TensorView<T> Columns(TensorView<T> view, int64_t keys) {
  if (!view.empty() && view.dims[3] != 1) view.dims[3] = keys;
  return view;
}

}  // namespace

Status KvCache::Storage::AttendRun(const internal::CallContext& call, int64_t first, int64_t count,
                                   const ConstTensor& queries, const KvCacheAttendOptions& options,
                                   const Tensor& out, const Tensor& weights) const {
  const int64_t n = queries.dims[1];
  int64_t longest = 0;
  for (int64_t b = first; b < first + count; ++b) {
    longest = std::max(longest, lengths[static_cast<size_t>(b)]);
  }
  // Query i of sequence b sees its keys 0 .. L_b - N + i: per-query lengths.
  int64_t* const query_lengths =
      call.workspace.Words(internal::IndexSlot::kCacheLengths, static_cast<size_t>(count * n));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      query_lengths[b * n + i] = lengths[static_cast<size_t>(first + b)] - n + i + 1;
    }
  }
  const ValidLens lens = ValidLens::PerQuery(query_lengths, count, n);
  MultiHeadOptions multihead = MultiHeadOf(options);
  multihead.bias = Columns(Entries(options.bias, first, count), longest);
  multihead.mask = Columns(Entries(options.mask, first, count), longest);
  Tensor run_weights;  // (count, Hq, N, longest), the columns past it zeroed
  if (!weights.empty()) {
    run_weights = weights;
    run_weights.dims[3] = longest;
    for (int64_t b = 0; b < count; ++b) {
      for (int64_t h = 0; h < weights.dims[1]; ++h) {
        for (int64_t i = 0; i < n; ++i) {
          float* row = run_weights.data + b * weights.strides[0] + h * weights.strides[1] +
                       i * weights.strides[2];
          for (int64_t j = longest; j < weights.dims[3]; ++j) row[j * weights.strides[3]] = 0.0f;
        }
      }
    }
  }
  if (int8()) {
    return ops::CachedAttention(call, kOp, queries, Entries(Int8Keys(longest), first, count),
                                Entries(Int8Values(longest), first, count), lens, multihead, out,
                                run_weights);
  }
  if (grouped()) {  // bf16
    ops::dot_product::Bf16KeyView keys_held;
    static_cast<TensorView<const uint16_t>&>(keys_held) =
        Entries(TensorView<const uint16_t>(Bf16Keys(longest)), first, count);
    return ops::CachedAttention(
        call, kOp, queries, keys_held,
        Entries(View<uint16_t>(values, longest, shape.value_dim), first, count), lens, multihead,
        out, run_weights);
  }
  return ops::MultiHeadAttention(
      call, kOp, queries, Entries(View<float>(keys, longest, shape.key_dim), first, count),
      Entries(View<float>(values, longest, shape.value_dim), first, count), lens, multihead, out,
      run_weights);
}

Status KvCache::Storage::CheckAttend(const ConstTensor& queries,
                                     const KvCacheAttendOptions& options) const {
  ATTNSCORE_RETURN_IF_ERROR(ops::CheckScoreOptions(kOp, options.scale, options.softcap));
  ATTNSCORE_RETURN_IF_ERROR(ops::CheckWindow(kOp, options.window));
  if (queries.dims[queries.rank - 2] % shape.kv_heads != 0) {
    return Status::InvalidArgument(std::string(kOp) + ": queries " + ShapeString(queries) +
                                   " have " + std::to_string(queries.dims[queries.rank - 2]) +
                                   " heads; the cache's " + std::to_string(shape.kv_heads) +
                                   " key-value heads must divide them");
  }
  return Status::Ok();
}

Status KvCache::Attend(const Engine& engine, ConstTensor queries, Tensor out,
                       Tensor attention_weights) const {
  return Attend(engine, queries, KvCacheAttendOptions(), out, attention_weights);
}

Status KvCache::Attend(const Engine& engine, ConstTensor queries,
                       const KvCacheAttendOptions& options, Tensor out,
                       Tensor attention_weights) const {
  const Storage& s = *storage_;
  const KvCacheShape& shape = s.shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(
      kOp, "queries", queries, {shape.batch, kAnyDim, kAnyDim, shape.key_dim}, "(B, N, Hq, D)"));
  ATTNSCORE_RETURN_IF_ERROR(s.CheckAttend(queries, options));
  const int64_t n = queries.dims[1], heads = queries.dims[2];
  int64_t longest = 0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    const int64_t held = s.lengths[static_cast<size_t>(b)];
    if (held < n) {
      return Status::InvalidArgument(std::string(kOp) + ": sequence " + std::to_string(b) +
                                     " holds " + std::to_string(held) + " positions but queries " +
                                     ShapeString(queries) + " are its newest " + std::to_string(n) +
                                     "; append their keys and values first");
    }
    longest = std::max(longest, held);
  }
  const MultiHeadOptions multihead = MultiHeadOf(options);
  ATTNSCORE_RETURN_IF_ERROR(ops::CheckScoreTerms(kOp, multihead, shape.batch, heads, n, longest));
  // The whole call's outputs, before any run writes its part.
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "out", out, {shape.batch, n, heads, shape.value_dim}, "(B, N, Hq, Dv)"));
  if (!attention_weights.empty()) {
    ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "attention_weights", attention_weights,
                                          {shape.batch, heads, n, longest}, "(B, Hq, N, L)"));
  }
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(
      kOp, {{"queries", queries}}, out, attention_weights, ValidLens::None(), shape.batch, n));
  ATTNSCORE_RETURN_IF_ERROR(ops::OptionsApart(kOp, multihead, out, attention_weights));
  return internal::RunCall(
      internal::EngineAccess::Context(engine), kOp, [&](const internal::CallContext& call) {
        // One run of all B, or with positional options runs of one length.
        for (int64_t first = 0, last = 0; first < shape.batch; first = last) {
          last = first + 1;
          while (last < shape.batch &&
                 (!Positional(options) ||
                  s.lengths[static_cast<size_t>(last)] == s.lengths[static_cast<size_t>(first)])) {
            ++last;
          }
          const int64_t count = last - first;
          ATTNSCORE_RETURN_IF_ERROR(s.AttendRun(call, first, count, Entries(queries, first, count),
                                                options, Entries(out, first, count),
                                                Entries(attention_weights, first, count)));
        }
        return Status::Ok();
      });
}

Status KvCache::AttendPacked(const Engine& engine, ConstTensor queries,
                             TensorView<const int64_t> query_counts,
                             const KvCacheAttendOptions& options, Tensor out) const {
  const Storage& s = *storage_;
  const KvCacheShape& shape = s.shape;
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "queries", queries, {kAnyDim, kAnyDim, shape.key_dim}, "(T, Hq, D)"));
  ATTNSCORE_RETURN_IF_ERROR(s.CheckAttend(queries, options));
  const int64_t rows = queries.dims[0], heads = queries.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(s.CheckCounts("query_counts", query_counts, rows, /*held=*/true));
  if (!options.bias.empty() || !options.mask.empty()) {
    return Status::InvalidArgument(std::string(kOp) +
                                   ": a bias or mask is shaped (B, Hq, N, L) for one N; packed "
                                   "queries take neither");
  }
  const MultiHeadOptions multihead = MultiHeadOf(options);
  ATTNSCORE_RETURN_IF_ERROR(ops::CheckScoreTerms(kOp, multihead, shape.batch, heads, 1, 1));
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "out", out, {rows, heads, shape.value_dim}, "(T, Hq, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(kOp, {{"queries", queries}}, out, Tensor(),
                                                        ValidLens::None(), 1, 1));
  ATTNSCORE_RETURN_IF_ERROR(ops::OptionsApart(kOp, multihead, out, Tensor()));
  ATTNSCORE_RETURN_IF_ERROR(ops::ReadApart(kOp, "query_counts", query_counts, out, Tensor()));
  const auto count = [&](int64_t b) { return query_counts.data[b * query_counts.strides[0]]; };
  return internal::RunCall(
      internal::EngineAccess::Context(engine), kOp, [&](const internal::CallContext& call) {
        // Runs of consecutive sequences with the same count of queries (and,
        // with positional options, the same length): the queries and out of
        // a run are then (run, n, Hq, F) views of the packed rows.
        int64_t row = 0;
        for (int64_t first = 0, last = 0; first < shape.batch; first = last) {
          const int64_t n = count(first);
          last = first + 1;
          while (last < shape.batch && count(last) == n &&
                 (!Positional(options) ||
                  s.lengths[static_cast<size_t>(last)] == s.lengths[static_cast<size_t>(first)])) {
            ++last;
          }
          if (n == 0) continue;  // idle
          const auto run = [&](const auto& t) {
            using View = std::remove_cv_t<std::remove_reference_t<decltype(t)>>;
            return View(t.data + row * t.strides[0], {last - first, n, t.dims[1], t.dims[2]},
                        {n * t.strides[0], t.strides[0], t.strides[1], t.strides[2]});
          };
          ATTNSCORE_RETURN_IF_ERROR(
              s.AttendRun(call, first, last - first, run(queries), options, run(out), Tensor()));
          row += (last - first) * n;
        }
        return Status::Ok();
      });
}

}  // namespace attnscore
