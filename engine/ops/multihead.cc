// Multi-head attention (docs/semantics.md section 5): a checked call
// (multihead_checks.h), its causal bound folded into per-query lengths, runs
// the dot product over strided views: a group's query heads together on the
// row path when the queries are few (decoding), else every head at once
// through the tile kernels (multihead_tiles.h) or once per query head.
#include "ops/multihead.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/valid_lens.h"
#include "base/workspace.h"
#include "kernels/attention_row.h"
#include "ops/dot_product.h"
#include "ops/dot_product_paths.h"
#include "ops/multihead_checks.h"
#include "ops/multihead_tiles.h"
#include "ops/multihead_window.h"

namespace attnscore::ops {
namespace {

// Columns [0, first) of query n's rows of a (B, H, N, M) view, every entry
// and head, set to 0: the keys before its window.
void ZeroColumns(const Tensor& attention, int64_t n, int64_t first) {
  for (int64_t b = 0; b < attention.dims[0]; ++b) {
    for (int64_t h = 0; h < attention.dims[1]; ++h) {
      float* row = attention.data + b * attention.strides[0] + h * attention.strides[1] +
                   n * attention.strides[2];
      for (int64_t j = 0; j < first; ++j) row[j * attention.strides[3]] = 0.0f;
    }
  }
}

// Head h of a (B, N, H, F) view as a (B, N, F) view: no copy, strides kept.
template <typename T>
TensorView<T> OneHead(const TensorView<T>& t, int64_t h) {
  return TensorView<T>(t.data + h * t.strides[2], {t.dims[0], t.dims[1], t.dims[3]},
                       {t.strides[0], t.strides[1], t.strides[3]});
}

// Query n of a (B, N, H, F) view as (B, H / group, group, F): each K/V
// head's group of query heads as the rows of one group.
template <typename T>
TensorView<T> GroupsAtQuery(const TensorView<T>& t, int64_t n, int64_t group) {
  return TensorView<T>(t.data + n * t.strides[1], {t.dims[0], t.dims[2] / group, group, t.dims[3]},
                       {t.strides[0], group * t.strides[2], t.strides[2], t.strides[3]});
}

// A (B, M, H, F) view as (B, H, M, F): no copy, strides swapped (an int8
// view's scales are found by entry and head either way).
template <class View>
View HeadsOuter(const View& t) {
  View outer = t;
  std::swap(outer.dims[1], outer.dims[2]);
  std::swap(outer.strides[1], outer.strides[2]);
  return outer;
}

// Keys or values from key `first` on: a float view's exactly; a cache's from
// the start of the key group that holds `first` (its rows lie by groups,
// int8's scales per group), which `from` returns.
ConstTensor KeysFrom(const ConstTensor& t, int64_t first, int64_t* from) {
  *from = first;
  return ConstTensor(t.data + first * t.strides[1],
                     {t.dims[0], t.dims[1] - first, t.dims[2], t.dims[3]},
                     {t.strides[0], t.strides[1], t.strides[2], t.strides[3]});
}
template <class View>
View CachedFrom(View t, int64_t first, int64_t* from) {
  *from = first / kernels::kCachedKeyGroup * kernels::kCachedKeyGroup;
  t.data += *from * t.strides[1];
  t.dims[1] -= *from;
  return t;
}
dot_product::Bf16KeyView KeysFrom(const dot_product::Bf16KeyView& t, int64_t first, int64_t* from) {
  return CachedFrom(t, first, from);
}
TensorView<const uint16_t> KeysFrom(const TensorView<const uint16_t>& t, int64_t first,
                                    int64_t* from) {
  return CachedFrom(t, first, from);
}
dot_product::Int8KeyView KeysFrom(const dot_product::Int8KeyView& t, int64_t first, int64_t* from) {
  dot_product::Int8KeyView keys = CachedFrom(t, first, from);
  keys.params += *from / kernels::kCachedKeyGroup * 2 * t.dims[3];  // a group's lo and step
  return keys;
}
dot_product::Int8ValueView KeysFrom(const dot_product::Int8ValueView& t, int64_t first,
                                    int64_t* from) {
  dot_product::Int8ValueView values = CachedFrom(t, first, from);
  values.scales += *from;  // a scale per position
  return values;
}

// For each query position, one row-path call whose groups are the K/V
// heads, each with its query heads as rows, so each of a head's keys is
// read once for all of them (and token-major heads go through the keys side
// by side, so their K and V rows are read whole). The key block depends on
// the shape and not on the grouping or the layout, so a grouped call gives
// the bits of the same call with K and V repeated per head. `lengths`:
// (B, N), each query's. K and V floats, bf16 words or int8 codes (a
// KvCache's), whose key blocks are then whole int8 key groups. With a
// `window`, query n runs over the keys from its window's first on (a
// cache's from that key's group, the few keys before the first masked by
// the form's window_left), each row's length counted from there, the
// weights before it 0; rows of length 0 or of no key are left to
// FixUncoveredRows.
template <class KeyView, class ValueView>
Status GroupedDecode(const internal::CallContext& call, const ConstTensor& q, const KeyView& k,
                     const ValueView& v, const std::vector<int64_t>& lengths, const ScoreForm& form,
                     const Tensor& out, const Tensor& attention, const Window* window = nullptr) {
  const int64_t batch = q.dims[0], queries = q.dims[1], heads = q.dims[2], keys = k.dims[1];
  const int64_t kv_heads = k.dims[2], group = heads / kv_heads;  // query heads per K/V head
  std::vector<int64_t> query_lengths(static_cast<size_t>(batch));
  for (int64_t n = 0; n < queries; ++n) {
    int64_t first = 0;
    KeyView k_n = k;
    ValueView v_n = v;
    if (window) {
      const int64_t visible = WindowFirstKey(*window, n, queries, keys);
      k_n = KeysFrom(k, visible, &first);
      v_n = KeysFrom(v, visible, &first);
    }
    // Row i of group g is query head g · group + i, at query n; key j is
    // key first + j.
    ScoreForm grouped_form = form;
    grouped_form.place = {0, 0, group, 1, n, 0, first};
    if (window && first < WindowFirstKey(*window, n, queries, keys)) {
      grouped_form.window_left = window->left;
    }
    const int64_t width = keys - first;
    int64_t key_block = dot_product::RowKeyBlock(batch, heads, width, q.dims[3] + v.dims[3]);
    if constexpr (!std::is_same_v<KeyView, ConstTensor>) {  // a cache's keys
      const auto whole = static_cast<int64_t>(kernels::kCachedKeyGroup);
      key_block = dot_product::CeilDiv(key_block, whole) * whole;
    }
    for (int64_t b = 0; b < batch; ++b) {
      query_lengths[static_cast<size_t>(b)] =
          std::max<int64_t>(lengths[static_cast<size_t>(b * queries + n)] - first, 0);
    }
    internal::RowLengths lens;
    ATTNSCORE_RETURN_IF_ERROR(
        internal::RowLengths::Resolve(ValidLens::PerBatch(query_lengths.data(), batch), batch,
                                      group, width, call.workspace, &lens));
    Tensor groups_attention;  // (B, Hkv, group, M - first) at query n
    if (!attention.empty()) {
      groups_attention =
          Tensor(attention.data + n * attention.strides[2] + first * attention.strides[3],
                 {batch, kv_heads, group, width},
                 {attention.strides[0], group * attention.strides[1], attention.strides[1],
                  attention.strides[3]});
      ZeroColumns(attention, n, first);
    }
    ATTNSCORE_RETURN_IF_ERROR(dot_product::GroupedRowPath(
        call, GroupsAtQuery(q, n, group), HeadsOuter(k_n), HeadsOuter(v_n), lens, grouped_form,
        key_block, GroupsAtQuery(out, n, group), groups_attention));
  }
  return Status::Ok();
}

// Copies the (B, R, F) view `from` into the (B, R, F) view `to`, row by row.
void CopyRows(const ConstTensor& from, const Tensor& to) {
  for (int64_t b = 0; b < from.dims[0]; ++b) {
    for (int64_t r = 0; r < from.dims[1]; ++r) {
      dot_product::CopyRow(from.data + b * from.strides[0] + r * from.strides[1], from.strides[2],
                           to.data + b * to.strides[0] + r * to.strides[1], to.strides[2],
                           from.dims[2]);
    }
  }
}

// A (B, R, F) view's rows are F floats apart, in order.
bool Dense(const ConstTensor& t) {
  return t.strides[2] == 1 && t.strides[1] == t.dims[2] && t.strides[0] == t.dims[1] * t.dims[2];
}

}  // namespace

// CachedAttention over either kind of stored rows.
template <class KeyView, class ValueView>
Status CachedRowsAttention(const internal::CallContext& call, const char* op, ConstTensor q,
                           const KeyView& k, const ValueView& v, const ValidLens& valid_lens,
                           const MultiHeadOptions& options, Tensor out, Tensor attention) {
  const int64_t batch = q.dims[0], queries = q.dims[1], heads = q.dims[2], keys = k.dims[1];
  const int64_t value_dim = v.dims[3];
  ATTNSCORE_RETURN_IF_ERROR(CheckMultiHeadOutputs(op, q, keys, value_dim, out, attention));
  ATTNSCORE_RETURN_IF_ERROR(internal::CheckOutputsApart(op, {{"queries", q}}, out, attention,
                                                        valid_lens, batch, queries));
  std::vector<int64_t> lengths;
  ATTNSCORE_RETURN_IF_ERROR(
      EffectiveLengths(call.workspace, valid_lens, Causal::kNone, batch, queries, keys, &lengths));
  const ScoreForm form = FormOf(options, q.dims[3], queries, keys);
  // A cache's query at p sees its own key p (length p + 1 >= 1, and p in
  // its window), so no row is left uncovered (FixUncoveredRows).
  std::vector<int64_t> starts;
  const bool cut = CutByWindow(options.window, batch, queries, keys, &lengths, &starts);
  // The decode form, a query position at a time, on Q and out as they lie
  // or, where their rows are strided, on dense copies.
  const auto decode = [&](const ConstTensor& q_rows, const Tensor& out_rows) {
    return GroupedDecode(call, q_rows, k, v, lengths, form, out_rows, attention,
                         cut ? &options.window : nullptr);
  };
  if (q.strides[3] == 1 && out.strides[3] == 1) return decode(q, out);
  // Rows the kernels cannot read in place go through dense copies.
  const int64_t depth = q.dims[3];
  const int64_t q_floats = batch * queries * heads * depth;
  float* copies = nullptr;
  try {
    copies =
        call.workspace.Floats(internal::ScratchSlot::kHeadCopies,
                              static_cast<size_t>(q_floats + batch * queries * heads * value_dim));
  } catch (const std::bad_alloc&) {
    return Status::Internal(std::string(op) + ": out of memory for dense copies of Q and out");
  }
  const Tensor q_copy(copies, {batch, queries, heads, depth});
  const Tensor out_copy(copies + q_floats, {batch, queries, heads, value_dim});
  for (int64_t h = 0; h < heads; ++h) CopyRows(OneHead(q, h), OneHead(q_copy, h));
  ATTNSCORE_RETURN_IF_ERROR(decode(ConstTensor(q_copy), out_copy));
  for (int64_t h = 0; h < heads; ++h) CopyRows(OneHead(ConstTensor(out_copy), h), OneHead(out, h));
  return Status::Ok();
}

Status CachedAttention(const internal::CallContext& call, const char* op, ConstTensor queries,
                       const dot_product::Bf16KeyView& keys, TensorView<const uint16_t> values,
                       const ValidLens& valid_lens, const MultiHeadOptions& options, Tensor out,
                       Tensor attention_weights) {
  return CachedRowsAttention(call, op, queries, keys, values, valid_lens, options, out,
                             attention_weights);
}

Status CachedAttention(const internal::CallContext& call, const char* op, ConstTensor queries,
                       const dot_product::Int8KeyView& keys,
                       const dot_product::Int8ValueView& values, const ValidLens& valid_lens,
                       const MultiHeadOptions& options, Tensor out, Tensor attention_weights) {
  return CachedRowsAttention(call, op, queries, keys, values, valid_lens, options, out,
                             attention_weights);
}

Status MultiHeadAttention(const internal::CallContext& call, const char* op, ConstTensor q,
                          ConstTensor k, ConstTensor v, const ValidLens& valid_lens,
                          const MultiHeadOptions& multihead, Tensor out, Tensor attention) {
  ATTNSCORE_RETURN_IF_ERROR(
      CheckMultiHeadArguments(op, q, k, v, valid_lens, multihead, out, attention));
  const int64_t batch = q.dims[0], queries = q.dims[1], heads = q.dims[2], keys = k.dims[1];
  const int64_t kv_heads = k.dims[2], group = heads / kv_heads;  // query heads per K/V head
  std::vector<int64_t> lengths;
  ATTNSCORE_RETURN_IF_ERROR(EffectiveLengths(call.workspace, valid_lens, multihead.causal, batch,
                                             queries, keys, &lengths));
  const ScoreForm form = FormOf(multihead, q.dims[3], queries, keys);
  // A window's right side cuts the lengths; where its left side cuts too, or
  // it leaves a query no key, the windowed forms below run.
  std::vector<int64_t> starts;
  const bool cut = CutByWindow(multihead.window, batch, queries, keys, &lengths, &starts);

  // Decoding (a few queries): the grouped row path (GroupedDecode).
  if (queries <= dot_product::kRowPathMaxQueries && q.strides[3] == 1 && k.strides[3] == 1 &&
      v.strides[3] == 1 && out.strides[3] == 1) {
    if (!cut) return GroupedDecode(call, q, k, v, lengths, form, out, attention);
    ATTNSCORE_RETURN_IF_ERROR(
        GroupedDecode(call, q, k, v, lengths, form, out, attention, &multihead.window));
    FixUncoveredRows(v, lengths, starts, out, attention);
    return Status::Ok();
  }
  // A head of token-major views has rows H·F floats apart: 4 KiB for 16
  // heads of 64, so its rows share cache sets and oneDNN's matmuls on them
  // ran at 0.74x the speed (causal prefill (1, 1024, 16 heads, D 64),
  // alternated). Such heads run on dense copies of their Q, K, V and out,
  // a K/V head's copied once for its group.
  const bool copy = !Dense(OneHead(q, 0)) || !Dense(OneHead(k, 0)) || !Dense(OneHead(v, 0)) ||
                    !Dense(OneHead(ConstTensor(out), 0));
  const int64_t depth = q.dims[3], value_dim = v.dims[3];
  // Prefill through the tile kernels, every head at once, where they run
  // it: with a window; or on 2 threads or more where a head's dot product
  // would take the tile path (on the views it would run on), so the bits do
  // not depend on which. One thread without a window runs a head at a time:
  // alternated on a Zen 5, (2, 512, 512) x 8 heads and (1, 1024, 1024) x 16
  // took 3-8% less time so.
  const auto head_view = [&](const ConstTensor& t, int64_t rows, int64_t columns) {
    return copy ? ConstTensor(nullptr, {batch, rows, columns}) : OneHead(t, 0);
  };
  const bool tiles_alike =
      call.threads() > 1 && queries > dot_product::kRowPathMaxQueries &&
      dot_product::UseTilePath(call, head_view(q, queries, depth), head_view(k, keys, depth),
                               head_view(v, keys, value_dim), !attention.empty());
  Status tiled;
  if ((cut || tiles_alike) &&
      MultiHeadTiles(call, q, k, v, lengths, starts, cut, form, out, attention, &tiled)) {
    ATTNSCORE_RETURN_IF_ERROR(tiled);
    if (cut) FixUncoveredRows(v, lengths, starts, out, attention);
    return Status::Ok();
  }
  // Otherwise one dot-product call per query head. Every head has the same
  // shapes and lengths, so the first head makes every plan the others use:
  // a failure comes before anything is written. (Not so with a window that
  // cuts keys: its blocks of queries, each resolving lengths of its own, may
  // need a plan of a new width after earlier blocks were written.)
  internal::RowLengths lens;
  if (!cut) {
    ATTNSCORE_RETURN_IF_ERROR(
        internal::RowLengths::Resolve(ValidLens::PerQuery(lengths.data(), batch, queries), batch,
                                      queries, keys, call.workspace, &lens));
  }
  const int64_t q_floats = batch * queries * depth, k_floats = batch * keys * depth;
  const int64_t v_floats = batch * keys * value_dim, out_floats = batch * queries * value_dim;
  float* copies = nullptr;
  if (copy) {
    try {
      copies =
          call.workspace.Floats(internal::ScratchSlot::kHeadCopies,
                                static_cast<size_t>(q_floats + k_floats + v_floats + out_floats));
    } catch (const std::bad_alloc&) {
      return Status::Internal(std::string(op) + ": out of memory for dense copies of a head");
    }
  }
  // The copies' views, used only where `copy`: otherwise there is no
  // buffer, and no offset may be applied to its null pointer.
  const auto at = [copies](int64_t offset) { return copies ? copies + offset : nullptr; };
  const Tensor q_copy(at(0), {batch, queries, depth});
  const Tensor k_copy(at(q_floats), {batch, keys, depth});
  const Tensor v_copy(at(q_floats + k_floats), {batch, keys, value_dim});
  const Tensor out_copy(at(q_floats + k_floats + v_floats), {batch, queries, value_dim});
  for (int64_t h = 0; h < heads; ++h) {
    Tensor head_attention;
    if (!attention.empty()) {
      head_attention = Tensor(attention.data + h * attention.strides[1], {batch, queries, keys},
                              {attention.strides[0], attention.strides[2], attention.strides[3]});
    }
    // A head: the dot product, or with a window that cuts keys the
    // windowed prefill, over the lengths and starts of every head.
    ScoreForm head_form = form;  // rows are head h's queries
    head_form.place.head0 = h;
    const auto run_head = [&](const ConstTensor& q_h, const ConstTensor& k_h,
                              const ConstTensor& v_h, const Tensor& out_h) {
      return cut ? WindowedHead(call, q_h, k_h, v_h, lengths, starts, head_form, out_h,
                                head_attention)
                 : RunDotProduct(call, q_h, k_h, v_h, lens, head_form, out_h, head_attention);
    };
    if (!copy) {
      ATTNSCORE_RETURN_IF_ERROR(
          run_head(OneHead(q, h), OneHead(k, h / group), OneHead(v, h / group), OneHead(out, h)));
      continue;
    }
    CopyRows(OneHead(q, h), q_copy);
    if (h % group == 0) {
      CopyRows(OneHead(k, h / group), k_copy);
      CopyRows(OneHead(v, h / group), v_copy);
    }
    ATTNSCORE_RETURN_IF_ERROR(run_head(q_copy, k_copy, v_copy, out_copy));
    CopyRows(ConstTensor(out_copy), OneHead(out, h));
  }
  if (cut) FixUncoveredRows(v, lengths, starts, out, attention);
  return Status::Ok();
}

}  // namespace attnscore::ops
