// The dot product's row path, its rows whole, and the entry point that
// picks whole rows or key blocks (dot_product_row_blocks.cc): see
// dot_product_paths.h.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "base/parallel.h"
#include "kernels/attention_row.h"
#include "kernels/masked_softmax.h"
#include "ops/dot_product_paths.h"
#include "ops/dot_product_row_reads.h"
#include "ops/masked_softmax.h"

namespace attnscore::ops::dot_product {

namespace {

// True where the groups' K or V rows interleave (token-major heads: a key's
// rows of every group side by side) rather than lie apart, each group's
// rows a block of their own (heads-first, as in a KvCache). It picks how
// the work is read, never a bit of the result.
template <class KeyView, class ValueView>
bool GroupsInterleave(const KeyView& k, const ValueView& v) {
  const int64_t keys = k.dims[2];
  return k.dims[1] > 1 &&
         (k.strides[1] < keys * k.strides[2] || v.strides[1] < keys * v.strides[2]);
}

// Keys per range of WholeRows where its chunks go together: every group's
// K rows of a range (and then its V rows) take at most this many bytes,
// half of a 512 KiB L2, or the range is 16 keys. Token-major decode (B 4,
// Hq 16, Hkv 4, D 64, 2,048 keys) on 2 threads took 1.06-1.08x the time of
// key blocks with ranges of a quarter of this (64 keys), its rows'
// prefetches stopping at each range's end; 0.88-1.01x with these (256
// keys); alternated, on a Zen 3.
constexpr int64_t kRangeBytes = int64_t{256} << 10;
// Ranges are whole key groups of a cache (bf16, int8): a range's first key
// starts one.
constexpr auto kRangeMultiple = static_cast<int64_t>(kernels::kCachedKeyGroup);

// Rows [row0, row0 + kChunkRows) of group g of entry b (those there are),
// whole, scores of the scale alone and no weights asked for: scored
// together over their own keys, each row's softmax in `scratch` (a row of
// `keys` floats per row), then mixed together over its mixed keys. The
// arithmetic of WholeRows' tasks for such a chunk, without their ranges.
template <class KeyView, class ValueView>
void ChunkWhole(const ConstTensor& q, const KeyView& k, const ValueView& v,
                const internal::RowLengths& lens, float scale, int64_t b, int64_t g, int64_t row0,
                float* scratch, const Tensor& out) {
  const int64_t keys = k.dims[2], count = std::min(kChunkRows, q.dims[2] - row0);
  const float* q_rows[kChunkRows] = {};
  float* scores[kChunkRows] = {};
  const float* weights[kChunkRows] = {};  // the scores, once softmaxed in place
  float* outs[kChunkRows] = {};
  size_t valid[kChunkRows] = {}, mixed[kChunkRows] = {};
  for (int64_t r = 0; r < count; ++r) {
    q_rows[r] = GroupOf(q, b, g) + (row0 + r) * q.strides[2];
    scores[r] = scratch + r * keys;
    weights[r] = scores[r];
    outs[r] = GroupOf(out, b, g) + (row0 + r) * out.strides[2];
    valid[r] = static_cast<size_t>(lens.row(b, row0 + r));
    // A query with length 0 weighs all M keys equally, as the reference does.
    mixed[r] = valid[r] > 0 ? valid[r] : static_cast<size_t>(keys);
  }
  ReadFrom(k, b, g, 0, [&](auto... keys_from) {
    kernels::ScoreRows(static_cast<size_t>(count), q_rows, static_cast<size_t>(q.dims[3]),
                       keys_from..., valid, scale, scores);
  });
  for (int64_t r = 0; r < count; ++r) {
    kernels::MaskedSoftmaxRow(scores[r], valid[r], mixed[r], scores[r]);
    std::fill(outs[r], outs[r] + v.dims[3], 0.0f);
  }
  ReadFrom(v, b, g, 0, [&](auto... values_from) {
    kernels::AddMixes(static_cast<size_t>(count), weights, mixed, values_from...,
                      static_cast<size_t>(v.dims[3]), outs);
  });
}

// The row path with each row whole. A task takes a run of an entry's
// chunks (group by group) through the keys range by range, every chunk of
// the run scoring (then mixing) a range before the next. Where one chunk's
// K and V rows lie apart from the others' (heads-first groups of at most a
// chunk of rows), a run is one chunk and a range all the keys. Where an
// entry's groups interleave (token-major heads) or a group has more rows
// than a chunk, runs take several chunks and ranges kRangeBytes, so that
// the K and V lines one chunk brings in serve the others while in cache.
// Runs are then as long as leaves four tasks a thread, where there are
// chunks for that. Either way a row gets the same bits: its scores are its
// own, its softmax runs over the whole row, and AddMixes continues its sums
// range by range; runs only share out the work, so the thread count may
// choose them.
template <class KeyView, class ValueView>
Status WholeRows(const internal::CallContext& call, int threads, const ConstTensor& q,
                 const KeyView& k, const ValueView& v, const internal::RowLengths& lens,
                 const ScoreForm& form, const Tensor& out, const Tensor& attention) {
  const int64_t groups = q.dims[1], queries = q.dims[2], depth = q.dims[3], keys = k.dims[2];
  const int64_t value_dim = v.dims[3];
  const int64_t chunks = CeilDiv(queries, kChunkRows);
  const int64_t chunk_rows = std::min(queries, kChunkRows);
  const int64_t entry_chunks = groups * chunks;
  const bool together = GroupsInterleave(k, v) || queries > kChunkRows;
  const int64_t run =
      together
          ? CeilDiv(entry_chunks, std::min(entry_chunks, CeilDiv(4 * int64_t{threads}, q.dims[0])))
          : 1;
  const int64_t runs = CeilDiv(entry_chunks, run);
  const int64_t range =
      together ? std::max(kRangeMultiple, kRangeBytes / (4 * groups * std::max(depth, value_dim)) /
                                              kRangeMultiple * kRangeMultiple)
               : keys;
  const bool want_attention = !attention.empty();
  // Decode's commonest call: a chunk a task, its rows whole, nothing but the
  // scale on the scores and no weights asked for. ChunkWhole does what the
  // tasks below do for it, without their ranges: a dot-product decode of
  // 256 keys took 1.03-1.04 µs a call against 1.06-1.09, of 64 keys 0.38
  // against 0.39-0.41 (alternated, on an AMD EPYC Zen 5).
  if (!together && !want_attention && form.ScaleOnly()) {
    return internal::ForEachRowInParallel(
        call.workspace, threads, q.dims[0] * entry_chunks, internal::ScratchSlot::kRowTask,
        static_cast<size_t>(chunk_rows * keys),
        [&](int64_t task, float* scratch) {
          const int64_t b = task / entry_chunks, c = task % entry_chunks;
          ChunkWhole(q, k, v, lens, form.scale, b, chunks == 1 ? c : c / chunks,
                     chunks == 1 ? 0 : c % chunks * kChunkRows, scratch, out);
        },
        [] {}, RowPathBalance(lens, q.dims[0]));
  }
  // Each task's scratch: a row of scores per row of its run, then its weights.
  return internal::ForEachRowInParallel(
      call.workspace, threads, q.dims[0] * runs, internal::ScratchSlot::kRowTask,
      static_cast<size_t>(run * chunk_rows * keys),
      [&](int64_t task, float* scratch) {
        const int64_t b = runs == 1 ? task : task / runs;
        const int64_t first_chunk = runs == 1 ? 0 : task % runs * run;
        const int64_t last_chunk = std::min(entry_chunks, first_chunk + run);
        // Chunk c of the entry: group c / chunks, rows from (c % chunks) *
        // kChunkRows. A group's rows make one chunk wherever there are at
        // most kChunkRows of them (decode): then no division.
        const auto group_of = [&](int64_t c) { return chunks == 1 ? c : c / chunks; };
        const auto row0_of = [&](int64_t c) { return chunks == 1 ? 0 : c % chunks * kChunkRows; };
        const auto count_of = [&](int64_t c) { return std::min(kChunkRows, queries - row0_of(c)); };
        const auto row_scratch = [&](int64_t c, int64_t r) {
          return scratch + ((c - first_chunk) * chunk_rows + r) * keys;
        };
        // Every group's row i has row i's length; a query with length 0
        // weighs all M keys equally, as the reference does.
        const auto valid = [&](int64_t i) { return lens.row(b, i); };
        const auto mixed = [&](int64_t i) { return valid(i) > 0 ? valid(i) : keys; };
        int64_t longest = 0, widest = 0;
        for (int64_t c = first_chunk; c < last_chunk; ++c) {
          for (int64_t r = 0; r < count_of(c); ++r) {
            longest = std::max(longest, valid(row0_of(c) + r));
            widest = std::max(widest, mixed(row0_of(c) + r));
          }
        }
        const float* q_rows[kChunkRows] = {};
        const float* weights[kChunkRows] = {};
        float* rows[kChunkRows] = {};
        size_t n[kChunkRows] = {};
        // n[r]: row r's keys of the range from `first`, of `length(i)` in all.
        const auto in_range = [&](int64_t c, int64_t first, auto length) {
          for (int64_t r = 0; r < count_of(c); ++r) {
            const int64_t left = length(row0_of(c) + r) - first;
            n[r] = static_cast<size_t>(std::clamp<int64_t>(left, 0, range));
          }
        };
        for (int64_t first = 0; first < longest; first += range) {
          for (int64_t c = first_chunk; c < last_chunk; ++c) {
            const int64_t g = group_of(c), count = count_of(c);
            in_range(c, first, valid);
            for (int64_t r = 0; r < count; ++r) {
              q_rows[r] = GroupOf(q, b, g) + (row0_of(c) + r) * q.strides[2];
              rows[r] = row_scratch(c, r) + first;
            }
            ReadFrom(k, b, g, first, [&](auto... keys_from) {
              kernels::ScoreRows(static_cast<size_t>(count), q_rows, static_cast<size_t>(depth),
                                 keys_from..., n, form.scale, rows);
            });
            ShapeScores(form, b, g, first, static_cast<size_t>(count), n, rows,
                        [&](size_t r) { return row0_of(c) + static_cast<int64_t>(r); });
          }
        }
        for (int64_t c = first_chunk; c < last_chunk; ++c) {
          const int64_t g = group_of(c);
          for (int64_t r = 0; r < count_of(c); ++r) {
            const int64_t i = row0_of(c) + r;
            float* scores = row_scratch(c, r);
            const auto n_valid = static_cast<size_t>(valid(i));
            const float* sink = form.Sink(g, i);
            const auto softmax = [&](size_t width) {
              if (sink != nullptr) return SinkSoftmaxRow(scores, n_valid, width, *sink, scores);
              kernels::MaskedSoftmaxRow(scores, n_valid, width, scores);
            };
            if (want_attention) {
              float* w = GroupOf(attention, b, g) + i * attention.strides[2];
              softmax(static_cast<size_t>(keys));
              for (int64_t j = 0; j < keys; ++j) w[j * attention.strides[3]] = scores[j];
            } else {
              softmax(static_cast<size_t>(mixed(i)));
            }
            float* out_row = GroupOf(out, b, g) + i * out.strides[2];
            std::fill(out_row, out_row + value_dim, 0.0f);
          }
        }
        for (int64_t first = 0; first < widest; first += range) {
          for (int64_t c = first_chunk; c < last_chunk; ++c) {
            const int64_t g = group_of(c), count = count_of(c);
            in_range(c, first, mixed);
            for (int64_t r = 0; r < count; ++r) {
              weights[r] = row_scratch(c, r) + first;
              rows[r] = GroupOf(out, b, g) + (row0_of(c) + r) * out.strides[2];
            }
            ReadFrom(v, b, g, first, [&](auto... values_from) {
              kernels::AddMixes(static_cast<size_t>(count), weights, n, values_from...,
                                static_cast<size_t>(value_dim), rows);
            });
          }
        }
      },
      [] {}, RowPathBalance(lens, q.dims[0]));
}

}  // namespace

template <class KeyView, class ValueView>
Status GroupedRowPath(const internal::CallContext& call, const ConstTensor& q, const KeyView& k,
                      const ValueView& v, const internal::RowLengths& lens, const ScoreForm& form,
                      int64_t key_block, const Tensor& out, const Tensor& attention) {
  const int64_t keys = k.dims[2];
  const int threads =
      RowPathThreads(call.threads(), q.dims[0], q.dims[1], q.dims[2], keys, q.dims[3] + v.dims[3]);
  if (key_block >= keys) return WholeRows(call, threads, q, k, v, lens, form, out, attention);
  return RowsInKeyBlocks(call, threads, key_block, q, k, v, lens, form, out, attention);
}

template Status GroupedRowPath(const internal::CallContext&, const ConstTensor&, const ConstTensor&,
                               const ConstTensor&, const internal::RowLengths&, const ScoreForm&,
                               int64_t, const Tensor&, const Tensor&);
template Status GroupedRowPath(const internal::CallContext&, const ConstTensor&, const Bf16KeyView&,
                               const TensorView<const uint16_t>&, const internal::RowLengths&,
                               const ScoreForm&, int64_t, const Tensor&, const Tensor&);
template Status GroupedRowPath(const internal::CallContext&, const ConstTensor&, const Int8KeyView&,
                               const Int8ValueView&, const internal::RowLengths&, const ScoreForm&,
                               int64_t, const Tensor&, const Tensor&);

Status RowPath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
               const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
               int64_t key_block, const Tensor& out, const Tensor& attention) {
  // Each entry one group: (B, 1, R, F) views, the group stride never used.
  const auto grouped = [](const auto& t) {
    return std::decay_t<decltype(t)>(t.data, {t.dims[0], 1, t.dims[1], t.dims[2]},
                                     {t.strides[0], 0, t.strides[1], t.strides[2]});
  };
  return GroupedRowPath(call, grouped(q), grouped(k), grouped(v), lens, form, key_block,
                        grouped(out), attention.empty() ? Tensor() : grouped(attention));
}

}  // namespace attnscore::ops::dot_product
