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
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/attention_tile.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Keys per packed panel (attention_tile.h). A vector of keys never crosses
// a panel, and two vectors fit in kTileKeyPad: at most 16 lanes (x86).
constexpr size_t kPanelKeys = 16;
static_assert(hn::MaxLanes(hn::ScalableTag<float>()) <= kPanelKeys &&
                  kernels::kTileKeyPad % kPanelKeys == 0,
              "a vector of keys must fit in one panel");

// f(std::integral_constant<size_t, rows>()) for a tile of `rows` in [1,
// kTileRows]: the kernels' loops over rows unrolled for each count.
template <class F>
HWY_INLINE auto WithRowCount(size_t rows, F f) {
  switch (rows) {
    case 1:
      return f(std::integral_constant<size_t, 1>());
    case 2:
      return f(std::integral_constant<size_t, 2>());
    case 3:
      return f(std::integral_constant<size_t, 3>());
    case 4:
      return f(std::integral_constant<size_t, 4>());
    case 5:
      return f(std::integral_constant<size_t, 5>());
    default:
      static_assert(kernels::kTileRows == 6, "one case per row count");
      return f(std::integral_constant<size_t, kernels::kTileRows>());
  }
}

// Packs K (attention_tile.h), where its columns are contiguous four keys by
// four features at a time: a 4x4 transpose in 128-bit vectors, each
// feature's four keys stored at once.
void PackKeys(const float* HWY_RESTRICT k, int64_t k_row_stride, int64_t k_column_stride,
              size_t keys, size_t depth, float* HWY_RESTRICT packed) {
  const size_t padded = kernels::PaddedTileKeys(keys);
  for (size_t first = 0; first < padded; first += kPanelKeys) {
    float* panel = packed + first * depth;
    size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
    const hn::Full128<float> d4;
    const hn::Repartition<double, decltype(d4)> d2;
    for (; k_column_stride == 1 && i < kPanelKeys && first + i + 4 <= keys; i += 4) {
      const float* r0 = k + static_cast<int64_t>(first + i) * k_row_stride;
      const float* r1 = r0 + k_row_stride;
      const float* r2 = r1 + k_row_stride;
      const float* r3 = r2 + k_row_stride;
      size_t f = 0;
      for (; f + 4 <= depth; f += 4) {
        const auto x0 = hn::LoadU(d4, r0 + f), x1 = hn::LoadU(d4, r1 + f);
        const auto x2 = hn::LoadU(d4, r2 + f), x3 = hn::LoadU(d4, r3 + f);
        // Pairs of keys per feature: (x0 x1) and (x2 x3) of features f, f+1
        // in `low`, of f+2, f+3 in `high`; then their 64-bit halves paired.
        const auto low01 = hn::BitCast(d2, hn::InterleaveLower(d4, x0, x1));
        const auto low23 = hn::BitCast(d2, hn::InterleaveLower(d4, x2, x3));
        const auto high01 = hn::BitCast(d2, hn::InterleaveUpper(d4, x0, x1));
        const auto high23 = hn::BitCast(d2, hn::InterleaveUpper(d4, x2, x3));
        float* at = panel + f * kPanelKeys + i;
        hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, low01, low23)), d4, at);
        hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, low01, low23)), d4, at + kPanelKeys);
        hn::StoreU(hn::BitCast(d4, hn::InterleaveLower(d2, high01, high23)), d4,
                   at + 2 * kPanelKeys);
        hn::StoreU(hn::BitCast(d4, hn::InterleaveUpper(d2, high01, high23)), d4,
                   at + 3 * kPanelKeys);
      }
      for (; f < depth; ++f) {
        float* at = panel + f * kPanelKeys + i;
        at[0] = r0[f], at[1] = r1[f], at[2] = r2[f], at[3] = r3[f];
      }
    }
#endif
    for (; i < kPanelKeys && first + i < keys; ++i) {
      const float* row = k + static_cast<int64_t>(first + i) * k_row_stride;
      for (size_t f = 0; f < depth; ++f) {
        panel[f * kPanelKeys + i] = row[static_cast<int64_t>(f) * k_column_stride];
      }
    }
    for (; i < kPanelKeys; ++i) {
      for (size_t f = 0; f < depth; ++f) panel[f * kPanelKeys + i] = 0.0f;
    }
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

// Scores of kRows rows over kVecs (1 or 2) vectors of keys from `first` (a
// multiple of two vectors): each key vector of a feature loaded once for
// all rows, each query feature broadcast once for all key vectors.
template <size_t kRows, size_t kVecs, class D>
HWY_INLINE void ScoreStep(D d, const float* const* HWY_RESTRICT q, size_t depth,
                          const float* HWY_RESTRICT packed, size_t first, float scale,
                          float* const* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  // Key j lies in panel j / 16, at lane j % 16 of each feature's 16 floats.
  const float* keys[kVecs];
  for (size_t vec = 0; vec < kVecs; ++vec) {
    const size_t key = first + vec * lanes;
    keys[vec] = packed + key / kPanelKeys * kPanelKeys * depth + key % kPanelKeys;
  }
  const float* rows[kRows];
  V acc[kRows][kVecs];
  for (size_t r = 0; r < kRows; ++r) {
    rows[r] = q[r];
    for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::Zero(d);
  }
  for (size_t f = 0; f < depth; ++f) {
    V x[kVecs];
    for (size_t vec = 0; vec < kVecs; ++vec) x[vec] = hn::LoadU(d, keys[vec] + f * kPanelKeys);
    for (size_t r = 0; r < kRows; ++r) {
      const V w = hn::Set(d, rows[r][f]);
      for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::MulAdd(w, x[vec], acc[r][vec]);
    }
  }
  const V s = hn::Set(d, scale);
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t vec = 0; vec < kVecs; ++vec) {
      hn::StoreU(hn::Mul(acc[r][vec], s), d, scores[r] + first + vec * lanes);
    }
  }
}

// Two vectors of keys a step; the last step one, where that covers the rest.
template <size_t kRows>
HWY_INLINE void ScoreRowsOfTile(const float* const* HWY_RESTRICT q, size_t depth,
                                const float* HWY_RESTRICT packed, size_t width, float scale,
                                float* const* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (size_t first = 0; first < width; first += 2 * lanes) {
    if (width - first <= lanes) {
      ScoreStep<kRows, 1>(d, q, depth, packed, first, scale, scores);
    } else {
      ScoreStep<kRows, 2>(d, q, depth, packed, first, scale, scores);
    }
  }
}

void ScoreTile(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
               const float* HWY_RESTRICT packed, size_t width, float scale,
               float* const* HWY_RESTRICT scores) {
  WithRowCount(rows, [&](auto count) HWY_ATTR {
    ScoreRowsOfTile<decltype(count)::value>(q, depth, packed, width, scale, scores);
  });
}

// Columns [c, c + kVecs vectors) of kRows rows' out, the last vector `rest`
// lanes wide when kTail, from `values` (those columns of key 0, key j's
// `v_row_stride` floats further on): each key's vectors loaded once for all
// rows. Returns bit r set where row r's columns hold a NaN or Inf.
template <size_t kRows, size_t kVecs, bool kTail, class D>
HWY_INLINE uint32_t MixStrip(D d, const float* const* HWY_RESTRICT weights, size_t width,
                             const float* HWY_RESTRICT values, int64_t v_row_stride, size_t c,
                             size_t rest, float* const* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const float* rows[kRows];
  V acc[kRows][kVecs];
  for (size_t r = 0; r < kRows; ++r) {
    rows[r] = weights[r];
    for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::Zero(d);
  }
  const float* value = values;
  for (size_t j = 0; j < width; ++j, value += v_row_stride) {
    V x[kVecs];
    for (size_t vec = 0; vec < kVecs; ++vec) {
      x[vec] = kTail && vec + 1 == kVecs ? LoadTail(d, value + vec * lanes, rest, 0.0f)
                                         : hn::LoadU(d, value + vec * lanes);
    }
    for (size_t r = 0; r < kRows; ++r) {
      const V w = hn::Set(d, rows[r][j]);
      for (size_t vec = 0; vec < kVecs; ++vec) acc[r][vec] = hn::MulAdd(w, x[vec], acc[r][vec]);
    }
  }
  uint32_t non_finite = 0;
  for (size_t r = 0; r < kRows; ++r) {
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
HWY_INLINE uint32_t MixColumnsOfTile(const float* const* HWY_RESTRICT weights, size_t width,
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

uint32_t MixTile(size_t rows, const float* const* HWY_RESTRICT weights, size_t width,
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
uint32_t MixPackedTile(size_t rows, const float* const* HWY_RESTRICT weights, size_t width,
                       const float* HWY_RESTRICT packed, size_t packed_keys, size_t value_dim,
                       size_t panel_columns, float* const* HWY_RESTRICT out) {
  HWY_DASSERT(panel_columns > 0);
  return WithRowCount(rows, [&](auto count) HWY_ATTR {
    uint32_t non_finite = 0;
    for (size_t first = 0; first < value_dim; first += panel_columns) {
      const size_t columns = value_dim - first < panel_columns ? value_dim - first : panel_columns;
      non_finite |= MixColumnsOfTile<decltype(count)::value>(
          weights, width, packed + first * packed_keys, static_cast<int64_t>(columns), first,
          columns, out);
    }
    return non_finite;
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_ATTENTION_TILE_INL_H_ toggle
