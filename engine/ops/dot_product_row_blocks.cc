// The dot product's row path with each row's keys in blocks, merged in
// block order: see dot_product_paths.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/attention_row.h"
#include "kernels/masked_softmax.h"
#include "ops/dot_product_paths.h"
#include "ops/dot_product_row_reads.h"

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

}  // namespace

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

template Status RowsInKeyBlocks(const internal::CallContext&, int, int64_t, const ConstTensor&,
                                const ConstTensor&, const ConstTensor&, const internal::RowLengths&,
                                const ScoreForm&, const Tensor&, const Tensor&);
template Status RowsInKeyBlocks(const internal::CallContext&, int, int64_t, const ConstTensor&,
                                const Bf16KeyView&, const TensorView<const uint16_t>&,
                                const internal::RowLengths&, const ScoreForm&, const Tensor&,
                                const Tensor&);
template Status RowsInKeyBlocks(const internal::CallContext&, int, int64_t, const ConstTensor&,
                                const Int8KeyView&, const Int8ValueView&,
                                const internal::RowLengths&, const ScoreForm&, const Tensor&,
                                const Tensor&);

}  // namespace attnscore::ops::dot_product
