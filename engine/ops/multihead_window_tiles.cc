// The windowed prefill through the tile kernels: see multihead_window.h.
//
// A tile is 2L consecutive queries (L = kernels::QueryTileLanes()), one to
// a vector lane, taken in the caller's order: a window's rows begin and end
// a key further per query, so a tile's keys are its rows' windows and 2L - 1
// more, not the block's 128. It scores from the first key any of its rows
// sees, each lane masked to its own [start, end) in the scores' max and the
// exps; then W V in sub-tiles of MixTileRows() rows, each from its own rows'
// first key to their last. A row's weights outside its window are exact
// zeros, which add nothing to a finite sum; a row whose mix read a NaN or
// an Inf there is mixed again over its own keys alone.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "base/parallel.h"
#include "kernels/attention_tile.h"
#include "ops/dot_product_paths.h"
#include "ops/multihead_window.h"

namespace attnscore::ops {
namespace {

// One tile: queries [first, first + count) of an entry, its keys from `lo`
// on. Each row's starts and ends count from lo; a row the window paths
// leave to FixUncoveredRows (length 0, or no key) is [0, 0): scored and
// mixed as the lanes beside it, never written.
struct WindowTile {
  static constexpr size_t kMax = 2 * kernels::kMaxQueryTileLanes;
  int64_t first = 0, count = 0, lo = 0;
  int32_t starts[kMax] = {}, ends[kMax] = {};
  const float* q_rows[kMax] = {};
  const float* weights[kMax] = {};
  float* out_rows[kMax] = {};
  alignas(64) float row_max[kMax];
  alignas(64) float inv_sum[kMax];
  size_t widths[2] = {};   // each half's last key, from lo
  uint32_t undefined = 0;  // bit r: row r has no softmax of its own
  bool Covered(int64_t r) const { return ends[r] > starts[r]; }
};

// The keys [lo, hi) that the rows with keys among queries [first, first +
// count) of entry b see; hi <= lo where none has a key.
void TileKeys(const std::vector<int64_t>& ends, const std::vector<int64_t>& starts, int64_t queries,
              int64_t b, int64_t first, int64_t count, int64_t* lo, int64_t* hi) {
  *lo = std::numeric_limits<int64_t>::max(), *hi = 0;
  for (int64_t r = 0; r < count; ++r) {
    const auto row = static_cast<size_t>(b * queries + first + r);
    if (ends[row] > starts[row]) *lo = std::min(*lo, starts[row]), *hi = std::max(*hi, ends[row]);
  }
}

class WindowTileRun {
 public:
  WindowTileRun(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const std::vector<int64_t>& ends,
                const std::vector<int64_t>& starts, float scale, const Tensor& out,
                const Tensor& attention)
      : call_(call),
        q_(q),
        k_(k),
        v_(v),
        ends_(ends),
        starts_(starts),
        scale_(scale),
        out_(out),
        attention_(attention) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t first = 0; first < queries_; first += tile_) {
        int64_t lo = 0, hi = 0;
        TileKeys(ends_, starts_, queries_, b, first, std::min(tile_, queries_ - first), &lo, &hi);
        width_ = std::max(width_, hi - lo);
      }
    }
  }

  // Whether a thread's scores for the widest tile fit the tile path's kept
  // scratch, and the keys its int32 lanes count.
  bool Fits() const {
    return keys_ < (int64_t{1} << 31) && width_ <= dot_product::kTilePathMaxPackedFloats / tile_;
  }

  Status Run() {
    const int64_t tiles = dot_product::CeilDiv(queries_, tile_);
    const double flops =
        2.0 * static_cast<double>(batch_ * queries_ * width_ * (depth_ + value_dim_));
    const auto scratch = static_cast<size_t>(tile_ * (width_ + depth_));
    return internal::ForEachRowInParallel(
        call_.workspace, internal::ThreadsFor(call_.threads(), flops), batch_ * tiles,
        internal::ScratchSlot::kWorkspace, scratch,
        [&](int64_t task, float* buffer) { RunTile(task / tiles, task % tiles, buffer); }, [] {});
  }

 private:
  void RunTile(int64_t b, int64_t tile, float* buffer) {
    float* const scores = buffer;  // key j's 2L scores at j · 2L, from the tile's lo
    float* const q_packed = scores + tile_ * width_;
    WindowTile t;
    if (!Gather(b, tile, &t)) return;
    Score(b, q_packed, scores, &t);
    Mix(b, scores, &t);
    Write(b, scores, t);
  }
  // The tile's rows and keys; false where none of its rows has a key.
  bool Gather(int64_t b, int64_t tile, WindowTile* t) const {
    t->first = tile * tile_;
    t->count = std::min(tile_, queries_ - t->first);
    int64_t hi = 0;
    TileKeys(ends_, starts_, queries_, b, t->first, t->count, &t->lo, &hi);
    if (hi <= t->lo) return false;
    for (int64_t r = 0; r < t->count; ++r) {
      const int64_t i = t->first + r;
      const auto row = static_cast<size_t>(b * queries_ + i);
      if (ends_[row] > starts_[row]) {
        t->starts[r] = static_cast<int32_t>(starts_[row] - t->lo);
        t->ends[r] = static_cast<int32_t>(ends_[row] - t->lo);
      }
      t->q_rows[r] = q_.data + b * q_.strides[0] + i * q_.strides[1];
      t->out_rows[r] = out_.data + b * out_.strides[0] + i * out_.strides[1];
    }
    const int32_t* const first_half_end = t->ends + std::min(t->count, lanes_);
    t->widths[0] = static_cast<size_t>(
        *std::max_element(static_cast<const int32_t*>(t->ends), first_half_end));
    if (t->count > lanes_) {
      t->widths[1] = std::max(
          t->widths[0], static_cast<size_t>(*std::max_element(
                            first_half_end, static_cast<const int32_t*>(t->ends) + t->count)));
    }
    return true;
  }
  void Score(int64_t b, float* q_packed, float* scores, WindowTile* t) const {
    kernels::PackQueries(static_cast<size_t>(t->count), t->q_rows, q_.strides[2],
                         static_cast<size_t>(depth_), q_packed);
    kernels::ScoreQueryTile(q_packed, static_cast<size_t>(depth_),
                            k_.data + b * k_.strides[0] + t->lo * k_.strides[1], k_.strides[1],
                            t->widths, scale_, t->starts, t->ends, t->row_max, scores);
    for (int64_t half = 0; half * lanes_ < t->count; ++half) {
      const int64_t lane = half * lanes_;
      t->undefined |= kernels::QueryTileExps(t->starts + lane, t->ends + lane, t->row_max + lane,
                                             t->widths[half], static_cast<size_t>(tile_),
                                             scores + lane, t->inv_sum + lane)
                      << lane;
    }
  }
  // W V over `width` keys from the tile's key `from_key` for `rows` rows.
  uint32_t MixRows(int64_t b, const WindowTile& t, size_t rows, const float* const* weights,
                   const float* inv_sums, int64_t from_key, int64_t width,
                   float* const* out) const {
    const float* values = v_.data + b * v_.strides[0] + (t.lo + from_key) * v_.strides[1];
    return kernels::MixTile(
        rows, kernels::TileWeights{weights, static_cast<size_t>(tile_), inv_sums},
        static_cast<size_t>(width), values, v_.strides[1], static_cast<size_t>(value_dim_), out);
  }
  // Sub-tiles as even as MixTileRows() allows, each from its rows' first key
  // to their last. Where one takes rows of both halves, the first half's
  // weights past its own scores are made zeros.
  void Mix(int64_t b, float* scores, WindowTile* t) const {
    const int64_t sub_tiles = dot_product::CeilDiv(t->count, mix_rows_);
    for (int64_t s = 0, from = 0; s < sub_tiles; ++s) {
      const int64_t size = (t->count - from) / (sub_tiles - s);
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
      for (int64_t r = from; r < from + size; ++r) {
        if (t->Covered(r))
          lo = std::min<int64_t>(lo, t->starts[r]), hi = std::max<int64_t>(hi, t->ends[r]);
      }
      if (hi > lo) {
        if (from < lanes_ && from + size > lanes_) {
          for (auto j = static_cast<int64_t>(t->widths[0]); j < hi; ++j) {
            std::fill_n(scores + j * tile_, lanes_, 0.0f);
          }
        }
        for (int64_t r = from; r < from + size; ++r) t->weights[r] = scores + lo * tile_ + r;
        const uint32_t non_finite = MixRows(b, *t, static_cast<size_t>(size), t->weights + from,
                                            t->inv_sum + from, lo, hi - lo, t->out_rows + from);
        for (int64_t r = from; r < from + size; ++r) {
          // Its values past its own keys made it so: again over its own.
          const bool own_keys = t->starts[r] == lo && t->ends[r] == hi;
          if ((non_finite >> (r - from) & 1) != 0 && (t->undefined >> r & 1) == 0 &&
              t->Covered(r) && !own_keys) {
            const float* own = scores + int64_t{t->starts[r]} * tile_ + r;
            MixRows(b, *t, 1, &own, &t->inv_sum[r], t->starts[r], t->ends[r] - t->starts[r],
                    &t->out_rows[r]);
          }
        }
      }
      from += size;
    }
  }
  // NaN outputs of rows without a softmax, and the weights: each covered
  // row's over its own keys, exact zeros elsewhere.
  void Write(int64_t b, const float* scores, const WindowTile& t) const {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t r = 0; r < t.count; ++r) {
      if (!t.Covered(r)) continue;
      const bool none = (t.undefined >> r & 1) != 0;
      if (none) std::fill(t.out_rows[r], t.out_rows[r] + value_dim_, nan);
      if (attention_.empty()) continue;
      float* w =
          attention_.data + b * attention_.strides[0] + (t.first + r) * attention_.strides[1];
      const int64_t step = attention_.strides[2];
      const int64_t start = t.lo + t.starts[r], end = t.lo + t.ends[r];
      for (int64_t j = 0; j < start; ++j) w[j * step] = 0.0f;
      for (int64_t j = start; j < end; ++j) {
        w[j * step] = none ? nan : scores[(j - t.lo) * tile_ + r] * t.inv_sum[r];
      }
      for (int64_t j = end; j < keys_; ++j) w[j * step] = 0.0f;
    }
  }

  const internal::CallContext& call_;
  const ConstTensor &q_, &k_, &v_;
  const std::vector<int64_t>&ends_, &starts_;
  const float scale_;
  const Tensor &out_, &attention_;
  const int64_t batch_ = q_.dims[0], queries_ = q_.dims[1], depth_ = q_.dims[2];
  const int64_t keys_ = k_.dims[1], value_dim_ = v_.dims[2];
  const int64_t lanes_ = static_cast<int64_t>(kernels::QueryTileLanes()), tile_ = 2 * lanes_;
  const int64_t mix_rows_ = static_cast<int64_t>(kernels::MixTileRows());
  int64_t width_ = 0;  // the widest tile's keys
};

}  // namespace

bool WindowTiles(const internal::CallContext& call, const ConstTensor& q, const ConstTensor& k,
                 const ConstTensor& v, const std::vector<int64_t>& ends,
                 const std::vector<int64_t>& starts, const ScoreForm& form, const Tensor& out,
                 const Tensor& attention, Status* status) {
  if (call.options.precision != Precision::kFp32 || !form.ScaleOnly() || q.dims[2] == 0 ||
      q.strides[2] != 1 || k.strides[2] != 1 || v.strides[2] != 1 || out.strides[2] != 1) {
    return false;
  }
  WindowTileRun run(call, q, k, v, ends, starts, form.scale, out, attention);
  if (!run.Fits()) return false;
  *status = run.Run();
  return true;
}

}  // namespace attnscore::ops
