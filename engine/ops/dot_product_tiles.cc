// The dot product's tile path: see dot_product_paths.h.
//
// Each entry's queries are taken shortest first, a query tile
// (kernels::QueryTileLanes() · 2 queries, one per lane of two vectors) at
// a time but for its first tile, which takes the queries left over. A tile's
// two halves each score over their own longest length, the first half's
// keys for both halves at once; each query's softmax runs down its lane over
// its own length, its max folded into the scores' pass and its sum's
// reciprocal applied to its output, not to each weight. Then W V in
// sub-tiles of up to kernels::MixTileRows() queries, each over its own longest
// length (all M keys for a query of length 0, which weighs them equally),
// all while the tile's scores stay in cache. A query's scores and weights are
// its own alone; its output sums V over its sub-tile's width, the keys past
// its own length weighing exactly 0, which leaves its value as if the sum had
// stopped at its own length (its bits too, but for the sign of a zero). A NaN
// or Inf in those values would not: such a query is mixed again over its own
// keys. K is read in place (copied per entry where its columns are strided);
// V in place, or packed in panels of columns where that pays or its columns
// are strided (PacksValues). Past kTileKeyBlock keys, tiles go in groups
// over a key block at a time, the softmax carried from block to block
// (tile_key_blocks.h), and V is packed.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/attention_tile.h"
#include "kernels/masked_softmax.h"
#include "ops/dot_product_paths.h"
#include "ops/dot_product_tile_plan.h"
#include "ops/tile_key_blocks.h"

namespace attnscore::ops::dot_product {
namespace {

// An entry's packed K (and V): not yet made, being made, made.
constexpr int kUnpacked = 0, kPacking = 1, kPacked = 2;

// One tile of an entry's queries as the tile path handles it: r < count,
// the r-th shortest of the tile's queries.
struct Tile {
  static constexpr size_t kMax = 2 * kernels::kMaxQueryTileLanes;
  int64_t count = 0;
  int64_t query[kMax] = {};
  int32_t valid[kMax] = {};  // 0 for lanes past `count`
  const float* q_rows[kMax] = {};
  const float* weights[kMax] = {};
  float* out_rows[kMax] = {};
  alignas(64) float row_max[kMax];
  alignas(64) float inv_sum[kMax];
  size_t widths[2] = {};   // each half's longest length
  int64_t zeros = 0;       // the queries of length 0, first
  uint32_t undefined = 0;  // bit r: query r has no softmax of its own
};

// Tiles that go over each key block together, past kTileKeyBlock keys: a
// block's K and V (4 MiB at D = Dv = 64) are read from memory once for
// the group, not once a tile.
constexpr int64_t kMaxTileGroup = 16;

// One tile-path call in named steps: Prepare, then Run, tile by tile
// (RunTiles, a group of tiles at a time: GatherTile; ScoreBlock,
// BlockExps and MixBlock over all keys, or in KeyBlockStep a block at a
// time; WriteTile).
class TileRun {
 public:
  TileRun(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
          const ConstTensor& v, const internal::RowLengths& lens, float scale, const Tensor& out,
          const Tensor& attention_weights)
      : call_(call),
        q_(q),
        k_(k),
        v_(v),
        lens_(lens),
        scale_(scale),
        out_(out),
        weights_out_(attention_weights) {}

  // The call's buffers, each entry marked unpacked, and its threads.
  Status Prepare() {
    try {
      sorted_ = call_.workspace.Words(internal::IndexSlot::kOrder,
                                      static_cast<size_t>(batch_ * queries_));
      pack_state_ =
          call_.workspace.Words(internal::IndexSlot::kPackStates, static_cast<size_t>(batch_));
      packed_ = call_.workspace.Floats(internal::ScratchSlot::kPackedKeys,
                                       static_cast<size_t>(PackedFloats(q_, k_, v_)));
    } catch (const std::bad_alloc&) {
      return Status::Internal("out of memory for the tile path's copied keys and packed values");
    }
    packed_values_ = packed_ + batch_ * entry_keys_;
    double flops = 0;
    for (int64_t b = 0; b < batch_; ++b) {
      const internal::EntryWidths& widths = lens_.entry(b);
      flops +=
          2.0 * static_cast<double>(queries_ * (widths.longest * depth_ + widths.mix * value_dim_));
    }
    threads_ = internal::ThreadsFor(call_.threads(), flops, kMinSharedTileFlops);
    // Past kTileKeyBlock keys, tiles in groups of up to kMaxTileGroup, at
    // least 4 groups a thread.
    if (keys_ > kTileKeyBlock) {
      group_ = std::clamp<int64_t>(batch_ * tiles_per_entry_ / (4 * threads_), 1, kMaxTileGroup);
      groups_per_entry_ = CeilDiv(tiles_per_entry_, group_);
    }
    // The first group of every entry goes first (Run), so that threads prepare
    // different entries at once rather than wait for one another.
    for (int64_t b = 0; b < batch_; ++b) pack_state_[b] = kUnpacked;  // before any thread reads it
    return Status::Ok();
  }
  // Every tile: each thread its own range of whole entries where they share
  // out evenly, else tiles to threads as they come free.
  Status Run() {
    // Scores, packed queries and scattered output rows of a group's tiles,
    // and a key block's output (RunTiles).
    const int64_t out_floats = (scatter_out_ ? group_ : 0) * tile_queries_ * value_dim_;
    const size_t scratch_floats = static_cast<size_t>(
        scores_floats_ + group_ * tile_queries_ * depth_ + out_floats + tile_queries_ * value_dim_);
    // Where whole entries share out evenly, each thread takes its own range of
    // them, tile after tile: it packs and reads only its entries' K and V,
    // which stay in its core's caches (encoder (4, 128, 128), per-query
    // lengths, on 2 threads: 1.85x of 1 thread in three runs, against
    // 1.52-1.73x with the tiles dealt out, BM_DotProductTwoThreads on a Zen 5).
    double* entry_work = nullptr;
    int64_t* range_bounds = nullptr;  // the call's, as sorted_
    try {
      entry_work =
          call_.workspace.Reals(internal::IndexSlot::kEntryWork, static_cast<size_t>(batch_ + 1));
      range_bounds =
          call_.workspace.Words(internal::IndexSlot::kBounds, static_cast<size_t>(threads_ + 1));
    } catch (const std::bad_alloc&) {
      return Status::Internal("out of memory for the tile path's entry ranges");
    }
    if (EvenEntryRanges(lens_, batch_, threads_, entry_work, range_bounds)) {
      return internal::ForEachRowInParallel(
          call_.workspace, threads_, threads_, internal::ScratchSlot::kWorkspace, scratch_floats,
          [&](int64_t range, float* scratch) {
            for (int64_t b = range_bounds[range]; b < range_bounds[range + 1]; ++b) {
              for (int64_t group = 0; group < groups_per_entry_; ++group) {
                RunTiles(b, group, scratch);
              }
            }
          },
          [] {}, internal::Balance::kOneAtATime);
    }
    // Else groups of tiles go to threads as they come free. Tasks [0,
    // batch): each entry's first group; then the others, entry by entry,
    // past kTileKeyBlock keys the longest (last) first, so that the short
    // ones even out the threads' ends.
    const bool longest_first = keys_ > kTileKeyBlock;
    return internal::ForEachRowInParallel(
        call_.workspace, threads_, batch_ * groups_per_entry_, internal::ScratchSlot::kWorkspace,
        scratch_floats,
        [&](int64_t task, float* scratch) {
          const int64_t later = task - batch_;
          const int64_t b = later < 0 ? task : later / (groups_per_entry_ - 1);
          const int64_t nth = later < 0 ? 0 : later % (groups_per_entry_ - 1);
          RunTiles(b,
                   later < 0       ? 0
                   : longest_first ? groups_per_entry_ - 1 - nth
                                   : 1 + nth,
                   scratch);
        },
        [] {}, internal::Balance::kOneAtATime);
  }

 private:
  // Entry b's queries sorted (and, where copy_keys_, its K rows below its
  // longest length copied dense; where pack_values_, its V rows below its
  // mix width packed; rows past them are never read) by the first tile of it
  // a thread takes, while the other tiles of the entry wait.
  void Pack(int64_t b) {
    const std::atomic_ref<int64_t> state(pack_state_[b]);
    int64_t expected = kUnpacked;
    if (state.load(std::memory_order_acquire) == kPacked) return;
    if (state.compare_exchange_strong(expected, kPacking, std::memory_order_acquire)) {
      OrderByLength(lens_, b, sorted_ + b * queries_);
      if (copy_keys_) {
        for (int64_t j = 0; j < lens_.entry(b).longest; ++j) {
          CopyRow(k_.data + b * k_.strides[0] + j * k_.strides[1], k_.strides[2],
                  packed_ + b * entry_keys_ + j * depth_, 1, depth_);
        }
      }
      if (pack_values_) {
        kernels::PackValues(v_.data + b * v_.strides[0], v_.strides[1], v_.strides[2],
                            static_cast<size_t>(lens_.entry(b).mix),
                            static_cast<size_t>(value_dim_), panel_columns_,
                            packed_values_ + b * keys_ * value_dim_);
      }
      state.store(kPacked, std::memory_order_release);
      return;
    }
    // Another thread is packing it (a thread that could not get its scratch
    // takes no tile, so never claims an entry).
    while (state.load(std::memory_order_acquire) != kPacked) std::this_thread::yield();
  }
  // W V over keys [first_key, first_key + width) for `tile_rows` rows of
  // entry b: the kernels' flags.
  uint32_t Mix(int64_t b, size_t tile_rows, const kernels::TileWeights& weights, int64_t first_key,
               int64_t width, float* const* out_rows) const {
    if (pack_values_) {
      return kernels::MixPackedTile(
          tile_rows, weights, static_cast<size_t>(width), packed_values_ + b * keys_ * value_dim_,
          static_cast<size_t>(lens_.entry(b).mix), static_cast<size_t>(first_key),
          static_cast<size_t>(value_dim_), panel_columns_, out_rows);
    }
    return kernels::MixTile(tile_rows, weights, static_cast<size_t>(width),
                            v_.data + b * v_.strides[0] + first_key * v_.strides[1], v_.strides[1],
                            static_cast<size_t>(value_dim_), out_rows);
  }
  // Group `group` of entry b's tiles (group_ tiles, the last group fewer):
  // their queries' scores, weights and output. Up to kTileKeyBlock keys, a
  // tile alone over all its keys; past it, a key block at a time, each
  // block's K and V read for every tile of the group while they are in
  // cache.
  void RunTiles(int64_t b, int64_t group, float* scratch) {
    Pack(b);
    // The scratch: the scores (then the exps) of a tile, key by key; each
    // tile's packed queries and, where needed, output rows; a key block's
    // output.
    float* const scores = scratch;
    float* const q_packed = scores + scores_floats_;
    float* const out_scratch = q_packed + group_ * tile_queries_ * depth_;
    float* const block_out = out_scratch + (scatter_out_ ? group_ * tile_queries_ * value_dim_ : 0);
    if (keys_ <= kTileKeyBlock) {  // group_ is 1
      Tile t;
      if (StartTile(b, group, scores, out_scratch, q_packed, &t)) {
        const KeyBlock all(t.valid, t.zeros, t.widths);
        ScoreBlock(b, all, q_packed, t.row_max, scores);
        t.undefined |= BlockExps(all, t.row_max, scores, t.inv_sum, nullptr);
        MixBlock(b, all, scores, t, t.inv_sum, t.out_rows);
      }
      return WriteTile(b, scores, t);
    }
    const int64_t first = group * group_, count = std::min(group_, tiles_per_entry_ - first);
    Tile tiles[kMaxTileGroup];
    RunningSoftmax running[kMaxTileGroup];
    int64_t width = 0;  // the group's longest length
    for (int64_t g = 0; g < count; ++g) {
      if (StartTile(b, first + g, scores, out_scratch + g * tile_queries_ * value_dim_,
                    q_packed + g * tile_queries_ * depth_, &tiles[g])) {
        running[g].Reset(tiles[g].count);
        width = std::max(width, TileWidth(tiles[g]));
      }
    }
    for (int64_t from = 0; from < width; from += kTileKeyBlock) {
      for (int64_t g = 0; g < count; ++g) {
        Tile& t = tiles[g];
        if (t.zeros == t.count || from >= TileWidth(t)) continue;
        KeyBlockStep(b, KeyBlock(t.valid, t.count, t.zeros, t.widths, from),
                     q_packed + g * tile_queries_ * depth_, scores, block_out, &t, &running[g]);
      }
    }
    for (int64_t g = 0; g < count; ++g) {
      Tile& t = tiles[g];
      if (t.zeros < t.count) {
        t.undefined |= running[g].Finish(RowsFrom(t.zeros, t.count), value_dim_, t.out_rows);
      }
      WriteTile(b, scores, t);
    }
  }
  // Tile `tile` of entry b gathered, its queries of length 0 mixed (all M
  // keys alike) and the others packed: whether it has any of those.
  bool StartTile(int64_t b, int64_t tile, float* scores, float* out_scratch, float* q_packed,
                 Tile* t) const {
    GatherTile(b, tile, scores, out_scratch, t);
    for (int64_t r = 0; r < t->zeros; ++r) {
      Mix(b, 1, kernels::TileWeights{&uniform_row_, 0, nullptr}, 0, keys_, &t->out_rows[r]);
    }
    if (t->zeros == t->count) return false;
    kernels::PackQueries(static_cast<size_t>(t->count), t->q_rows, q_.strides[2],
                         static_cast<size_t>(depth_), q_packed);
    return true;
  }
  static int64_t TileWidth(const Tile& t) {
    return static_cast<int64_t>(std::max(t.widths[0], t.widths[1]));
  }
  // The tile's queries, shortest first, and where their rows are.
  void GatherTile(int64_t b, int64_t tile, float* scores, float* out_scratch, Tile* t) const {
    const int64_t head = queries_ - (tiles_per_entry_ - 1) * tile_queries_;  // in [1, 2L]
    const int64_t first = tile == 0 ? 0 : head + (tile - 1) * tile_queries_;
    t->count = tile == 0 ? head : tile_queries_;
    for (int64_t r = 0; r < t->count; ++r) {
      const int64_t i = t->query[r] = sorted_[b * queries_ + first + r];
      t->valid[r] = static_cast<int32_t>(lens_.row(b, i));
      t->q_rows[r] = q_.data + b * q_.strides[0] + i * q_.strides[1];
      t->weights[r] = scores + r;
      t->out_rows[r] = scatter_out_ ? out_scratch + r * value_dim_
                                    : out_.data + b * out_.strides[0] + i * out_.strides[1];
    }
    // Queries rise in length: each half's last is its longest, and the
    // queries of length 0 come first.
    const int64_t first_half = std::min(t->count, lanes_);
    t->widths[0] = static_cast<size_t>(t->valid[first_half - 1]);
    t->widths[1] = t->count > lanes_ ? static_cast<size_t>(t->valid[t->count - 1]) : 0;
    while (t->zeros < t->count && t->valid[t->zeros] == 0) ++t->zeros;
  }
  // Key block k's scores against the packed queries, and each row's max
  // over its keys there.
  void ScoreBlock(int64_t b, const KeyBlock& k, const float* q_packed, float* row_max,
                  float* scores) const {
    const float* entry_k = copy_keys_ ? packed_ + b * entry_keys_ : k_.data + b * k_.strides[0];
    const int64_t k_row_stride = copy_keys_ ? depth_ : k_.strides[1];
    kernels::ScoreQueryTile(q_packed, static_cast<size_t>(depth_), entry_k + k.from * k_row_stride,
                            k_row_stride, k.widths, scale_, nullptr, k.valid, row_max, scores);
  }
  // Each query's exps down its lane against shift[r], its sum's reciprocal
  // and, where `sums`, its sum: the rows without a softmax there.
  uint32_t BlockExps(const KeyBlock& k, const float* shift, float* scores, float* inv_sum,
                     float* sums) const {
    uint32_t undefined = 0;
    for (int64_t half = 0; half < 2; ++half) {
      if (k.widths[half] == 0) continue;  // no key of the block in this half
      const int64_t lane = half * lanes_;
      undefined |= kernels::QueryTileExps(nullptr, k.valid + lane, shift + lane, k.widths[half],
                                          static_cast<size_t>(tile_queries_), scores + lane,
                                          inv_sum + lane, sums ? sums + lane : nullptr)
                   << lane;
    }
    return undefined;
  }
  // Key block k of tile t: its scores, its exps against the max so far
  // and W V into block_out, folded into the rows' output.
  void KeyBlockStep(int64_t b, const KeyBlock& k, const float* q_packed, float* scores,
                    float* block_out, Tile* t, RunningSoftmax* running) const {
    alignas(64) float block_max[Tile::kMax], sums[Tile::kMax];
    ScoreBlock(b, k, q_packed, block_max, scores);
    t->undefined |= BlockExps(k, running->Shift(block_max), scores, t->inv_sum, sums);
    const uint32_t rows = RowsFrom(k.first_row, t->count);
    running->AddSums(rows, sums);
    float* block_rows[Tile::kMax];
    for (int64_t r = 0; r < t->count; ++r) block_rows[r] = block_out + r * value_dim_;
    MixBlock(b, k, scores, *t, nullptr, block_rows);
    running->Fold(rows, block_rows, value_dim_, t->out_rows);
  }
  // W V over key block k for its rows with keys there, scaled by `scales`
  // (null: 1), into `out`: in sub-tiles as even as MixTileRows() allows,
  // each over its own longest length. Where a sub-tile takes queries of both
  // halves, the first half's weights past its own scores, to the sub-tile's
  // width, are zeros. A query whose mix read a NaN or an Inf past its keys
  // is mixed again over its own.
  void MixBlock(int64_t b, const KeyBlock& k, float* scores, const Tile& t, const float* scales,
                float* const* out) const {
    const int64_t sub_tiles = CeilDiv(t.count - k.first_row, mix_rows_);
    for (int64_t s = 0, from = k.first_row; s < sub_tiles; ++s) {
      const int64_t size = (t.count - from) / (sub_tiles - s);
      const int64_t width = k.valid[from + size - 1];
      if (from < lanes_ && from + size > lanes_) {
        for (auto j = static_cast<int64_t>(k.widths[0]); j < width; ++j) {
          std::fill_n(scores + j * tile_queries_, lanes_, 0.0f);
        }
      }
      const kernels::TileWeights sub_tile{t.weights + from, static_cast<size_t>(tile_queries_),
                                          scales ? scales + from : nullptr};
      const uint32_t non_finite =
          Mix(b, static_cast<size_t>(size), sub_tile, k.from, width, out + from);
      for (int64_t r = from; r < from + size; ++r) {
        // A query without a softmax is NaN whatever its mix (WriteTile).
        if ((non_finite >> (r - from) & 1) != 0 && (t.undefined >> r & 1) == 0 &&
            k.valid[r] < width) {
          Mix(b, 1,
              kernels::TileWeights{&t.weights[r], static_cast<size_t>(tile_queries_),
                                   scales ? &scales[r] : nullptr},
              k.from, k.valid[r], &out[r]);
        }
      }
      from += size;
    }
  }
  // NaN rows, the weights output and output rows kept in scratch.
  void WriteTile(int64_t b, const float* scores, const Tile& t) const {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t r = t.zeros; r < t.count; ++r) {
      if ((t.undefined >> r & 1) != 0) std::fill(t.out_rows[r], t.out_rows[r] + value_dim_, nan);
    }
    for (int64_t r = 0; r < t.count; ++r) {
      if (!weights_out_.empty()) {
        // Row r's weights: e · 1/sum below its length, 0 past it; 1/M
        // everywhere for length 0; NaN everywhere where it has no softmax.
        float* w =
            weights_out_.data + b * weights_out_.strides[0] + t.query[r] * weights_out_.strides[1];
        const int64_t step = weights_out_.strides[2];
        const bool none = r >= t.zeros && (t.undefined >> r & 1) != 0;
        const int64_t own = r < t.zeros || none ? 0 : t.valid[r];
        const float fill = r < t.zeros ? uniform_ : none ? nan : 0.0f;
        for (int64_t j = 0; j < own; ++j)
          w[j * step] = scores[j * tile_queries_ + r] * t.inv_sum[r];
        for (int64_t j = own; j < keys_; ++j) w[j * step] = fill;
      }
      if (scatter_out_) {
        CopyRow(t.out_rows[r], 1, out_.data + b * out_.strides[0] + t.query[r] * out_.strides[1],
                out_.strides[2], value_dim_);
      }
    }
  }

  const internal::CallContext& call_;
  const ConstTensor &q_, &k_, &v_;
  const internal::RowLengths& lens_;
  const float scale_;
  const Tensor &out_, &weights_out_;
  const int64_t batch_ = q_.dims[0], queries_ = q_.dims[1], depth_ = q_.dims[2];
  const int64_t keys_ = k_.dims[1], value_dim_ = v_.dims[2];
  // Output rows that the mix cannot write in place go through the tile's
  // scratch and are scattered after.
  const bool scatter_out_ = out_.strides[2] != 1, copy_keys_ = k_.strides[2] != 1;
  const bool pack_values_ = PacksValues(q_, k_, v_);
  const size_t panel_columns_ = kernels::ValuePanelColumns();
  const int64_t lanes_ = static_cast<int64_t>(kernels::QueryTileLanes());
  const int64_t tile_queries_ = 2 * lanes_;
  const int64_t mix_rows_ = static_cast<int64_t>(kernels::MixTileRows());
  const int64_t entry_keys_ = CopiedKeysFloats(q_, k_), scores_floats_ = TileScoresFloats(k_);
  const int64_t tiles_per_entry_ = CeilDiv(queries_, tile_queries_);
  int64_t group_ = 1, groups_per_entry_ = tiles_per_entry_;  // RunTiles' groups
  // A query of length 0 weighs each of the M keys 1/M (step 0: one weight).
  const float uniform_ = 1.0f / static_cast<float>(keys_);
  const float* const uniform_row_ = &uniform_;
  // The call's: written before the team starts, then shared by it.
  // sorted[b * queries + r]: the query of entry b that goes r-th
  // (OrderByLength); pack_state_[b] is read by std::atomic_ref.
  int64_t *sorted_ = nullptr, *pack_state_ = nullptr;
  float *packed_ = nullptr, *packed_values_ = nullptr;  // M · Dv an entry, if pack_values_
  int threads_ = 1;
};

}  // namespace

Status TilePath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, const ScoreForm& form,
                const Tensor& out, const Tensor& attention_weights) {
  TileRun run(call, q, k, v, lens, form.scale, out, attention_weights);
  ATTNSCORE_RETURN_IF_ERROR(run.Prepare());
  return run.Run();
}

}  // namespace attnscore::ops::dot_product
