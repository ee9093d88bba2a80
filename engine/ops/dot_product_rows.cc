// The dot product's row path: see dot_product_paths.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/attention_row.h"
#include "kernels/masked_softmax.h"
#include "kernels/soft_cap.h"
#include "ops/dot_product_paths.h"
#include "ops/masked_softmax.h"

namespace attnscore::ops::dot_product {

namespace {

// A block's softmax statistics and its share of the output, as a task leaves
// them for the merge: max, sum (NaN when the block poisons the row), then Dv
// floats of Σ p_j V_j over the block's keys with the block's own weights p.
struct BlockPartial {
  static constexpr int64_t kHeader = 2;
  float* data;
  float& max() const { return data[0]; }
  float& sum() const { return data[1]; }
  float* out() const { return data + kHeader; }
};

// An entry's rows go through the row kernels in chunks of this many, the
// rows of a chunk sharing each K and V row read.
constexpr int64_t kChunkRows = static_cast<int64_t>(kernels::kMaxSharedRows);

// Each of `count` rows' first n[r] scores, against keys from `first_key`,
// capped where the form caps, then given its terms; rows[r] is row
// row_of(r) of group g of entry b.
template <class RowOf>
void ShapeScores(const ScoreForm& form, int64_t b, int64_t g, int64_t first_key, size_t count,
                 const size_t* n, float* const* rows, RowOf row_of) {
  if (form.softcap > 0.0f) {
    for (size_t r = 0; r < count; ++r) kernels::SoftCap(rows[r], n[r], form.softcap);
  }
  if (!form.HasTerms()) return;
  for (size_t r = 0; r < count; ++r) {
    form.AddTerms(b, g, row_of(r), first_key, rows[r], static_cast<int64_t>(n[r]));
  }
}

// Group g of entry b of a (B, G, R, F) view: its row 0; rows are
// strides[2] apart, their elements strides[3].
template <typename T>
T* GroupOf(const TensorView<T>& t, int64_t b, int64_t g) {
  return t.data + b * t.strides[0] + g * t.strides[1];
}

// Calls read(...) with group g of entry b's rows from row `first` on, as
// the row kernels take them: a pointer and a row stride, or a cache's keys
// (`first` then a multiple of kernels::kCachedKeyGroup, as the cached
// paths' key blocks and ranges are), or int8 values with their scales.
template <typename T, class Read>
void ReadFrom(const TensorView<const T>& t, int64_t b, int64_t g, int64_t first, Read&& read) {
  read(GroupOf(t, b, g) + first * t.strides[2], t.strides[2]);
}
template <class Read>
void ReadFrom(const Bf16KeyView& k, int64_t b, int64_t g, int64_t first, Read&& read) {
  read(kernels::Bf16Keys{GroupOf(k, b, g) + first * k.strides[2]});
}
template <class Read>
void ReadFrom(const Int8KeyView& k, int64_t b, int64_t g, int64_t first, Read&& read) {
  const float* params = k.params + b * k.params_strides[0] + g * k.params_strides[1];
  const auto group = static_cast<int64_t>(kernels::kCachedKeyGroup);
  read(kernels::Int8Keys{GroupOf(k, b, g) + first * k.strides[2],
                         params + first / group * 2 * k.dims[3]});
}
template <class Read>
void ReadFrom(const Int8ValueView& v, int64_t b, int64_t g, int64_t first, Read&& read) {
  const float* scales = v.scales + b * v.scales_strides[0] + g * v.scales_strides[1];
  read(kernels::Int8Values{GroupOf(v, b, g) + first * v.strides[2], v.strides[2], scales + first});
}

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
  float* rows[kChunkRows] = {};
  size_t valid[kChunkRows] = {}, mixed[kChunkRows] = {};
  for (int64_t r = 0; r < count; ++r) {
    q_rows[r] = GroupOf(q, b, g) + (row0 + r) * q.strides[2];
    rows[r] = scratch + r * keys;
    valid[r] = static_cast<size_t>(lens.row(b, row0 + r));
    // A query with length 0 weighs all M keys equally, as the reference does.
    mixed[r] = valid[r] > 0 ? valid[r] : static_cast<size_t>(keys);
  }
  ReadFrom(k, b, g, 0, [&](auto... keys_from) {
    kernels::ScoreRows(static_cast<size_t>(count), q_rows, static_cast<size_t>(q.dims[3]),
                       keys_from..., valid, scale, rows);
  });
  for (int64_t r = 0; r < count; ++r) {
    kernels::MaskedSoftmaxRow(rows[r], valid[r], mixed[r], rows[r]);
    rows[r] = GroupOf(out, b, g) + (row0 + r) * out.strides[2];
    std::fill(rows[r], rows[r] + v.dims[3], 0.0f);
  }
  const float* weights[kChunkRows] = {};
  for (int64_t r = 0; r < count; ++r) weights[r] = scratch + r * keys;
  ReadFrom(v, b, g, 0, [&](auto... values_from) {
    kernels::AddMixes(static_cast<size_t>(count), weights, mixed, values_from...,
                      static_cast<size_t>(v.dims[3]), rows);
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

// The row path with the keys in blocks of `key_block`, a task each for all
// of a group's rows, then merged row by row.
template <class KeyView, class ValueView>
Status RowsInKeyBlocks(const internal::CallContext& call, int threads, int64_t key_block,
                       const ConstTensor& q, const KeyView& k, const ValueView& v,
                       const internal::RowLengths& lens, const ScoreForm& form, const Tensor& out,
                       const Tensor& attention) {
  const int64_t groups = q.dims[1], queries = q.dims[2], depth = q.dims[3], keys = k.dims[2];
  const int64_t value_dim = v.dims[3], rows = q.dims[0] * groups * queries;
  const bool want_attention = !attention.empty();
  const int64_t blocks = CeilDiv(keys, key_block);  // per row, at most
  const int64_t partial_floats = BlockPartial::kHeader + value_dim;
  float* partials = call.workspace.Floats(internal::ScratchSlot::kRowPartials,
                                          static_cast<size_t>(rows * blocks * partial_floats));
  const auto partial = [&](int64_t r, int64_t block) {
    return BlockPartial{partials + (r * blocks + block) * partial_floats};
  };
  const auto attention_row = [&](int64_t b, int64_t g, int64_t i) {
    return GroupOf(attention, b, g) + i * attention.strides[2];
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();

  // Each task: one block of keys for every row of one group, so that rows
  // sharing keys (an entry's queries, a group's heads) read the block's K and
  // V once for a chunk of rows. A block's groups are consecutive tasks: where
  // the groups' K and V rows interleave (token-major heads), the next task
  // reads the rest of the lines the last one brought in. Its scratch holds
  // each row's block scores, then its weights (or, for a row with L = 0,
  // uniform weights over M keys).
  const int64_t chunk_rows = std::min(queries, kChunkRows);
  Status status = internal::ForEachRowInParallel(
      call.workspace, threads, q.dims[0] * blocks * groups, internal::ScratchSlot::kRowTask,
      static_cast<size_t>(std::max(keys, chunk_rows * key_block)),
      [&](int64_t task, float* scratch) {
        const int64_t b = task / groups / blocks, block = task / groups % blocks;
        const int64_t g = task % groups;
        const int64_t first = block * key_block;
        for (int64_t i0 = 0; i0 < queries; i0 += kChunkRows) {
          // The chunk's rows with keys in this block: scored together, then
          // each row's softmax, then the rows with finite weights mixed together.
          const float* q_rows[kChunkRows] = {};
          float* scores[kChunkRows] = {};
          const float* weights[kChunkRows] = {};
          float* outs[kChunkRows] = {};
          size_t n[kChunkRows] = {}, mix_n[kChunkRows] = {};
          int64_t row_of[kChunkRows] = {};
          int64_t count = 0;
          for (int64_t i = i0; i < std::min(queries, i0 + kChunkRows); ++i) {
            const int64_t valid = lens.row(b, i);
            if (valid == 0) {
              // Uniform weights over all M keys, as the reference's mask gives.
              if (block != 0) continue;
              std::fill(scratch, scratch + keys, 1.0f / static_cast<float>(keys));
              float* out_row = GroupOf(out, b, g) + i * out.strides[2];
              ReadFrom(v, b, g, 0, [&](auto... values) {
                kernels::MixRow(scratch, static_cast<size_t>(keys), values...,
                                static_cast<size_t>(value_dim), out_row);
              });
              if (want_attention) {
                float* w = attention_row(b, g, i);
                for (int64_t j = 0; j < keys; ++j) w[j * attention.strides[3]] = scratch[j];
              }
              continue;
            }
            if (first >= valid) continue;
            q_rows[count] = GroupOf(q, b, g) + i * q.strides[2];
            scores[count] = scratch + count * key_block;
            n[count] = static_cast<size_t>(std::min(key_block, valid - first));
            row_of[count] = i;
            ++count;
          }
          if (count == 0) continue;
          ReadFrom(k, b, g, first, [&](auto... keys_from) {
            kernels::ScoreRows(static_cast<size_t>(count), q_rows, static_cast<size_t>(depth),
                               keys_from..., n, form.scale, scores);
          });
          ShapeScores(form, b, g, first, static_cast<size_t>(count), n, scores,
                      [&](size_t c) { return row_of[c]; });
          int64_t mixing = 0;
          for (int64_t c = 0; c < count; ++c) {
            const int64_t i = row_of[c];
            const kernels::SoftmaxBlockStats stats =
                kernels::MaskedSoftmaxBlock(scores[c], n[c], scores[c]);
            const BlockPartial p = partial((b * groups + g) * queries + i, block);
            p.max() = stats.max;
            p.sum() = stats.poisoned ? nan : stats.sum;
            if (stats.poisoned) continue;
            weights[mixing] = scores[c];
            outs[mixing] = p.out();
            mix_n[mixing] = n[c];
            ++mixing;
            if (want_attention) {
              float* w = attention_row(b, g, i) + first * attention.strides[3];
              for (size_t j = 0; j < n[c]; ++j) {
                w[static_cast<int64_t>(j) * attention.strides[3]] = scores[c][j];
              }
            }
          }
          ReadFrom(v, b, g, first, [&](auto... values_from) {
            kernels::MixRows(static_cast<size_t>(mixing), weights, mix_n, values_from...,
                             static_cast<size_t>(value_dim), outs);
          });
        }
      },
      [] {}, RowPathBalance(lens, q.dims[0]));
  ATTNSCORE_RETURN_IF_ERROR(status);

  // Merge each row's blocks: weigh block β by sum_β · exp(max_β − max), the
  // share of the row's softmax denominator its keys hold: 2 FLOPs per
  // block's output element (and its weights, where asked for, scaled).
  const double merge_flops =
      2.0 * static_cast<double>(rows * (blocks * value_dim + (want_attention ? keys : 0)));
  return internal::ForEachRowInParallel(
      call.workspace, internal::ThreadsFor(threads, merge_flops), rows,
      internal::ScratchSlot::kRowBuffer, /*scratch_floats=*/0,
      [&](int64_t r, float*) {
        const int64_t b = r / queries / groups, g = r / queries % groups, i = r % queries;
        const int64_t valid = lens.row(b, i);
        if (valid == 0) return;  // done whole by its task
        const int64_t used = CeilDiv(valid, key_block);
        float* out_row = GroupOf(out, b, g) + i * out.strides[2];
        float* w = want_attention ? attention_row(b, g, i) : nullptr;
        const int64_t ws = want_attention ? attention.strides[3] : 0;
        float max = -std::numeric_limits<float>::infinity();
        bool poisoned = false;
        for (int64_t block = 0; block < used; ++block) {
          poisoned = poisoned || std::isnan(partial(r, block).sum());
          max = std::max(max, partial(r, block).max());
        }
        // Every valid score -Inf: NaN, as the one-row softmax gives; with a
        // sink, weights 0 and output 0 (the sink holds the whole mass).
        const float* sink = form.Sink(g, i);
        const bool none = max == -std::numeric_limits<float>::infinity();
        poisoned = poisoned || (none && sink == nullptr);
        if (poisoned || none) {
          const float fill = poisoned ? nan : 0.0f;
          for (int64_t c = 0; c < value_dim; ++c) out_row[c * out.strides[3]] = fill;
          for (int64_t j = 0; w != nullptr && j < keys; ++j) w[j * ws] = fill;
          return;
        }
        for (int64_t j = valid; w != nullptr && j < keys; ++j) w[j * ws] = 0.0f;
        if (used == 1 && sink == nullptr) {  // the block's weights are the row's
          const float* o = partial(r, 0).out();
          for (int64_t c = 0; c < value_dim; ++c) out_row[c * out.strides[3]] = o[c];
          return;
        }
        // Each block's share replaces its max, which is no longer needed.
        float total = 0.0f;
        for (int64_t block = 0; block < used; ++block) {
          const BlockPartial p = partial(r, block);
          p.max() = p.sum() == 0.0f ? 0.0f : p.sum() * std::exp(p.max() - max);
          total += p.max();
        }
        // A sink's e^{z - max} joins the denominator (+Inf: every share 0).
        if (sink != nullptr) total += std::exp(*sink - max);
        for (int64_t block = 0; block < used; ++block) partial(r, block).max() /= total;
        // out[c] = Σ_β share_β · out_β[c], summed from +0 in block order, a
        // product then a sum per term; block after block into block 0's
        // output, so that the columns go a vector at a time.
        float* sum = partial(r, 0).out();
        const float first_share = partial(r, 0).max();
        for (int64_t c = 0; c < value_dim; ++c) sum[c] = 0.0f + first_share * sum[c];
        for (int64_t block = 1; block < used; ++block) {
          const float share = partial(r, block).max();
          const float* block_out = partial(r, block).out();
          for (int64_t c = 0; c < value_dim; ++c) sum[c] += share * block_out[c];
        }
        for (int64_t c = 0; c < value_dim; ++c) out_row[c * out.strides[3]] = sum[c];
        for (int64_t block = 0; w != nullptr && block < used; ++block) {
          const float share = partial(r, block).max();
          const int64_t first = block * key_block, last = std::min(valid, first + key_block);
          for (int64_t j = first; j < last; ++j) w[j * ws] *= share;
        }
      },
      [] {});
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
