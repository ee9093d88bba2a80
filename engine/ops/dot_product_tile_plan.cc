// The tile path's plan: whether it runs a call, what it copies and packs,
// and how threads share whole entries. See dot_product_tile_plan.h.
#include "ops/dot_product_tile_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention_tile.h"
#include "ops/dot_product_paths.h"
#include "ops/tile_key_blocks.h"

namespace attnscore::ops::dot_product {
namespace {

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

// What the copied K and packed V of a call may take: a thread's kept
// scratch, or past kTileKeyBlock keys kTilePathMaxLongPackedFloats, where
// V is packed whenever it fits.
int64_t PackedFloatsCap(const ConstTensor& k) {
  return k.dims[1] > kTileKeyBlock ? kTilePathMaxLongPackedFloats : kTilePathMaxPackedFloats;
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

}  // namespace

int64_t CopiedKeysFloats(const ConstTensor& q, const ConstTensor& k) {
  return k.strides[2] == 1 ? 0 : EntryKeysFloats(q, k);
}

int64_t TileScoresFloats(const ConstTensor& k) {
  return 2 * static_cast<int64_t>(kernels::QueryTileLanes()) * std::min(k.dims[1], kTileKeyBlock);
}

bool PacksValues(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v) {
  if (v.strides[2] != 1) return true;
  // V's M · Dv never overflows: CheckTensor counted its elements.
  const int64_t values = v.dims[1] * v.dims[2];
  const bool pays = v.strides[1] != v.dims[2] || values > kInPlaceValuesMaxFloats;
  const int64_t keys = k.dims[1] > kTileKeyBlock ? CopiedKeysFloats(q, k) : EntryKeysFloats(q, k);
  return pays && SaturatedProduct(q.dims[0], SaturatedSum(keys, values)) <= PackedFloatsCap(k);
}

int64_t PackedFloats(const ConstTensor& q, const ConstTensor& k, const ConstTensor& v) {
  const int64_t values = PacksValues(q, k, v) ? v.dims[1] * v.dims[2] : 0;
  return SaturatedProduct(q.dims[0], SaturatedSum(CopiedKeysFloats(q, k), values));
}

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
                 const ConstTensor& v, bool weights) {
  // Lengths and query indices share one 64-bit sort key (OrderByLength);
  // lengths are int32 in the kernels.
  const int64_t values = PacksValues(q, k, v) ? v.dims[1] * v.dims[2] : 0;
  // Up to kTileKeyBlock keys, K in cache with V where packed; past it, K's
  // copy (where strided) with V's, which must be packed: read in place, V
  // mixed at half the speed (kInPlaceValuesMaxFloats).
  const bool long_keys = k.dims[1] > kTileKeyBlock;
  const int64_t keys = long_keys ? CopiedKeysFloats(q, k) : EntryKeysFloats(q, k);
  return call.options.precision == Precision::kFp32 && k.dims[1] > 0 && q.dims[2] > 0 &&
         k.dims[1] < (int64_t{1} << 31) && q.dims[1] < (int64_t{1} << 32) &&
         (!long_keys || (!weights && values > 0)) &&
         SaturatedProduct(q.dims[0], SaturatedSum(keys, values)) <= PackedFloatsCap(k);
}

}  // namespace attnscore::ops::dot_product
