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
// are strided (PacksValues).
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

namespace attnscore::ops::dot_product {
namespace {

// An entry's packed K (and V): not yet made, being made, made.
constexpr int kUnpacked = 0, kPacking = 1, kPacked = 2;

// a · b and a + b, or INT64_MAX where they overflow: views with zero
// strides may have dims whose packed copies no memory could hold, and those
// compare as too large.
int64_t SaturatedProduct(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? INT64_MAX : product;
}
int64_t SaturatedSum(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? INT64_MAX : sum;
}

// The floats of an entry's K.
int64_t EntryKeysFloats(const ConstTensor& q, const ConstTensor& k) {
  return SaturatedProduct(k.dims[1], q.dims[2]);
}

// The floats of an entry's copy of K: only where its columns are strided.
int64_t CopiedKeysFloats(const ConstTensor& q, const ConstTensor& k) {
  return k.strides[2] == 1 ? 0 : EntryKeysFloats(q, k);
}

// A query tile's scores: 2L per key.
int64_t TileScoresFloats(const ConstTensor& k) {
  return SaturatedProduct(2 * static_cast<int64_t>(kernels::QueryTileLanes()), k.dims[1]);
}

// Where an entry's V is larger than this (128 KiB, a quarter of a Zen 3's
// L2), or its rows are not dense, the tile path packs V
// (kernels::PackValues) if K and V packed fit in kTilePathMaxPackedFloats.
// Read in place, each strip of columns strides through V's rows, which the
// prefetchers follow worse than a stream: 6-row MixTile, D 64, V in cache,
// 61 GFLOP/s at 1,024 keys and 41 at 4,096, against 83 and 76 packed. In
// the op, alternated in one process on a Zen 3, time in place ÷ packed:
// (1, 1024, 4096) 1.13-1.28, (1, 512, 2048) 1.13-1.21, (4, 128, 1024)
// 1.06-1.11, (2, 128, 2048) per-query 1.09-1.10, (1, 1024, 1024) 1.04-1.06;
// at 512 keys or fewer the copy costs as much as it saves or more: (2, 512,
// 512) 0.99-1.00, (4, 128, 512) per-query 0.96-0.98, (8, 128, 128)
// per-query 0.93. Rows 4 KiB apart (a head of token-major K/V) gained
// 1.16-1.23 even at 128 keys (tile loop alone).
constexpr int64_t kInPlaceValuesMaxFloats = int64_t{32} << 10;

// Whether the tile path packs V: where it must (strided columns) or where
// that pays and fits in the kept scratch.
// V's M · Dv never overflows: CheckTensor counted its elements.
bool PacksValues(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v) {
  if (v.strides[2] != 1) return true;
  const int64_t values = v.dims[1] * v.dims[2];
  const bool pays = v.strides[1] != v.dims[2] || values > kInPlaceValuesMaxFloats;
  return pays && SaturatedProduct(q.dims[0], SaturatedSum(EntryKeysFloats(q, k), values)) <=
                     kTilePathMaxPackedFloats;
}

// The floats of the copied K (where CopiedKeysFloats) and of the packed V
// (where PacksValues) for every entry of a call.
int64_t PackedFloats(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v) {
  const int64_t values = PacksValues(q, k, v) ? v.dims[1] * v.dims[2] : 0;
  return SaturatedProduct(q.dims[0], SaturatedSum(CopiedKeysFloats(q, k), values));
}

}  // namespace

bool EvenEntryRanges(const internal::RowLengths& lens, int64_t batch, int threads, double* before,
                     int64_t* bounds) {
  const int64_t queries = lens.queries(), keys = lens.keys();
  if (threads < 2 || batch < threads) return false;
  before[0] = 0;  // before[b]: the work of entries [0, b)
  for (int64_t b = 0; b < batch; ++b) {
    double work = 0;
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t length = lens.row(b, i);
      work += static_cast<double>(length == 0 ? keys : length);
    }
    before[static_cast<size_t>(b + 1)] = before[static_cast<size_t>(b)] + work;
  }
  const double share = before[batch] / threads;
  int64_t* const cut = bounds;  // cut[t]: range t's first entry
  const auto cuts = static_cast<size_t>(threads + 1);
  std::fill(cut, cut + cuts, batch);
  cut[0] = 0;
  for (size_t t = 1; t < cuts - 1; ++t) {
    // The entry boundary nearest t shares of the work, leaving at least one
    // entry to each range before and after it.
    const double target = static_cast<double>(t) * share;
    const auto off = [&](int64_t e) { return std::abs(before[static_cast<size_t>(e)] - target); };
    const int64_t highest = batch - static_cast<int64_t>(cuts - 1 - t);
    cut[t] = cut[t - 1] + 1;
    for (int64_t e = cut[t] + 1; e <= highest; ++e) {
      if (off(e) < off(cut[t])) cut[t] = e;
    }
  }
  for (size_t t = 0; t + 1 < cuts; ++t) {
    const double work =
        before[static_cast<size_t>(cut[t + 1])] - before[static_cast<size_t>(cut[t])];
    if (work > (1.0 + kEntryRangeSlack) * share) return false;
  }
  return true;
}

bool UseTilePath(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                 const ConstTensor& v) {
  // Lengths and query indices share one 64-bit sort key (OrderByLength);
  // lengths are int32 in the kernels.
  const int64_t values = PacksValues(q, k, v) ? v.dims[1] * v.dims[2] : 0;
  return call.options.precision == Precision::kFp32 && k.dims[1] > 0 && q.dims[2] > 0 &&
         k.dims[1] < (int64_t{1} << 31) && q.dims[1] < (int64_t{1} << 32) &&
         SaturatedProduct(q.dims[0], SaturatedSum(EntryKeysFloats(q, k), values)) <=
             kTilePathMaxPackedFloats &&
         TileScoresFloats(k) <= kTilePathMaxPackedFloats;
}

namespace {

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

// One tile-path call in named steps: Prepare, then Run, tile by tile
// (GatherTile, ScoreTile, MixTile, WriteTile).
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
    threads_ = internal::ThreadsFor(call_.threads(), flops);
    // The first tile of every entry goes first (Run), so that threads prepare
    // different entries at once rather than wait for one another.
    for (int64_t b = 0; b < batch_; ++b) pack_state_[b] = kUnpacked;  // before any thread reads it
    return Status::Ok();
  }
  // Every tile: each thread its own range of whole entries where they share
  // out evenly, else tiles to threads as they come free.
  Status Run() {
    const int64_t out_floats = scatter_out_ ? tile_queries_ * value_dim_ : 0;
    const size_t scratch_floats =
        static_cast<size_t>(scores_floats_ + tile_queries_ * depth_ + out_floats);
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
              for (int64_t tile = 0; tile < tiles_per_entry_; ++tile) RunTile(b, tile, scratch);
            }
          },
          [] {}, internal::Balance::kOneAtATime);
    }
    // Else tiles go to threads as they come free. Tasks [0, batch): each
    // entry's first tile; then the others, entry by entry.
    return internal::ForEachRowInParallel(
        call_.workspace, threads_, batch_ * tiles_per_entry_, internal::ScratchSlot::kWorkspace,
        scratch_floats,
        [&](int64_t task, float* scratch) {
          const int64_t later = task - batch_;
          const int64_t b = later < 0 ? task : later / (tiles_per_entry_ - 1);
          const int64_t tile = later < 0 ? 0 : 1 + later % (tiles_per_entry_ - 1);
          RunTile(b, tile, scratch);
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
  // W V over `width` keys for `tile_rows` rows of entry b: the kernels' flags.
  uint32_t Mix(int64_t b, size_t tile_rows, const kernels::TileWeights& weights, int64_t width,
               float* const* out_rows) const {
    if (pack_values_) {
      return kernels::MixPackedTile(tile_rows, weights, static_cast<size_t>(width),
                                    packed_values_ + b * keys_ * value_dim_,
                                    static_cast<size_t>(lens_.entry(b).mix), 0,
                                    static_cast<size_t>(value_dim_), panel_columns_, out_rows);
    }
    return kernels::MixTile(tile_rows, weights, static_cast<size_t>(width),
                            v_.data + b * v_.strides[0], v_.strides[1],
                            static_cast<size_t>(value_dim_), out_rows);
  }
  // Tile `tile` of entry b: its queries' scores, weights and output.
  void RunTile(int64_t b, int64_t tile, float* scratch) {
    Pack(b);
    // The tile's scratch: its scores (then its exps), key by key, its packed
    // queries and, where needed, its output rows.
    float* const scores = scratch;
    float* const q_packed = scores + scores_floats_;
    float* const out_scratch = q_packed + tile_queries_ * depth_;
    Tile t;
    GatherTile(b, tile, scores, out_scratch, &t);
    if (t.zeros < t.count) ScoreTile(b, scores, q_packed, &t);
    MixTile(b, scores, &t);
    WriteTile(b, scores, t);
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
  // Scores, then each query's exps down its lane and its sum's reciprocal.
  void ScoreTile(int64_t b, float* scores, float* q_packed, Tile* t) const {
    kernels::PackQueries(static_cast<size_t>(t->count), t->q_rows, q_.strides[2],
                         static_cast<size_t>(depth_), q_packed);
    const float* entry_k = copy_keys_ ? packed_ + b * entry_keys_ : k_.data + b * k_.strides[0];
    const int64_t k_row_stride = copy_keys_ ? depth_ : k_.strides[1];
    kernels::ScoreQueryTile(q_packed, static_cast<size_t>(depth_), entry_k, k_row_stride, t->widths,
                            scale_, nullptr, t->valid, t->row_max, scores);
    for (int64_t half = 0; half * lanes_ < t->count; ++half) {
      const int64_t lane = half * lanes_;
      t->undefined |= kernels::QueryTileExps(nullptr, t->valid + lane, t->row_max + lane,
                                             t->widths[half], static_cast<size_t>(tile_queries_),
                                             scores + lane, t->inv_sum + lane)
                      << lane;
    }
  }
  // W V: queries of length 0 one by one over all M keys; the others in
  // sub-tiles as even as MixTileRows() allows, each over its own longest
  // length. Where a sub-tile takes queries of both halves, the first half's
  // weights past its own scores, to the sub-tile's width, are zeros.
  void MixTile(int64_t b, float* scores, Tile* t) const {
    for (int64_t r = 0; r < t->zeros; ++r) {
      Mix(b, 1, kernels::TileWeights{&uniform_row_, 0, nullptr}, keys_, &t->out_rows[r]);
    }
    const int64_t sub_tiles = CeilDiv(t->count - t->zeros, mix_rows_);
    for (int64_t s = 0, from = t->zeros; s < sub_tiles; ++s) {
      const int64_t size = (t->count - from) / (sub_tiles - s);
      const int64_t width = t->valid[from + size - 1];
      if (from < lanes_ && from + size > lanes_) {
        for (auto j = static_cast<int64_t>(t->widths[0]); j < width; ++j) {
          std::fill_n(scores + j * tile_queries_, lanes_, 0.0f);
        }
      }
      const kernels::TileWeights sub_tile{t->weights + from, static_cast<size_t>(tile_queries_),
                                          t->inv_sum + from};
      const uint32_t non_finite =
          Mix(b, static_cast<size_t>(size), sub_tile, width, t->out_rows + from);
      for (int64_t r = from; r < from + size; ++r) {
        // A query without a softmax is NaN whatever its mix (WriteTile).
        if ((non_finite >> (r - from) & 1) != 0 && (t->undefined >> r & 1) == 0 &&
            t->valid[r] < width) {
          Mix(b, 1,
              kernels::TileWeights{&t->weights[r], static_cast<size_t>(tile_queries_),
                                   &t->inv_sum[r]},
              t->valid[r], &t->out_rows[r]);
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
