// Per-target bodies of the attention tile kernels (attention_tile.h); included
// once per Highway target by attention_tile.cc through foreach_target.h.
#if defined(ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_
#undef ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_
#else
#define ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/attention_tile.h"
#include "kernels/fast_exp-inl.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

static_assert(hn::MaxLanes(hn::ScalableTag<float>()) <= kernels::kMaxQueryTileLanes,
              "a half tile's queries must fit the op's arrays");

// Rows per MixTile (attention_tile.h): kMixRows rows by two vectors of
// columns are 2 · kMixRows sums, which with two loads and a broadcast fit
// the registers: 8 rows in AVX-512's 32, 6 in the others' 16. More rows a
// tile, fewer times each V row is read, but alone in L1 (Dv 64, 100 keys,
// a loop over MixTile on a Zen 5) 6 and 8 rows ran at 92-93% of the FMA
// peak, 10 to 12 at 87%, 5 at 82%. In the op, a tile of 32 queries mixed as
// 4 sub-tiles of 8 made (1, 1024, 4096) about 5% faster than as 3 of 10 or
// 11 or as 5 of 6 or 7, and (4, 128, 128) per-query as fast as 6 of 5 or 6.
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kMixRows = 8;
#else
constexpr size_t kMixRows = 6;
#endif
static_assert(kMixRows <= kernels::kMaxMixTileRows, "the op's arrays hold a mix tile");

size_t MixTileRows() { return kMixRows; }

// f(std::integral_constant<size_t, rows>()) for `rows` in [kRows, kMixRows]:
// the kernels' loops over rows unrolled for each count.
template <size_t kRows = 1, class F>
HWY_INLINE auto WithRowCount(size_t rows, F f) {
  if constexpr (kRows < kMixRows) {
    if (rows != kRows) return WithRowCount<kRows + 1>(rows, f);
  }
  return f(std::integral_constant<size_t, kRows>());
}

size_t QueryTileLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

// Packs a query tile (attention_tile.h). Where Q's columns are contiguous,
// four rows by four features at a time: a 4x4 transpose in 128-bit
// vectors, each feature's four queries stored at once.
void PackQueries(size_t rows, const float* const* HWY_RESTRICT q, int64_t q_column_stride,
                 size_t depth, float* HWY_RESTRICT packed) {
  const size_t tile = 2 * QueryTileLanes();
  HWY_DASSERT(rows <= tile);
  size_t r = 0;
#if HWY_TARGET != HWY_SCALAR
  const hn::Full128<float> d4;
  const hn::Repartition<double, decltype(d4)> d2;
  for (; q_column_stride == 1 && r + 4 <= rows; r += 4) {
    const float *r0 = q[r], *r1 = q[r + 1], *r2 = q[r + 2], *r3 = q[r + 3];
    size_t f = 0;
    for (; f + 4 <= depth; f += 4) {
      const auto x0 = hn::LoadU(d4, r0 + f), x1 = hn::LoadU(d4, r1 + f);
      const auto x2 = hn::LoadU(d4, r2 + f), x3 = hn::LoadU(d4, r3 + f);
      // Pairs of rows per feature: (x0 x1) and (x2 x3) of features f, f+1
      // in `low`, of f+2, f+3 in `high`; then their 64-bit halves paired.
      const auto low01 = hn::BitCast(d2, hn::InterleaveLower(d4, x0, x1));
      const auto low23 = hn::BitCast(d2, hn::InterleaveLower(d4, x2, x3));
      const auto high01 = hn::BitCast(d2, hn::InterleaveUpper(d4, x0, x1));
      const auto high23 = hn::BitCast(d2, hn::InterleaveUpper(d4, x2, x3));
      float* at = packed + f * tile + r;
      hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, low01, low23)), d4, at);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, low01, low23)), d4, at + tile);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, high01, high23)), d4, at + 2 * tile);
      hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, high01, high23)), d4, at + 3 * tile);
    }
    for (; f < depth; ++f) {
      float* at = packed + f * tile + r;
      at[0] = r0[f], at[1] = r1[f], at[2] = r2[f], at[3] = r3[f];
    }
  }
#endif
  for (; r < rows; ++r) {
    for (size_t f = 0; f < depth; ++f) {
      packed[f * tile + r] = q[r][static_cast<int64_t>(f) * q_column_stride];
    }
  }
  for (; r < tile; ++r) {
    for (size_t f = 0; f < depth; ++f) packed[f * tile + r] = 0.0f;
  }
}

// Packs V (attention_tile.h) key by key: each row read once, front to
// back, its columns a vector at a time into their panels' next slots.
void PackValues(const float* HWY_RESTRICT v, int64_t v_row_stride, int64_t v_column_stride,
                size_t keys, size_t value_dim, size_t panel_columns, float* HWY_RESTRICT packed) {
  HWY_DASSERT(panel_columns > 0);
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (size_t j = 0; j < keys; ++j) {
    const float* row = v + static_cast<int64_t>(j) * v_row_stride;
    for (size_t first = 0; first < value_dim; first += panel_columns) {
      const size_t columns = value_dim - first < panel_columns ? value_dim - first : panel_columns;
      const float* from = row + static_cast<int64_t>(first) * v_column_stride;
      float* to = packed + first * keys + j * columns;
      if (v_column_stride != 1) {
        for (size_t c = 0; c < columns; ++c) {
          to[c] = from[static_cast<int64_t>(c) * v_column_stride];
        }
        continue;
      }
      size_t c = 0;
      for (; c + lanes <= columns; c += lanes) hn::StoreU(hn::LoadU(d, from + c), d, to + c);
      for (; c < columns; ++c) to[c] = from[c];
    }
  }
}

// Keys [first, first + kKeys) scored against kVecs (1 or 2) vectors of
// queries, the tile's from lane `lane` on: each query vector of a feature
// loaded once for all keys, each key's feature broadcast once for all query
// vectors. The scores go to scores + j · 2L + lane; each vector's max over
// the keys in its lanes' [starts, lens) folds into `max`.
template <size_t kKeys, size_t kVecs, bool kStarts, class D, class VI>
HWY_INLINE void ScoreKeys(D d, const float* HWY_RESTRICT packed_q, size_t depth,
                          const float* HWY_RESTRICT k, int64_t k_row_stride, size_t first,
                          size_t lane, float scale, const VI (&starts)[kVecs],
                          const VI (&lens)[kVecs], hn::Vec<D> (&max)[kVecs],
                          float* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const size_t lanes = hn::Lanes(d), tile = 2 * lanes;
  const float* keys[kKeys];
  V acc[kKeys][kVecs];
  for (size_t j = 0; j < kKeys; ++j) {
    keys[j] = k + static_cast<int64_t>(first + j) * k_row_stride;
    for (size_t vec = 0; vec < kVecs; ++vec) acc[j][vec] = hn::Zero(d);
  }
  const float* queries = packed_q + lane;
  for (size_t f = 0; f < depth; ++f, queries += tile) {
    V x[kVecs];
    for (size_t vec = 0; vec < kVecs; ++vec) x[vec] = hn::LoadU(d, queries + vec * lanes);
    for (size_t j = 0; j < kKeys; ++j) {
      const V w = hn::Set(d, keys[j][f]);
      for (size_t vec = 0; vec < kVecs; ++vec) acc[j][vec] = hn::MulAdd(w, x[vec], acc[j][vec]);
    }
  }
  const V s = hn::Set(d, scale);
  for (size_t j = 0; j < kKeys; ++j) {
    const auto key = hn::Set(di, static_cast<int32_t>(first + j));
    for (size_t vec = 0; vec < kVecs; ++vec) {
      const V y = hn::Mul(acc[j][vec], s);
      auto valid = hn::RebindMask(d, hn::Lt(key, lens[vec]));
      if constexpr (kStarts) valid = hn::AndNot(hn::RebindMask(d, hn::Lt(key, starts[vec])), valid);
      max[vec] = hn::IfThenElse(valid, hn::Max(max[vec], y), max[vec]);
      hn::StoreU(y, d, scores + (first + j) * tile + lane + vec * lanes);
    }
  }
}

// Keys per ScoreKeys call: two query vectors take 6 keys (12 sums, two
// loads and a broadcast: AVX2's 16 registers), one takes 10. Alone in L1,
// D 64, on a Zen 5: 6 keys by two vectors ran at 92% of the FMA peak, 10
// keys by one at 75% (a broadcast per FMA), 8 at 71%.
template <size_t kVecs>
constexpr size_t kScoreStepKeys = kVecs == 2 ? 6 : 10;

// ScoreKeys over `keys` (1 to kScoreStepKeys) keys: a case per count.
template <size_t kVecs, bool kStarts, size_t kKeys = 1, class D, class VI>
HWY_INLINE void ScoreKeysOf(D d, size_t keys, const float* HWY_RESTRICT packed_q, size_t depth,
                            const float* HWY_RESTRICT k, int64_t k_row_stride, size_t first,
                            size_t lane, float scale, const VI (&starts)[kVecs],
                            const VI (&lens)[kVecs], hn::Vec<D> (&max)[kVecs],
                            float* HWY_RESTRICT scores) {
  if constexpr (kKeys < kScoreStepKeys<kVecs>) {
    if (keys != kKeys) {
      return ScoreKeysOf<kVecs, kStarts, kKeys + 1>(d, keys, packed_q, depth, k, k_row_stride,
                                                    first, lane, scale, starts, lens, max, scores);
    }
  }
  ScoreKeys<kKeys, kVecs, kStarts>(d, packed_q, depth, k, k_row_stride, first, lane, scale, starts,
                                   lens, max, scores);
}

// Keys [from, to) against kVecs query vectors from lane `lane`, in steps as
// even as kScoreStepKeys allows: a step of fewer keys keeps fewer sums in
// flight than the FMA's latency wants.
template <size_t kVecs, bool kStarts, class D, class VI>
HWY_INLINE void ScoreKeyRange(D d, size_t from, size_t to, const float* HWY_RESTRICT packed_q,
                              size_t depth, const float* HWY_RESTRICT k, int64_t k_row_stride,
                              size_t lane, float scale, const VI (&starts)[kVecs],
                              const VI (&lens)[kVecs], hn::Vec<D> (&max)[kVecs],
                              float* HWY_RESTRICT scores) {
  constexpr size_t kStep = kScoreStepKeys<kVecs>;
  const size_t steps = (to - from + kStep - 1) / kStep;
  for (size_t step = 0, first = from; step < steps; ++step) {
    const size_t keys = (to - first) / (steps - step);
    ScoreKeysOf<kVecs, kStarts>(d, keys, packed_q, depth, k, k_row_stride, first, lane, scale,
                                starts, lens, max, scores);
    first += keys;
  }
}

// Both halves over the first half's keys, then the second over the rest.
// Without kStarts, every lane's keys begin at key 0 and `starts` is unread.
template <bool kStarts>
HWY_INLINE void ScoreTileOf(const float* HWY_RESTRICT packed_q, size_t depth,
                            const float* HWY_RESTRICT k, int64_t k_row_stride,
                            const size_t (&widths)[2], float scale,
                            const int32_t* HWY_RESTRICT starts, const int32_t* HWY_RESTRICT valid,
                            float* HWY_RESTRICT row_max, float* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  using V = hn::Vec<decltype(d)>;
  using VI = hn::Vec<decltype(di)>;
  const size_t lanes = hn::Lanes(d);
  const V none = hn::Set(d, -std::numeric_limits<float>::infinity());
  const auto start_of = [&](size_t lane) HWY_ATTR {
    return kStarts ? hn::LoadU(di, starts + lane) : hn::Zero(di);
  };
  if (widths[1] == 0) {
    const VI first[1] = {start_of(0)};
    const VI lens[1] = {hn::LoadU(di, valid)};
    V max[1] = {none};
    ScoreKeyRange<1, kStarts>(d, 0, widths[0], packed_q, depth, k, k_row_stride, 0, scale, first,
                              lens, max, scores);
    hn::StoreU(max[0], d, row_max);
    hn::StoreU(none, d, row_max + lanes);
    return;
  }
  HWY_DASSERT(widths[0] <= widths[1]);
  const VI first[2] = {start_of(0), start_of(lanes)};
  const VI lens[2] = {hn::LoadU(di, valid), hn::LoadU(di, valid + lanes)};
  V max[2] = {none, none};
  ScoreKeyRange<2, kStarts>(d, 0, widths[0], packed_q, depth, k, k_row_stride, 0, scale, first,
                            lens, max, scores);
  const VI second_first[1] = {first[1]};
  const VI second_lens[1] = {lens[1]};
  V second_max[1] = {max[1]};
  ScoreKeyRange<1, kStarts>(d, widths[0], widths[1], packed_q, depth, k, k_row_stride, lanes, scale,
                            second_first, second_lens, second_max, scores);
  hn::StoreU(max[0], d, row_max);
  hn::StoreU(second_max[0], d, row_max + lanes);
}

// Lanes with starts (a window's rows) take the masks' extra test; others
// do not pay for it.
void ScoreQueryTile(const float* HWY_RESTRICT packed_q, size_t depth, const float* HWY_RESTRICT k,
                    int64_t k_row_stride, const size_t (&widths)[2], float scale,
                    const int32_t* HWY_RESTRICT starts, const int32_t* HWY_RESTRICT valid,
                    float* HWY_RESTRICT row_max, float* HWY_RESTRICT scores) {
  if (starts != nullptr) {
    return ScoreTileOf<true>(packed_q, depth, k, k_row_stride, widths, scale, starts, valid,
                             row_max, scores);
  }
  ScoreTileOf<false>(packed_q, depth, k, k_row_stride, widths, scale, starts, valid, row_max,
                     scores);
}

// Down each lane: e, the sum, and where a lane's softmax is undefined.
template <bool kStarts>
HWY_INLINE uint32_t ExpsOf(const int32_t* HWY_RESTRICT starts, const int32_t* HWY_RESTRICT valid,
                           const float* HWY_RESTRICT row_max, size_t width, size_t row_step,
                           float* HWY_RESTRICT scores, float* HWY_RESTRICT inv_sum,
                           float* HWY_RESTRICT sums) {
  const hn::ScalableTag<float> d;
  const hn::RebindToSigned<decltype(d)> di;
  using V = hn::Vec<decltype(d)>;
  const auto first = kStarts ? hn::LoadU(di, starts) : hn::Zero(di);
  const auto lens = hn::LoadU(di, valid);
  const V max = hn::LoadU(d, row_max);
  V sum = hn::Zero(d);
  auto nan_seen = hn::FirstN(d, 0);
  float* row = scores;
  for (size_t j = 0; j < width; ++j, row += row_step) {
    const auto key = hn::Set(di, static_cast<int32_t>(j));
    auto in = hn::RebindMask(d, hn::Lt(key, lens));
    if constexpr (kStarts) in = hn::AndNot(hn::RebindMask(d, hn::Lt(key, first)), in);
    const V x = hn::LoadU(d, row);
    if constexpr (!kExpKeepsNaN) {
      // The clamp in ExpOfDifference would hide a NaN score.
      nan_seen = hn::Or(nan_seen, hn::And(in, hn::IsNaN(x)));
    }
    const V e = hn::IfThenElseZero(in, ExpOfDifference(d, x, max));
    sum = hn::Add(sum, e);
    hn::StoreU(e, d, row);
  }
  hn::StoreU(hn::Div(hn::Set(d, 1.0f), sum), d, inv_sum);
  if (sums != nullptr) hn::StoreU(sum, d, sums);
  // A max of +Inf (an Inf score) or -Inf (only -Inf, or no key) leaves no
  // softmax; a NaN score makes the sum NaN (or, off AVX-512, nan_seen). A
  // -Inf score among finite ones weighs 0.
  const auto undefined =
      hn::Or(hn::Or(hn::Not(hn::IsFinite(max)), hn::Not(hn::IsFinite(sum))), nan_seen);
  uint8_t bits[(kernels::kMaxQueryTileLanes + 7) / 8] = {};
  hn::StoreMaskBits(d, undefined, bits);
  uint32_t flags = 0;
  for (size_t i = 0; i < sizeof(bits); ++i) flags |= uint32_t{bits[i]} << (8 * i);
  return flags;
}

uint32_t QueryTileExps(const int32_t* HWY_RESTRICT starts, const int32_t* HWY_RESTRICT valid,
                       const float* HWY_RESTRICT row_max, size_t width, size_t row_step,
                       float* HWY_RESTRICT scores, float* HWY_RESTRICT inv_sum,
                       float* HWY_RESTRICT sums) {
  return starts != nullptr
             ? ExpsOf<true>(starts, valid, row_max, width, row_step, scores, inv_sum, sums)
             : ExpsOf<false>(starts, valid, row_max, width, row_step, scores, inv_sum, sums);
}

// Columns [c, c + kVecs vectors) of kRows rows' out, the last vector `rest`
// lanes wide when kTail, from `values` (those columns of key 0, key j's
// `v_row_stride` floats further on): each key's vectors loaded once for all
// rows, each row's sums scaled once at the end. Returns bit r set where row
// r's columns hold a NaN or Inf.
template <size_t kRows, size_t kVecs, bool kTail, class D>
HWY_INLINE uint32_t MixStrip(D d, const kernels::TileWeights& weights, size_t width,
                             const float* HWY_RESTRICT values, int64_t v_row_stride, size_t c,
                             size_t rest, float* const* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const size_t step = weights.step;
  const float* rows[kRows];
  V acc[kRows][kVecs];
  for (size_t r = 0; r < kRows; ++r) {
    rows[r] = weights.rows[r];
    for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::Zero(d);
  }
  const float* value = values;
  for (size_t j = 0, at = 0; j < width; ++j, at += step, value += v_row_stride) {
    V x[kVecs];
    for (size_t vec = 0; vec < kVecs; ++vec) {
      x[vec] = kTail && vec + 1 == kVecs ? LoadTail(d, value + vec * lanes, rest, 0.0f)
                                         : hn::LoadU(d, value + vec * lanes);
    }
    for (size_t r = 0; r < kRows; ++r) {
      const V w = hn::Set(d, rows[r][at]);
      for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::MulAdd(w, x[vec], acc[r][vec]);
    }
  }
  uint32_t non_finite = 0;
  for (size_t r = 0; r < kRows; ++r) {
    if (weights.scales != nullptr) {
      const V scale = hn::Set(d, weights.scales[r]);
      for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::Mul(acc[r][vec], scale);
    }
    // Lanes past `rest` summed zeros times the row's weights: non-finite
    // only where the row's own columns are too.
    auto finite = hn::IsFinite(acc[r][0]);
    for (size_t vec = 1; vec < kVecs; ++vec) finite = hn::And(finite, hn::IsFinite(acc[r][vec]));
    for (size_t vec = 0; vec < kVecs; ++vec) {
      if (kTail && vec + 1 == kVecs) {
        StoreTail(d, acc[r][vec], rest, out[r] + c + vec * lanes);
      } else {
        hn::StoreU(acc[r][vec], d, out[r] + c + vec * lanes);
      }
    }
    if (!hn::AllTrue(d, finite)) non_finite |= uint32_t{1} << r;
  }
  return non_finite;
}

// Columns [first, first + columns) of kRows rows' out, two vectors a strip,
// from `values` (column `first` of key 0, key j's `v_row_stride` floats
// further on).
template <size_t kRows>
HWY_INLINE uint32_t MixColumnsOfTile(const kernels::TileWeights& weights, size_t width,
                                     const float* HWY_RESTRICT values, int64_t v_row_stride,
                                     size_t first, size_t columns, float* const* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  uint32_t non_finite = 0;
  for (size_t done = 0; done < columns; done += 2 * lanes) {
    const size_t strip = columns - done < 2 * lanes ? columns - done : 2 * lanes;
    const float* strip_values = values + done;
    const size_t c = first + done;
    if (strip == 2 * lanes) {
      non_finite |=
          MixStrip<kRows, 2, false>(d, weights, width, strip_values, v_row_stride, c, 0, out);
    } else if (strip > lanes) {
      non_finite |= MixStrip<kRows, 2, true>(d, weights, width, strip_values, v_row_stride, c,
                                             strip - lanes, out);
    } else if (strip == lanes) {
      non_finite |=
          MixStrip<kRows, 1, false>(d, weights, width, strip_values, v_row_stride, c, 0, out);
    } else {
      non_finite |=
          MixStrip<kRows, 1, true>(d, weights, width, strip_values, v_row_stride, c, strip, out);
    }
  }
  return non_finite;
}

uint32_t MixTile(size_t rows, const kernels::TileWeights& weights, size_t width,
                 const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
                 float* const* HWY_RESTRICT out) {
  return WithRowCount(rows, [&](auto count) HWY_ATTR {
    return MixColumnsOfTile<decltype(count)::value>(weights, width, v, v_row_stride, 0, value_dim,
                                                    out);
  });
}

size_t ValuePanelColumns() { return 2 * hn::Lanes(hn::ScalableTag<float>()); }

// Panel by panel (attention_tile.h): each a dense (packed_keys, its
// columns) matrix, read front to back once per strip of it.
uint32_t MixPackedTile(size_t rows, const kernels::TileWeights& weights, size_t width,
                       const float* HWY_RESTRICT packed, size_t packed_keys, size_t first_key,
                       size_t value_dim, size_t panel_columns, float* const* HWY_RESTRICT out) {
  HWY_DASSERT(panel_columns > 0);
  return WithRowCount(rows, [&](auto count) HWY_ATTR {
    uint32_t non_finite = 0;
    for (size_t first = 0; first < value_dim; first += panel_columns) {
      const size_t columns = value_dim - first < panel_columns ? value_dim - first : panel_columns;
      non_finite |= MixColumnsOfTile<decltype(count)::value>(
          weights, width, packed + first * packed_keys + first_key * columns,
          static_cast<int64_t>(columns), first, columns, out);
    }
    return non_finite;
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_ toggle
