// The dot product's tile path: see dot_product_paths.h.
//
// Each entry's queries are taken shortest first, kernels::kTileRows at a
// time but for its first tile, which takes the rows left over (N mod
// kTileRows, or a whole tile): a tile of fewer rows keeps fewer sums in
// flight than the FMA's latency wants, so it gets the shortest rows, where
// it costs least (with the leftover rows last, the longest, (4, 128, 128)
// with per-query lengths took 1.02x the time, alternated on a Zen 3). A
// tile scores its rows over its own longest length (rounded up to a vector
// of keys), softmaxes each row over its own length, and mixes V over that
// same width (all M keys if a row has L = 0), all while the tile's scores
// stay in cache. A row's scores and weights are its own alone; its output
// sums V over the tile's width, the keys past its own length weighing
// exactly 0, which leaves its value as if the sum had stopped at its own
// length (its bits too, but for the sign of a zero). A NaN or Inf in those
// values would not: such a row is mixed again over its own keys.
// K is packed per entry for the scores; V is read in place, or packed in
// panels of columns where that pays or its columns are strided (PacksValues).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "base/parallel.h"
#include "base/scratch.h"
#include "kernels/attention_tile.h"
#include "kernels/masked_softmax.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops::dot_product {
namespace {

constexpr auto kTileRows = static_cast<int64_t>(kernels::kTileRows);

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

// The floats of an entry's packed K (M < 2^31, as UseTilePath requires).
int64_t EntryKeysFloats(const ConstTensor& q, const ConstTensor& k) {
  return SaturatedProduct(
      static_cast<int64_t>(kernels::PaddedTileKeys(static_cast<size_t>(k.dims[1]))), q.dims[2]);
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

// The floats of the packed K (and, where PacksValues, of the packed V) for
// every entry of a call.
int64_t PackedFloats(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v) {
  const int64_t values = PacksValues(q, k, v) ? v.dims[1] * v.dims[2] : 0;
  return SaturatedProduct(q.dims[0], SaturatedSum(EntryKeysFloats(q, k), values));
}

}  // namespace

bool EvenEntryRanges(const internal::RowLengths& lens, int64_t batch, int threads,
                     std::vector<int64_t>* bounds) {
  const int64_t queries = lens.queries(), keys = lens.keys();
  if (threads < 2 || batch < threads) return false;
  thread_local std::vector<double> before;  // before[b]: the work of entries [0, b)
  before.assign(static_cast<size_t>(batch + 1), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    double work = 0;
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t length = lens.row(b, i);
      work += static_cast<double>(length == 0 ? keys : length);
    }
    before[static_cast<size_t>(b + 1)] = before[static_cast<size_t>(b)] + work;
  }
  const double share = before.back() / threads;
  std::vector<int64_t>& cut = *bounds;  // cut[t]: range t's first entry
  cut.assign(static_cast<size_t>(threads + 1), batch);
  cut[0] = 0;
  for (size_t t = 1; t < cut.size() - 1; ++t) {
    // The entry boundary nearest t shares of the work, leaving at least one
    // entry to each range before and after it.
    const double target = static_cast<double>(t) * share;
    const auto off = [&](int64_t e) { return std::abs(before[static_cast<size_t>(e)] - target); };
    const int64_t highest = batch - static_cast<int64_t>(cut.size() - 1 - t);
    cut[t] = cut[t - 1] + 1;
    for (int64_t e = cut[t] + 1; e <= highest; ++e) {
      if (off(e) < off(cut[t])) cut[t] = e;
    }
  }
  for (size_t t = 0; t + 1 < cut.size(); ++t) {
    const double work =
        before[static_cast<size_t>(cut[t + 1])] - before[static_cast<size_t>(cut[t])];
    if (work > (1.0 + kEntryRangeSlack) * share) return false;
  }
  return true;
}

bool UseTilePath(const EngineOptions& options, const ConstTensor& q, const ConstTensor& k,
                 const ConstTensor& v) {
  // Lengths and query indices share one 64-bit sort key (OrderByLength).
  return options.precision == Precision::kFp32 && k.dims[1] > 0 && q.dims[2] > 0 &&
         k.dims[1] < (int64_t{1} << 31) && q.dims[1] < (int64_t{1} << 32) &&
         PackedFloats(q, k, v) <= kTilePathMaxPackedFloats;
}

Status TilePath(const EngineOptions& options, const ConstTensor& q, const ConstTensor& k,
                const ConstTensor& v, const internal::RowLengths& lens, float scale,
                const Tensor& out, const Tensor& attention_weights) {
  const int64_t batch = q.dims[0], queries = q.dims[1], depth = q.dims[2], keys = k.dims[1],
                value_dim = v.dims[2];
  const bool want_weights = !attention_weights.empty();
  // Rows that a kernel cannot read or write in place go through the tile's
  // scratch: Q rows gathered, out and weight rows scattered after.
  const bool gather_q = q.strides[2] != 1, scatter_out = out.strides[2] != 1,
             scatter_weights = want_weights && attention_weights.strides[2] != 1;
  const bool pack_values = PacksValues(q, k, v);
  const size_t panel_columns = kernels::ValuePanelColumns();
  // order[b * queries + r]: the query of entry b that goes r-th (OrderByLength).
  thread_local std::vector<int64_t> order;
  const auto rows = static_cast<size_t>(batch * queries);
  const int64_t entry_keys = EntryKeysFloats(q, k);
  thread_local std::unique_ptr<std::atomic<int>[]> pack_states;
  thread_local int64_t pack_states_size = 0;
  float* packed = nullptr;
  try {
    if (order.size() < rows) order.resize(rows);
    if (pack_states_size < batch) {
      pack_states = std::make_unique<std::atomic<int>[]>(static_cast<size_t>(batch));
      pack_states_size = batch;
    }
    packed = internal::ThreadScratch(internal::ScratchSlot::kPackedKeys,
                                     static_cast<size_t>(PackedFloats(q, k, v)));
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory for the tile path's packed keys and values");
  }
  float* const packed_values = packed + batch * entry_keys;  // M · Dv an entry, if pack_values
  std::atomic<int>* const pack_state = pack_states.get();    // the caller's, like `order`
  // The workers use the order through this: `order` is the caller's.
  int64_t* const sorted = order.data();

  double flops = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const internal::EntryWidths& widths = lens.entry(b);
    flops += 2.0 * static_cast<double>(queries * (widths.longest * depth + widths.mix * value_dim));
  }
  const int threads = internal::ThreadsFor(options.threads, flops);
  // Each entry's queries sorted, its K rows below its longest length packed
  // (and its V rows below its mix width, where pack_values; rows past them
  // are never read) by the first tile of it a thread takes, while the other
  // tiles of the entry wait. The first tile of every entry goes first, so
  // that threads prepare different entries at once rather than wait for
  // one another.
  for (int64_t b = 0; b < batch; ++b) pack_state[b].store(kUnpacked, std::memory_order_relaxed);
  const auto pack = [&](int64_t b) {
    std::atomic<int>& state = pack_state[b];
    int expected = kUnpacked;
    if (state.load(std::memory_order_acquire) == kPacked) return;
    if (state.compare_exchange_strong(expected, kPacking, std::memory_order_acquire)) {
      OrderByLength(lens, b, sorted + b * queries);
      kernels::PackKeys(k.data + b * k.strides[0], k.strides[1], k.strides[2],
                        static_cast<size_t>(lens.entry(b).longest), static_cast<size_t>(depth),
                        packed + b * entry_keys);
      if (pack_values) {
        kernels::PackValues(v.data + b * v.strides[0], v.strides[1], v.strides[2],
                            static_cast<size_t>(lens.entry(b).mix), static_cast<size_t>(value_dim),
                            panel_columns, packed_values + b * keys * value_dim);
      }
      state.store(kPacked, std::memory_order_release);
      return;
    }
    // Another thread is packing it (a thread that could not get its
    // scratch takes no tile, so never claims an entry).
    while (state.load(std::memory_order_acquire) != kPacked) std::this_thread::yield();
  };
  // W V over `width` keys for `tile_rows` rows of entry b: the kernels' flags.
  const auto mix = [&](int64_t b, size_t tile_rows, const float* const* weights, int64_t width,
                       float* const* out_rows) {
    if (pack_values) {
      return kernels::MixPackedTile(tile_rows, weights, static_cast<size_t>(width),
                                    packed_values + b * keys * value_dim,
                                    static_cast<size_t>(lens.entry(b).mix),
                                    static_cast<size_t>(value_dim), panel_columns, out_rows);
    }
    return kernels::MixTile(tile_rows, weights, static_cast<size_t>(width),
                            v.data + b * v.strides[0], v.strides[1], static_cast<size_t>(value_dim),
                            out_rows);
  };

  // Each tile's scratch: per row, its scores (then its weights), and where
  // needed its gathered query and its output.
  const int64_t score_row =
      static_cast<int64_t>(kernels::PaddedTileKeys(static_cast<size_t>(keys)));
  const int64_t q_floats = gather_q ? kTileRows * depth : 0;
  const int64_t out_floats = scatter_out ? kTileRows * value_dim : 0;
  const int64_t tiles_per_entry = CeilDiv(queries, kTileRows);
  // Tile `tile` of entry b: its rows, scores, weights and output.
  const auto run_tile = [&](int64_t b, int64_t tile, float* scratch) {
    const int64_t head = queries - (tiles_per_entry - 1) * kTileRows;  // in [1, kTileRows]
    const int64_t first = tile == 0 ? 0 : head + (tile - 1) * kTileRows;
    const int64_t count = tile == 0 ? head : kTileRows;
    pack(b);
    float* const q_scratch = scratch + kTileRows * score_row;
    float* const out_scratch = q_scratch + q_floats;
    int64_t query[kTileRows] = {}, valid[kTileRows] = {};
    const float* q_rows[kTileRows] = {};
    float* scores[kTileRows] = {};
    const float* weights[kTileRows] = {};
    float* out_rows[kTileRows] = {};
    for (int64_t r = 0; r < count; ++r) {
      const int64_t i = query[r] = sorted[b * queries + first + r];
      valid[r] = lens.row(b, i);
      q_rows[r] = q.data + b * q.strides[0] + i * q.strides[1];
      if (gather_q) {
        CopyRow(q_rows[r], q.strides[2], q_scratch + r * depth, 1, depth);
        q_rows[r] = q_scratch + r * depth;
      }
      scores[r] = scratch + r * score_row;
      out_rows[r] = scatter_out ? out_scratch + r * value_dim
                                : out.data + b * out.strides[0] + i * out.strides[1];
    }
    // Rows rise in length: the last is the longest. A query of length 0
    // weighs all M keys equally, as the reference does.
    const int64_t longest = valid[count - 1];
    const int64_t mix_width = valid[0] == 0 ? keys : longest;
    if (longest > 0) {
      kernels::ScoreTile(static_cast<size_t>(count), q_rows, static_cast<size_t>(depth),
                         packed + b * entry_keys, static_cast<size_t>(longest), scale, scores);
    }
    for (int64_t r = 0; r < count; ++r) {
      // The weights go straight to the caller's row where it is dense,
      // else to the scores' row (M wide) and are copied out.
      float* y = scores[r];
      int64_t width = mix_width;
      float* weights_row = nullptr;
      if (want_weights) {
        weights_row = attention_weights.data + b * attention_weights.strides[0] +
                      query[r] * attention_weights.strides[1];
        if (!scatter_weights) y = weights_row;
        width = keys;
      }
      kernels::MaskedSoftmaxRow(scores[r], static_cast<size_t>(valid[r]),
                                static_cast<size_t>(width), y);
      if (scatter_weights) CopyRow(y, 1, weights_row, attention_weights.strides[2], keys);
      weights[r] = y;
    }
    const uint32_t non_finite = mix(b, static_cast<size_t>(count), weights, mix_width, out_rows);
    for (int64_t r = 0; r < count; ++r) {
      if ((non_finite >> r & 1) != 0 && valid[r] > 0 && valid[r] < mix_width) {
        mix(b, 1, &weights[r], valid[r], &out_rows[r]);
      }
      if (scatter_out) {
        CopyRow(out_rows[r], 1, out.data + b * out.strides[0] + query[r] * out.strides[1],
                out.strides[2], value_dim);
      }
    }
  };
  const size_t scratch_floats = static_cast<size_t>(kTileRows * score_row + q_floats + out_floats);
  // Where whole entries share out evenly, each thread takes its own range of
  // them, tile after tile: it packs and reads only its entries' K and V,
  // which stay in its core's caches (encoder (4, 128, 128), per-query
  // lengths, on 2 threads: 1.85x of 1 thread in three runs, against
  // 1.52-1.73x with the tiles dealt out, BM_DotProductTwoThreads on a Zen 5).
  thread_local std::vector<int64_t> bounds;
  if (EvenEntryRanges(lens, batch, threads, &bounds)) {
    const int64_t* const range_bounds = bounds.data();  // the caller's, as `sorted`
    return internal::ForEachRowInParallel(
        threads, threads, internal::ScratchSlot::kWorkspace, scratch_floats,
        [&](int64_t task, float* scratch) {
          for (int64_t b = range_bounds[task]; b < range_bounds[task + 1]; ++b) {
            for (int64_t tile = 0; tile < tiles_per_entry; ++tile) run_tile(b, tile, scratch);
          }
        },
        [] {}, internal::Balance::kStatic);
  }
  // Else tiles go to threads as they come free. Tasks [0, batch): each
  // entry's first tile; then the others, entry by entry.
  return internal::ForEachRowInParallel(
      threads, batch * tiles_per_entry, internal::ScratchSlot::kWorkspace, scratch_floats,
      [&](int64_t task, float* scratch) {
        const int64_t later = task - batch;
        const int64_t b = later < 0 ? task : later / (tiles_per_entry - 1);
        const int64_t tile = later < 0 ? 0 : 1 + later % (tiles_per_entry - 1);
        run_tile(b, tile, scratch);
      },
      [] {}, internal::Balance::kDynamic);
}

}  // namespace attnscore::ops::dot_product
