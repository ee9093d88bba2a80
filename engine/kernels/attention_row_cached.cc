// The attention row kernels over a KvCache's rows held in fewer bits
// (attention_row.h): bfloat16 words, or int8 codes with their scales.
// Per-target bodies and run-time dispatch.
//
// Each stored element becomes, as it is read, the float it stands for: a
// bf16 word exactly (the word in the upper half, zeros below); an int8
// key code as lo + step · code (a multiply-add); an int8 value code
// exactly, its row's scale folded into the row's weight. Products and sums
// are in float. Scores over bf16 keys: per key, one vector accumulator per
// row over the depth's full vectors (fused multiply-adds in order), summed
// across lanes in a fixed tree (and, where D is not whole vectors, the
// depth's last columns added one by one), then scaled. Over int8 keys,
// whose groups are channel-major, a vector of keys at a time: each lane
// one key's products summed channel after channel, with no lane sums.
// Either way a score depends on its own query and key alone. Mixes: each
// output column continues its sum key after key with multiply-adds, so a
// row's keys cut into consecutive ranges give the bits of one pass.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_row.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_row_cached.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"
#include "kernels/lane_sums-inl.h"

#ifndef ATTNSCORE_KERNELS_ATTENTION_ROW_CACHED_ONCE_
#define ATTNSCORE_KERNELS_ATTENTION_ROW_CACHED_ONCE_
namespace attnscore::kernels {
// The float a bf16 word stands for.
inline float Bf16Float(uint16_t word) {
  const uint32_t bits = uint32_t{word} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// Rows a kernel body holds in registers at once.
inline constexpr size_t kCachedTileRows = 4;
}  // namespace attnscore::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using kernels::Bf16Float;
using kernels::kCachedTileRows;

// How a kernel reads stored rows: Load(d, j, c), the floats that row j's
// elements c, c + 1, ... stand for; At(j, c), one of them; Weight(w, j), the
// weight row j's elements are mixed with, given its attention weight w
// (values only).

// bf16 words, keys or values.
struct Bf16Rows {
  const uint16_t* HWY_RESTRICT words;
  int64_t stride;
  const uint16_t* Row(size_t j) const { return words + static_cast<int64_t>(j) * stride; }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t j, size_t c) const {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, Row(j) + c))));
  }
  float At(size_t j, size_t c) const { return Bf16Float(Row(j)[c]); }
  float Weight(float w, size_t) const { return w; }
};

// int8 values: codes -127..127, scale · code, the scale the row's own
// (kernels::Int8Values), folded into its weight.
struct Int8ValueRows {
  const int8_t* HWY_RESTRICT codes;
  int64_t stride;
  const float* HWY_RESTRICT scales;
  const int8_t* Row(size_t j) const { return codes + static_cast<int64_t>(j) * stride; }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t j, size_t c) const {
    const hn::RebindToSigned<D> di;
    const hn::Rebind<int8_t, D> d8;
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, Row(j) + c)));
  }
  float At(size_t j, size_t c) const { return static_cast<float>(Row(j)[c]); }
  float Weight(float w, size_t j) const { return w * scales[j]; }
};

// scores[r][j] for kRows rows and keys [j, j + kKeys).
template <size_t kRows, size_t kKeys, class D, class Keys>
HWY_INLINE void ScoreKeys(D d, const float* const* HWY_RESTRICT q, size_t depth, const Keys& k,
                          size_t j, float scale, float* const* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  V acc[kRows][kKeys];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t i = 0; i < kKeys; ++i) acc[r][i] = hn::Zero(d);
  }
  size_t c = 0;
  for (; c + lanes <= depth; c += lanes) {
    V key[kKeys];
    for (size_t i = 0; i < kKeys; ++i) key[i] = k.Load(d, j + i, c);
    for (size_t r = 0; r < kRows; ++r) {
      const V query = hn::LoadU(d, q[r] + c);
      for (size_t i = 0; i < kKeys; ++i) acc[r][i] = hn::MulAdd(query, key[i], acc[r][i]);
    }
  }
  if (c == depth) {
    // Whole vectors: each key's lanes summed in StoreSums4's fixed tree,
    // four keys at once (a key alone beside zeros gets the same bits).
    for (size_t r = 0; r < kRows; ++r) {
      V sums[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
      for (size_t i = 0; i < kKeys; ++i) sums[i] = acc[r][i];
      StoreSums4(d, sums, scale, kKeys, scores[r] + j);
    }
    return;
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t i = 0; i < kKeys; ++i) {
      float sum = hn::GetLane(hn::SumOfLanes(d, acc[r][i]));
      for (size_t t = c; t < depth; ++t) sum = std::fma(q[r][t], k.At(j + i, t), sum);
      scores[r][j + i] = scale * sum;
    }
  }
}

// Keys [from, to) for kRows rows.
template <size_t kRows, class D, class Keys>
HWY_INLINE void ScoreRange(D d, const float* const* HWY_RESTRICT q, size_t depth, const Keys& k,
                           size_t from, size_t to, float scale, float* const* HWY_RESTRICT scores) {
  size_t j = from;
  for (; j + 4 <= to; j += 4) ScoreKeys<kRows, 4>(d, q, depth, k, j, scale, scores);
  for (; j < to; ++j) ScoreKeys<kRows, 1>(d, q, depth, k, j, scale, scores);
}

template <class Keys>
HWY_INLINE void ScoreCachedRows(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                                const Keys& k, const size_t* HWY_RESTRICT keys, float scale,
                                float* const* HWY_RESTRICT scores) {
  const hn::ScalableTag<float> d;
  for (size_t r0 = 0; r0 < rows; r0 += kCachedTileRows) {
    const size_t n = std::min(kCachedTileRows, rows - r0);
    size_t shared = keys[r0];
    for (size_t r = r0; r < r0 + n; ++r) shared = std::min(shared, keys[r]);
    // Keys every row of the tile has, together; then each row's own rest.
    switch (n) {
      case 1:
        ScoreRange<1>(d, q + r0, depth, k, 0, shared, scale, scores + r0);
        break;
      case 2:
        ScoreRange<2>(d, q + r0, depth, k, 0, shared, scale, scores + r0);
        break;
      case 3:
        ScoreRange<3>(d, q + r0, depth, k, 0, shared, scale, scores + r0);
        break;
      default:
        ScoreRange<4>(d, q + r0, depth, k, 0, shared, scale, scores + r0);
    }
    for (size_t r = r0; r < r0 + n; ++r) {
      ScoreRange<1>(d, q + r, depth, k, shared, keys[r], scale, scores + r);
    }
  }
}

// out[r][c0 ..) += Σ_{j in [from, to)} w[r][j] · V[j][c0 ..) for kRows rows
// and kVectors vectors of columns.
template <size_t kRows, size_t kVectors, class D, class Values>
HWY_INLINE void MixStrip(D d, const float* const* HWY_RESTRICT w, size_t from, size_t to,
                         const Values& v, size_t c0, float* const* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  V acc[kRows][kVectors];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t t = 0; t < kVectors; ++t) acc[r][t] = hn::LoadU(d, out[r] + c0 + t * lanes);
  }
  for (size_t j = from; j < to; ++j) {
    V value[kVectors];
    for (size_t t = 0; t < kVectors; ++t) value[t] = v.Load(d, j, c0 + t * lanes);
    for (size_t r = 0; r < kRows; ++r) {
      const V weight = hn::Set(d, v.Weight(w[r][j], j));
      for (size_t t = 0; t < kVectors; ++t) acc[r][t] = hn::MulAdd(weight, value[t], acc[r][t]);
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t t = 0; t < kVectors; ++t) hn::StoreU(acc[r][t], d, out[r] + c0 + t * lanes);
  }
}

// Keys [from, to) for kRows rows, every column.
template <size_t kRows, class D, class Values>
HWY_INLINE void MixRange(D d, const float* const* HWY_RESTRICT w, size_t from, size_t to,
                         const Values& v, size_t value_dim, float* const* HWY_RESTRICT out) {
  if (from >= to) return;
  const size_t lanes = hn::Lanes(d);
  constexpr size_t kStrip = kRows <= 2 ? 8 : 4;  // vectors of columns held per pass
  size_t c = 0;
  for (; c + kStrip * lanes <= value_dim; c += kStrip * lanes) {
    MixStrip<kRows, kStrip>(d, w, from, to, v, c, out);
  }
  for (; c + lanes <= value_dim; c += lanes) MixStrip<kRows, 1>(d, w, from, to, v, c, out);
  for (; c < value_dim; ++c) {
    for (size_t r = 0; r < kRows; ++r) {
      float sum = out[r][c];
      for (size_t j = from; j < to; ++j) sum = std::fma(v.Weight(w[r][j], j), v.At(j, c), sum);
      out[r][c] = sum;
    }
  }
}

template <class Values>
HWY_INLINE void AddCachedMixes(size_t rows, const float* const* HWY_RESTRICT weights,
                               const size_t* HWY_RESTRICT keys, const Values& v, size_t value_dim,
                               float* const* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  for (size_t r0 = 0; r0 < rows; r0 += kCachedTileRows) {
    const size_t n = std::min(kCachedTileRows, rows - r0);
    size_t shared = keys[r0];
    for (size_t r = r0; r < r0 + n; ++r) shared = std::min(shared, keys[r]);
    const float* const* w = weights + r0;
    switch (n) {
      case 1:
        MixRange<1>(d, w, 0, shared, v, value_dim, out + r0);
        break;
      case 2:
        MixRange<2>(d, w, 0, shared, v, value_dim, out + r0);
        break;
      case 3:
        MixRange<3>(d, w, 0, shared, v, value_dim, out + r0);
        break;
      default:
        MixRange<4>(d, w, 0, shared, v, value_dim, out + r0);
    }
    for (size_t r = r0; r < r0 + n; ++r) {
      MixRange<1>(d, weights + r, shared, keys[r], v, value_dim, out + r);
    }
  }
}

void ScoreRowsBf16(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                   const uint16_t* HWY_RESTRICT k, int64_t k_row_stride,
                   const size_t* HWY_RESTRICT keys, float scale,
                   float* const* HWY_RESTRICT scores) {
  ScoreCachedRows(rows, q, depth, Bf16Rows{k, k_row_stride}, keys, scale, scores);
}

void AddMixesBf16(size_t rows, const float* const* HWY_RESTRICT weights,
                  const size_t* HWY_RESTRICT keys, const uint16_t* HWY_RESTRICT v,
                  int64_t v_row_stride, size_t value_dim, float* const* HWY_RESTRICT out) {
  AddCachedMixes(rows, weights, keys, Bf16Rows{v, v_row_stride}, value_dim, out);
}

// scale · the scores of one int8 key group's keys [j0, j0 + lanes) for
// kRows rows, the codes of channel 0 from codes on: channel by channel, the
// keys' codes as floats, what they stand for (lo + step · code), then each
// row's multiply-add. Row r keeps its first count[r] scores.
template <size_t kRows, class D>
HWY_INLINE void ScoreInt8Lanes(D d, const float* const* HWY_RESTRICT q, size_t depth,
                               const uint8_t* HWY_RESTRICT codes, const float* HWY_RESTRICT lo,
                               float scale, const size_t* HWY_RESTRICT count,
                               float* const* HWY_RESTRICT scores) {
  using V = hn::Vec<D>;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint8_t, D> d8;
  const float* HWY_RESTRICT step = lo + depth;
  // Even and odd channels in two sums per row, added at the end: twice the
  // independent chains of multiply-adds, which their latency needs.
  V acc[2][kRows];
  for (size_t r = 0; r < kRows; ++r) acc[0][r] = acc[1][r] = hn::Zero(d);
  const auto add_channel = [&](size_t c, V* sums) HWY_ATTR {
    const V code =
        hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, codes + c * kernels::kInt8KeyGroup)));
    const V key = hn::MulAdd(hn::Set(d, step[c]), code, hn::Set(d, lo[c]));
    for (size_t r = 0; r < kRows; ++r) sums[r] = hn::MulAdd(hn::Set(d, q[r][c]), key, sums[r]);
  };
  size_t c = 0;
  for (; c + 2 <= depth; c += 2) {
    add_channel(c, acc[0]);
    add_channel(c + 1, acc[1]);
  }
  if (c < depth) add_channel(c, acc[0]);
  V* sum = acc[0];
  for (size_t r = 0; r < kRows; ++r) sum[r] = hn::Add(acc[0][r], acc[1][r]);
  alignas(64) float lanes[kernels::kInt8KeyGroup];
  for (size_t r = 0; r < kRows; ++r) {
    if (count[r] == hn::Lanes(d)) {
      hn::StoreU(hn::Mul(sum[r], hn::Set(d, scale)), d, scores[r]);
    } else if (count[r] > 0) {
      hn::Store(hn::Mul(sum[r], hn::Set(d, scale)), d, lanes);
      std::copy(lanes, lanes + count[r], scores[r]);
    }
  }
}

// A tile of rows goes through the keys a vector of them at a time (a group
// of kInt8KeyGroup keys is whole vectors), each row keeping its own keys'.
void ScoreRowsInt8(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                   const kernels::Int8Keys& k, const size_t* HWY_RESTRICT keys, float scale,
                   float* const* HWY_RESTRICT scores) {
  const hn::CappedTag<float, kernels::kInt8KeyGroup> d;
  const size_t lanes = hn::Lanes(d);
  constexpr size_t kGroup = kernels::kInt8KeyGroup;
  for (size_t r0 = 0; r0 < rows; r0 += kCachedTileRows) {
    const size_t n = std::min(kCachedTileRows, rows - r0);
    size_t longest = 0;
    for (size_t r = r0; r < r0 + n; ++r) longest = std::max(longest, keys[r]);
    size_t count[kCachedTileRows] = {};
    float* out[kCachedTileRows] = {};
    for (size_t j0 = 0; j0 < longest; j0 += lanes) {
      for (size_t r = 0; r < n; ++r) {
        count[r] = keys[r0 + r] > j0 ? std::min(lanes, keys[r0 + r] - j0) : 0;
        out[r] = scores[r0 + r] + j0;
      }
      const uint8_t* codes = k.codes + j0 / kGroup * kGroup * depth + j0 % kGroup;
      const float* lo = k.params + j0 / kGroup * 2 * depth;
      switch (n) {
        case 1:
          ScoreInt8Lanes<1>(d, q + r0, depth, codes, lo, scale, count, out);
          break;
        case 2:
          ScoreInt8Lanes<2>(d, q + r0, depth, codes, lo, scale, count, out);
          break;
        case 3:
          ScoreInt8Lanes<3>(d, q + r0, depth, codes, lo, scale, count, out);
          break;
        default:
          ScoreInt8Lanes<4>(d, q + r0, depth, codes, lo, scale, count, out);
      }
    }
  }
}

void AddMixesInt8(size_t rows, const float* const* HWY_RESTRICT weights,
                  const size_t* HWY_RESTRICT keys, const kernels::Int8Values& v, size_t value_dim,
                  float* const* HWY_RESTRICT out) {
  AddCachedMixes(rows, weights, keys, Int8ValueRows{v.codes, v.row_stride, v.scales}, value_dim,
                 out);
}

}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attnscore::kernels {

HWY_EXPORT(ScoreRowsBf16);
HWY_EXPORT(AddMixesBf16);
HWY_EXPORT(ScoreRowsInt8);
HWY_EXPORT(AddMixesInt8);

void ScoreRows(size_t rows, const float* const* q, size_t depth, const uint16_t* k,
               int64_t k_row_stride, const size_t* keys, float scale, float* const* scores) {
  ATTNSCORE_DISPATCH(ScoreRowsBf16)(rows, q, depth, k, k_row_stride, keys, scale, scores);
}

void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const uint16_t* v,
              int64_t v_row_stride, size_t value_dim, float* const* out) {
  ATTNSCORE_DISPATCH(AddMixesBf16)(rows, weights, keys, v, v_row_stride, value_dim, out);
}

void MixRows(size_t rows, const float* const* weights, const size_t* keys, const uint16_t* v,
             int64_t v_row_stride, size_t value_dim, float* const* out) {
  for (size_t r = 0; r < rows; ++r) std::fill(out[r], out[r] + value_dim, 0.0f);
  AddMixes(rows, weights, keys, v, v_row_stride, value_dim, out);
}

void MixRow(const float* weights, size_t keys, const uint16_t* v, int64_t v_row_stride,
            size_t value_dim, float* out) {
  MixRows(1, &weights, &keys, v, v_row_stride, value_dim, &out);
}

void ScoreRows(size_t rows, const float* const* q, size_t depth, const Int8Keys& k,
               const size_t* keys, float scale, float* const* scores) {
  ATTNSCORE_DISPATCH(ScoreRowsInt8)(rows, q, depth, k, keys, scale, scores);
}

void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const Int8Values& v,
              size_t value_dim, float* const* out) {
  ATTNSCORE_DISPATCH(AddMixesInt8)(rows, weights, keys, v, value_dim, out);
}

void MixRows(size_t rows, const float* const* weights, const size_t* keys, const Int8Values& v,
             size_t value_dim, float* const* out) {
  for (size_t r = 0; r < rows; ++r) std::fill(out[r], out[r] + value_dim, 0.0f);
  AddMixes(rows, weights, keys, v, value_dim, out);
}

void MixRow(const float* weights, size_t keys, const Int8Values& v, size_t value_dim, float* out) {
  MixRows(1, &weights, &keys, v, value_dim, &out);
}

}  // namespace attnscore::kernels
#endif  // HWY_ONCE
