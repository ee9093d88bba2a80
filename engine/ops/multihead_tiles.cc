// The multi-head op's prefill through the tile kernels: see
// multihead_tiles.h.
//
// K/V heads go a group at a time, two parallel loops each. The first packs
// the V of each K/V head of the group in panels (kernels::PackValues'
// layout), a run of keys a task; K and Q are read in place. The second
// takes the tiles of the group's query heads from one counter, one at a
// time: a tile is 2L consecutive queries (L = kernels::QueryTileLanes()),
// one to a vector lane. It scores from the first key any of its rows sees to
// the last, each lane masked to its own [start, end) in the scores' max and
// the exps; then W V in sub-tiles of MixTileRows() rows, each from its own
// rows' first key to their last. A row's weights outside its keys are exact
// zeros, which add nothing to a finite sum; a row whose mix read a NaN or
// an Inf there is mixed again over its own keys alone. A tile whose keys
// cross a multiple of kTileKeyBlock goes a key block at a time
// (tile_key_blocks.h). Each row's bits are the tile path's (the same sums
// in the same order) and depend on nothing but its own inputs.
//
// Packing K and Q as well (dense rows, not 4 KiB apart as token-major
// heads lie) changed nothing measurable on 2 threads (causal (1, 1024,
// 1024) x 16 heads, BM_MultiHeadTwoThreads, alternated on a Zen 5).
#include "ops/multihead_tiles.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>

#include "base/parallel.h"
#include "base/workspace.h"
#include "kernels/attention_tile.h"
#include "ops/dot_product_paths.h"
#include "ops/tile_key_blocks.h"

namespace attnscore::ops {
namespace {

using dot_product::kTileKeyBlock;

// Keys per packing task: 256 keys of Dv = 64 floats, 64 KiB.
constexpr int64_t kPackKeys = 256;

// One tile: queries [first, first + count) of entry b, query head h, its
// keys from `lo` on. Each row's starts and ends count from lo; a row the
// window leaves no key is [0, 0): scored and mixed as the lanes beside it,
// never written (FixUncoveredRows writes it).
struct HeadTile {
  static constexpr size_t kMax = 2 * kernels::kMaxQueryTileLanes;
  int64_t b = 0, h = 0, first = 0, count = 0, lo = 0;
  int32_t starts[kMax] = {}, ends[kMax] = {};
  const float* q_rows[kMax] = {};
  const float* weights[kMax] = {};
  float* out_rows[kMax] = {};
  alignas(64) float row_max[kMax];
  alignas(64) float inv_sum[kMax];
  size_t widths[2] = {};   // each half's last key, from lo
  uint32_t undefined = 0;  // bit r: row r has no softmax of its own
  bool Covered(int64_t r) const { return ends[r] > starts[r]; }
  // widths from the rows' ends, `lanes` rows a half (ScoreQueryTile's:
  // the second, where there is one, no narrower than the first).
  void SetWidths(int64_t lanes) {
    const int32_t* const first = ends;
    const int32_t* const first_half_end = first + std::min(count, lanes);
    widths[0] = static_cast<size_t>(*std::max_element(first, first_half_end));
    if (count > lanes) {
      const auto second = static_cast<size_t>(*std::max_element(first_half_end, first + count));
      widths[1] = std::max(widths[0], second);
    }
  }
  // The keys from lo that the tile's rows see together.
  int64_t Width() const { return static_cast<int64_t>(std::max(widths[0], widths[1])); }
};

class HeadTileRun {
 public:
  HeadTileRun(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
              const ConstTensor& v, const std::vector<int64_t>& ends,
              const std::vector<int64_t>& starts, bool cut, float scale, const Tensor& out,
              const Tensor& attention)
      : call_(call),
        q_(q),
        k_(k),
        v_(v),
        ends_(ends),
        starts_(starts),
        cut_(cut),
        scale_(scale),
        out_(out),
        attention_(attention) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t first = 0; first < queries_; first += tile_) {
        int64_t lo = 0, hi = 0;
        TileKeys(b, first, std::min(tile_, queries_ - first), &lo, &hi);
        width_ = std::max(width_, hi - lo);
        if (hi > lo) crosses_ = crosses_ || CrossesBlocks(lo, hi);
      }
    }
  }

  // Whether the tiles suit the call: every row's keys begin and end no
  // earlier than the row's before (so consecutive queries make tiles as
  // narrow as sorted ones), no row of length 0 (d2l's uniform rows are the
  // tile path's), int32 lanes. A tile whose keys cross a multiple of
  // kTileKeyBlock goes a key block at a time (RunKeyBlocks); without a
  // window, or with the weights asked for, such calls run a head at a time
  // (through the dot product's tile path, which blocks its keys alike, so
  // that the bits do not depend on the thread count; the gemm path gives
  // the weights).
  bool Suits() const {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < queries_; ++i) {
        const auto row = static_cast<size_t>(b * queries_ + i);
        if (ends_[row] == 0) return false;
        if (i > 0 && (ends_[row] < ends_[row - 1] || starts_[row] < starts_[row - 1])) return false;
      }
    }
    return keys_ < (int64_t{1} << 31) && !(crosses_ && (!cut_ || !attention_.empty()));
  }

  // K/V heads a group at a time, as many as fit the workspace's kept
  // buffer (at least one): each group's V packed, then its query heads'
  // tiles. (Packing every head at once into a buffer mapped for the call
  // cost 9% of causal prefill (1, 1024, 1024) x 16 heads in page clearing,
  // and made some 2-thread runs 4x slower.)
  Status Run() {
    const int64_t entries = batch_ * kv_heads_;
    const int64_t per_entry = keys_ * value_dim_;
    const int64_t kept = static_cast<int64_t>(internal::kKeptScratchBytes / sizeof(float));
    const int64_t group_entries = std::clamp<int64_t>(kept / per_entry, 1, entries);
    try {
      packed_v_ = call_.workspace.Floats(internal::ScratchSlot::kPackedKeys,
                                         static_cast<size_t>(group_entries * per_entry));
    } catch (const std::bad_alloc&) {
      return Status::Internal("out of memory for the packed values of the heads");
    }
    const double flops = 2.0 * static_cast<double>(batch_ * heads_ * queries_) *
                         static_cast<double>(width_ * (depth_ + value_dim_));
    const int threads = internal::ThreadsFor(call_.threads(), flops);
    const int64_t runs = dot_product::CeilDiv(keys_, kPackKeys);
    const int64_t tiles = dot_product::CeilDiv(queries_, tile_);
    for (first_entry_ = 0; first_entry_ < entries; first_entry_ += group_entries) {
      const int64_t count = std::min(group_entries, entries - first_entry_);
      ATTNSCORE_RETURN_IF_ERROR(internal::ForEachRowInParallel(
          call_.workspace, threads, count * runs, internal::ScratchSlot::kWorkspace, 0,
          [&](int64_t task, float*) { Pack(first_entry_ + task / runs, task % runs * kPackKeys); },
          [] {}));
      ATTNSCORE_RETURN_IF_ERROR(internal::ForEachRowInParallel(
          call_.workspace, threads, count * group_ * tiles, internal::ScratchSlot::kWorkspace,
          static_cast<size_t>(tile_ * (std::min(width_, kTileKeyBlock) + depth_ + value_dim_)),
          [&](int64_t task, float* buffer) {
            const int64_t entry = first_entry_ + task / (group_ * tiles);
            const int64_t h = entry % kv_heads_ * group_ + task / tiles % group_;
            RunTile(entry / kv_heads_, h, task % tiles, buffer);
          },
          [] {}, internal::Balance::kOneAtATime));
    }
    return Status::Ok();
  }

 private:
  // The keys [lo, hi) that the rows with keys among queries [first, first +
  // count) of entry b see; hi <= lo where none has a key.
  void TileKeys(int64_t b, int64_t first, int64_t count, int64_t* lo, int64_t* hi) const {
    *lo = std::numeric_limits<int64_t>::max(), *hi = 0;
    for (int64_t r = 0; r < count; ++r) {
      const auto row = static_cast<size_t>(b * queries_ + first + r);
      if (ends_[row] > starts_[row]) {
        *lo = std::min(*lo, starts_[row]), *hi = std::max(*hi, ends_[row]);
      }
    }
  }
  // K/V head `entry` (b · Hkv + g)'s packed V: its group's.
  float* PackedValues(int64_t entry) const {
    return packed_v_ + (entry - first_entry_) * keys_ * value_dim_;
  }
  // Keys [from, from + kPackKeys) of K/V head `entry`'s V into each panel's
  // slots: panel p holds columns [pP, pP + P_p) of every key, P_p floats a
  // key, from PackedValues + pP · M.
  void Pack(int64_t entry, int64_t from) const {
    const int64_t b = entry / kv_heads_, g = entry % kv_heads_;
    const auto panel = static_cast<int64_t>(panel_columns_);
    for (int64_t j = from; j < std::min(keys_, from + kPackKeys); ++j) {
      const float* row = v_.data + b * v_.strides[0] + j * v_.strides[1] + g * v_.strides[2];
      for (int64_t c = 0; c < value_dim_; c += panel) {
        const int64_t columns = std::min(panel, value_dim_ - c);
        dot_product::CopyRow(row + c * v_.strides[3], v_.strides[3],
                             PackedValues(entry) + c * keys_ + j * columns, 1, columns);
      }
    }
  }
  // Whether keys [lo, hi) span two key blocks or more.
  static bool CrossesBlocks(int64_t lo, int64_t hi) {
    return lo / kTileKeyBlock != (hi - 1) / kTileKeyBlock;
  }
  void RunTile(int64_t b, int64_t h, int64_t tile, float* buffer) {
    // Key j's 2L scores at j · 2L, from the tile's lo (or its key block's
    // first key), then the packed queries and a key block's output.
    float* const scores = buffer;
    float* const q_packed = scores + tile_ * std::min(width_, kTileKeyBlock);
    float* const block_out = q_packed + tile_ * depth_;
    HeadTile t;
    t.b = b, t.h = h;
    if (!Gather(tile, &t)) return;
    if (CrossesBlocks(t.lo, t.lo + t.Width())) {
      RunKeyBlocks(q_packed, scores, block_out, &t);
    } else {
      Score(q_packed, scores, &t);
      Mix(scores, &t);
    }
    Write(scores, t);
  }
  // The tile a key block at a time, each from a multiple of kTileKeyBlock
  // (tile_key_blocks.h): each block's rows as a tile of their own (their
  // keys there, counted from its first key), scored, its exps taken against
  // the max so far and mixed into block_out, then folded into the output.
  void RunKeyBlocks(float* q_packed, float* scores, float* block_out, HeadTile* t) const {
    kernels::PackQueries(static_cast<size_t>(t->count), t->q_rows, q_.strides[3],
                         static_cast<size_t>(depth_), q_packed);
    dot_product::RunningSoftmax running;
    running.Reset(t->count);
    HeadTile block = *t;
    for (int64_t r = 0; r < t->count; ++r) block.out_rows[r] = block_out + r * value_dim_;
    alignas(64) float block_max[HeadTile::kMax], sums[HeadTile::kMax];
    uint32_t covered = 0;
    for (int64_t r = 0; r < t->count; ++r) covered |= t->Covered(r) ? uint32_t{1} << r : 0;
    const int64_t hi = t->lo + t->Width();
    for (int64_t edge = t->lo / kTileKeyBlock * kTileKeyBlock; edge < hi; edge += kTileKeyBlock) {
      block.lo = std::max(t->lo, edge);
      const int64_t keys = std::min(hi, edge + kTileKeyBlock) - block.lo;
      uint32_t rows = 0;  // those with keys in the block
      for (int64_t r = 0; r < t->count; ++r) {
        const int64_t start = std::clamp<int64_t>(t->lo + t->starts[r] - block.lo, 0, keys);
        const int64_t end = std::clamp<int64_t>(t->lo + t->ends[r] - block.lo, 0, keys);
        const bool in = t->Covered(r) && end > start;
        block.starts[r] = static_cast<int32_t>(in ? start : 0);
        block.ends[r] = static_cast<int32_t>(in ? end : 0);
        rows |= in ? uint32_t{1} << r : 0;
      }
      if (rows == 0) continue;
      block.SetWidths(lanes_);
      kernels::ScoreQueryTile(q_packed, static_cast<size_t>(depth_), KeysFrom(block), k_.strides[1],
                              block.widths, scale_, block.starts, block.ends, block_max, scores);
      const float* const shift = running.Shift(block_max);
      for (int64_t half = 0; half < 2; ++half) {
        if (block.widths[half] == 0) continue;  // no key of the block in this half
        const int64_t lane = half * lanes_;
        t->undefined |= kernels::QueryTileExps(block.starts + lane, block.ends + lane, shift + lane,
                                               block.widths[half], static_cast<size_t>(tile_),
                                               scores + lane, block.inv_sum + lane, sums + lane)
                        << lane;
      }
      running.AddSums(rows, sums);
      // The block's sums unscaled: the output is scaled once, at the end.
      std::fill_n(block.inv_sum, HeadTile::kMax, 1.0f);
      block.undefined = t->undefined;
      Mix(scores, &block);
      running.Fold(rows, block.out_rows, value_dim_, t->out_rows);
    }
    t->undefined |= running.Finish(covered, value_dim_, t->out_rows);
  }
  // The tile's rows and keys; false where none of its rows has a key.
  bool Gather(int64_t tile, HeadTile* t) const {
    t->first = tile * tile_;
    t->count = std::min(tile_, queries_ - t->first);
    int64_t hi = 0;
    TileKeys(t->b, t->first, t->count, &t->lo, &hi);
    if (hi <= t->lo) return false;
    for (int64_t r = 0; r < t->count; ++r) {
      const int64_t i = t->first + r;
      const auto row = static_cast<size_t>(t->b * queries_ + i);
      if (ends_[row] > starts_[row]) {
        t->starts[r] = static_cast<int32_t>(starts_[row] - t->lo);
        t->ends[r] = static_cast<int32_t>(ends_[row] - t->lo);
      }
      t->q_rows[r] = q_.data + t->b * q_.strides[0] + i * q_.strides[1] + t->h * q_.strides[2];
      t->out_rows[r] =
          out_.data + t->b * out_.strides[0] + i * out_.strides[1] + t->h * out_.strides[2];
    }
    t->SetWidths(lanes_);
    return true;
  }
  int64_t Entry(const HeadTile& t) const { return t.b * kv_heads_ + t.h / group_; }
  // The tile's K rows from its first key, in place.
  const float* KeysFrom(const HeadTile& t) const {
    return k_.data + t.b * k_.strides[0] + t.lo * k_.strides[1] + t.h / group_ * k_.strides[2];
  }
  void Score(float* q_packed, float* scores, HeadTile* t) const {
    kernels::PackQueries(static_cast<size_t>(t->count), t->q_rows, q_.strides[3],
                         static_cast<size_t>(depth_), q_packed);
    // Without a window every row's keys begin at 0: the kernels' plain form.
    const int32_t* starts = cut_ ? t->starts : nullptr;
    kernels::ScoreQueryTile(q_packed, static_cast<size_t>(depth_), KeysFrom(*t), k_.strides[1],
                            t->widths, scale_, starts, t->ends, t->row_max, scores);
    for (int64_t half = 0; half * lanes_ < t->count; ++half) {
      const int64_t lane = half * lanes_;
      t->undefined |=
          kernels::QueryTileExps(starts ? starts + lane : nullptr, t->ends + lane,
                                 t->row_max + lane, t->widths[half], static_cast<size_t>(tile_),
                                 scores + lane, t->inv_sum + lane)
          << lane;
    }
  }
  // W V over `width` keys from the tile's key `from_key` for `rows` rows.
  uint32_t MixRows(const HeadTile& t, size_t rows, const float* const* weights,
                   const float* inv_sums, int64_t from_key, int64_t width,
                   float* const* out) const {
    return kernels::MixPackedTile(
        rows, kernels::TileWeights{weights, static_cast<size_t>(tile_), inv_sums},
        static_cast<size_t>(width), PackedValues(Entry(t)), static_cast<size_t>(keys_),
        static_cast<size_t>(t.lo + from_key), static_cast<size_t>(value_dim_), panel_columns_, out);
  }
  // Sub-tiles as even as MixTileRows() allows, each from its rows' first key
  // to their last. Where one takes rows of both halves, the first half's
  // weights past its own scores are made zeros.
  void Mix(float* scores, HeadTile* t) const {
    const int64_t sub_tiles = dot_product::CeilDiv(t->count, mix_rows_);
    for (int64_t s = 0, from = 0; s < sub_tiles; ++s) {
      const int64_t size = (t->count - from) / (sub_tiles - s);
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (int64_t r = from; r < from + size; ++r) {
        if (t->Covered(r)) {
          lo = std::min<int64_t>(lo, t->starts[r]), hi = std::max<int64_t>(hi, t->ends[r]);
        }
      }
      if (hi > lo) {
        if (from < lanes_ && from + size > lanes_) {
          for (auto j = static_cast<int64_t>(t->widths[0]); j < hi; ++j) {
            std::fill_n(scores + j * tile_, lanes_, 0.0f);
          }
        }
        for (int64_t r = from; r < from + size; ++r) t->weights[r] = scores + lo * tile_ + r;
        const uint32_t non_finite = MixRows(*t, static_cast<size_t>(size), t->weights + from,
                                            t->inv_sum + from, lo, hi - lo, t->out_rows + from);
        for (int64_t r = from; r < from + size; ++r) {
          // Its values past its own keys made it so: again over its own.
          const bool own_keys = t->starts[r] == lo && t->ends[r] == hi;
          if ((non_finite >> (r - from) & 1) != 0 && (t->undefined >> r & 1) == 0 &&
              t->Covered(r) && !own_keys) {
            const float* own = scores + int64_t{t->starts[r]} * tile_ + r;
            MixRows(*t, 1, &own, &t->inv_sum[r], t->starts[r], t->ends[r] - t->starts[r],
                    &t->out_rows[r]);
          }
        }
      }
      from += size;
    }
  }
  // NaN outputs of rows without a softmax, and the weights: each covered
  // row's over its own keys, exact zeros elsewhere; NaN over all M keys
  // where it has no softmax (docs/semantics.md section 1.4).
  void Write(const float* scores, const HeadTile& t) const {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t r = 0; r < t.count; ++r) {
      if (!t.Covered(r)) continue;
      const bool none = (t.undefined >> r & 1) != 0;
      if (none) std::fill(t.out_rows[r], t.out_rows[r] + value_dim_, nan);
      if (attention_.empty()) continue;
      float* w = attention_.data + t.b * attention_.strides[0] + t.h * attention_.strides[1] +
                 (t.first + r) * attention_.strides[2];
      const int64_t step = attention_.strides[3];
      if (none) {
        for (int64_t j = 0; j < keys_; ++j) w[j * step] = nan;
        continue;
      }
      const int64_t start = t.lo + t.starts[r], end = t.lo + t.ends[r];
      for (int64_t j = 0; j < start; ++j) w[j * step] = 0.0f;
      for (int64_t j = start; j < end; ++j)
        w[j * step] = scores[(j - t.lo) * tile_ + r] * t.inv_sum[r];
      for (int64_t j = end; j < keys_; ++j) w[j * step] = 0.0f;
    }
  }

  const internal::CallContext& call_;
  const ConstTensor &q_, &k_, &v_;
  const std::vector<int64_t>&ends_, &starts_;
  const bool cut_;
  const float scale_;
  const Tensor &out_, &attention_;
  const int64_t batch_ = q_.dims[0], queries_ = q_.dims[1], heads_ = q_.dims[2];
  const int64_t depth_ = q_.dims[3], keys_ = k_.dims[1], kv_heads_ = k_.dims[2];
  const int64_t value_dim_ = v_.dims[3], group_ = heads_ / kv_heads_;
  const int64_t lanes_ = static_cast<int64_t>(kernels::QueryTileLanes()), tile_ = 2 * lanes_;
  const int64_t mix_rows_ = static_cast<int64_t>(kernels::MixTileRows());
  const size_t panel_columns_ = kernels::ValuePanelColumns();
  int64_t width_ = 0;     // the widest tile's keys
  bool crosses_ = false;  // whether a tile's keys span two key blocks or more
  float* packed_v_ = nullptr;
  int64_t first_entry_ = 0;  // the packed group's first K/V head
};

}  // namespace

bool MultiHeadTiles(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                    const ConstTensor& v, const std::vector<int64_t>& ends,
                    const std::vector<int64_t>& starts, bool cut, const ScoreForm& form,
                    const Tensor& out, const Tensor& attention, Status* status) {
  if (call.options.precision != Precision::kFp32 || !form.ScaleOnly() || q.dims[3] == 0 ||
      k.dims[1] == 0 || k.strides[3] != 1 || out.strides[3] != 1) {
    return false;
  }
  HeadTileRun run(call, q, k, v, ends, starts, cut, form.scale, out, attention);
  if (!run.Suits()) return false;
  *status = run.Run();
  return true;
}

}  // namespace attnscore::ops
