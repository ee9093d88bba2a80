// The attention row kernels over a KvCache's rows held in fewer bits
// (attention_row.h): bfloat16 words, or int8 codes with their scales.
// Per-target bodies and run-time dispatch.
//
// Each stored element becomes, as it is read, the float it stands for: a
// bf16 word exactly (the word in the upper half, zeros below); an int8
// key code as lo + step · code (a multiply-add); an int8 value code
// exactly, its row's scale folded into the row's weight. Products and sums
// are in float. Keys lie in channel-major groups, so scores come a vector
// of keys at a time: each lane one key's products summed channel after
// channel, even and odd channels in two chains added at the end, with no
// sums across lanes; a score depends on its own query and key alone.
// Mixes: each output column continues its sum key after key with
// multiply-adds, so a row's keys cut into consecutive ranges give the bits
// of one pass.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention_row.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_row_cached.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dispatch.h"

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

// bf16 value words.
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
// (kernels::Int8Values), folded into the weights before they come here.
struct Int8ValueRows {
  const int8_t* HWY_RESTRICT codes;
  int64_t stride;
  const int8_t* Row(size_t j) const { return codes + static_cast<int64_t>(j) * stride; }
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, size_t j, size_t c) const {
    const hn::RebindToSigned<D> di;
    const hn::Rebind<int8_t, D> d8;
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, Row(j) + c)));
  }
  float At(size_t j, size_t c) const { return static_cast<float>(Row(j)[c]); }
  float Weight(float w, size_t) const { return w; }
};

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
  // The vectors left in strips of 4, 2, then 1: each column's sum is one
  // chain of multiply-adds, a key's latency long, so the narrower the
  // strip, the fewer chains run side by side. A row alone (Hq = Hkv) of Dv
  // 64: 8 heads of 1,024 keys from a bf16 cache took 48-64 µs a call in
  // strips of one vector (64% of it in the mixes), 35-40 µs in one of four.
  for (; c + 4 * lanes <= value_dim; c += 4 * lanes) MixStrip<kRows, 4>(d, w, from, to, v, c, out);
  for (; c + 2 * lanes <= value_dim; c += 2 * lanes) MixStrip<kRows, 2>(d, w, from, to, v, c, out);
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

void AddMixesBf16(size_t rows, const float* const* HWY_RESTRICT weights,
                  const size_t* HWY_RESTRICT keys, const uint16_t* HWY_RESTRICT v,
                  int64_t v_row_stride, size_t value_dim, float* const* HWY_RESTRICT out) {
  AddCachedMixes(rows, weights, keys, Bf16Rows{v, v_row_stride}, value_dim, out);
}

// A key group's keys [j0, j0 + Lanes(d)) of one channel after another, as
// the floats they stand for: Pair(d, c, &even, &odd), channels c and c + 1
// (c even), and Channel(d, c). Made by the keys' At(j0).
struct Bf16Chunk {
  const uint16_t* HWY_RESTRICT group;  // the group's words
  size_t lane;                         // key j0's within the group
  // A pair's words lie a key at a time, two to a 32-bit lane: the low one
  // shifted up, and the high one with its low half cleared, are exactly
  // the floats they stand for.
  template <class D>
  HWY_INLINE void Pair(D d, size_t c, hn::Vec<D>* even, hn::Vec<D>* odd) const {
    const hn::RebindToUnsigned<D> du;
    const auto* p =
        reinterpret_cast<const uint32_t*>(group + c * kernels::kCachedKeyGroup + 2 * lane);
    const auto both = hn::LoadU(du, p);
    *even = hn::BitCast(d, hn::ShiftLeft<16>(both));
    *odd = hn::BitCast(d, hn::And(both, hn::Set(du, 0xFFFF0000u)));
  }
  // The last channel of an odd depth, its words side by side.
  template <class D>
  HWY_INLINE hn::Vec<D> Channel(D d, size_t c) const {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    const uint16_t* p = group + c * kernels::kCachedKeyGroup + lane;
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  }
};
struct Int8Chunk {
  const uint8_t* HWY_RESTRICT codes;  // channel 0's, from key j0 on
  const float* HWY_RESTRICT lo;       // the group's lo, then its step
  size_t depth;
  template <class D>
  HWY_INLINE void Pair(D d, size_t c, hn::Vec<D>* even, hn::Vec<D>* odd) const {
    *even = Channel(d, c);
    *odd = Channel(d, c + 1);
  }
  template <class D>
  HWY_INLINE hn::Vec<D> Channel(D d, size_t c) const {
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint8_t, D> d8;
    const auto code =
        hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, codes + c * kernels::kCachedKeyGroup)));
    return hn::MulAdd(hn::Set(d, lo[depth + c]), code, hn::Set(d, lo[c]));
  }
};

// Where key j0's group and lanes lie (kernels::Bf16Keys, Int8Keys).
constexpr size_t kGroup = kernels::kCachedKeyGroup;
struct Bf16GroupKeys {
  kernels::Bf16Keys k;
  size_t depth;
  Bf16Chunk At(size_t j0) const { return {k.words + j0 / kGroup * kGroup * depth, j0 % kGroup}; }
};
struct Int8GroupKeys {
  kernels::Int8Keys k;
  size_t depth;
  Int8Chunk At(size_t j0) const {
    return {k.codes + j0 / kGroup * kGroup * depth + j0 % kGroup,
            k.params + j0 / kGroup * 2 * depth, depth};
  }
};

// scale · the scores of kChunks chunks of keys (a vector of them each,
// within one group) for kRows rows: channel by channel, the keys' floats,
// then each row's multiply-add, even and odd channels in two chains. Each
// lane's chains are its own key's, whatever kChunks. Row r of chunk i
// keeps its first count[i][r] scores.
template <size_t kRows, size_t kChunks, class D, class Chunk>
HWY_INLINE void ScoreChunks(D d, const float* const* HWY_RESTRICT q, size_t depth,
                            const Chunk* chunks, float scale,
                            const size_t (*HWY_RESTRICT count)[kCachedTileRows],
                            float* const (*HWY_RESTRICT scores)[kCachedTileRows]) {
  using V = hn::Vec<D>;
  V acc[kChunks][2][kRows];
  for (size_t i = 0; i < kChunks; ++i) {
    for (size_t r = 0; r < kRows; ++r) acc[i][0][r] = acc[i][1][r] = hn::Zero(d);
  }
  const auto add_channel = [&](size_t c, V key, V* sums) HWY_ATTR {
    for (size_t r = 0; r < kRows; ++r) sums[r] = hn::MulAdd(hn::Set(d, q[r][c]), key, sums[r]);
  };
  size_t c = 0;
  for (; c + 2 <= depth; c += 2) {
    for (size_t i = 0; i < kChunks; ++i) {
      V even = hn::Zero(d), odd = even;
      chunks[i].Pair(d, c, &even, &odd);
      add_channel(c, even, acc[i][0]);
      add_channel(c + 1, odd, acc[i][1]);
    }
  }
  if (c < depth) {
    for (size_t i = 0; i < kChunks; ++i) add_channel(c, chunks[i].Channel(d, c), acc[i][0]);
  }
  alignas(64) float lanes[kGroup];
  for (size_t i = 0; i < kChunks; ++i) {
    for (size_t r = 0; r < kRows; ++r) {
      const V sum = hn::Mul(hn::Add(acc[i][0][r], acc[i][1][r]), hn::Set(d, scale));
      if (count[i][r] == hn::Lanes(d)) {
        hn::StoreU(sum, d, scores[i][r]);
      } else if (count[i][r] > 0) {
        hn::Store(sum, d, lanes);
        std::copy(lanes, lanes + count[i][r], scores[i][r]);
      }
    }
  }
}

// A tile of kRows rows goes through the keys kChunks vectors of them at a
// time (a group of kCachedKeyGroup keys is whole vectors), then one, each
// row keeping its own keys'. A row alone takes four chunks, eight chains
// where one chunk gave it two: 8 heads of 1,024 keys from a bf16 cache
// (Hq = Hkv, Dv 64) took 28-35 µs against 35-40, of 16,384 keys 0.88-0.98
// ms against 1.02-1.08 (an AMD EPYC Zen 5). Tiles of two and four rows
// with two chunks ran 5-11% faster from caches in L2 and L3, but 1.15-1.85x
// slower from memory (GQA decode of 16,384 and 65,536 keys, D 64): they
// take one.
template <size_t kRows, class D, class Keys>
HWY_INLINE void ScoreTile(D d, const float* const* HWY_RESTRICT q, size_t depth, const Keys& k,
                          const size_t* HWY_RESTRICT keys, float scale,
                          float* const* HWY_RESTRICT scores) {
  constexpr size_t kChunks = kRows == 1 ? 4 : 1;
  const size_t lanes = hn::Lanes(d);
  size_t longest = 0;
  for (size_t r = 0; r < kRows; ++r) longest = std::max(longest, keys[r]);
  size_t count[kChunks][kCachedTileRows] = {};
  float* out[kChunks][kCachedTileRows] = {};
  using Chunk = decltype(k.At(0));
  const auto set_chunk = [&](size_t i, size_t j0) {
    for (size_t r = 0; r < kRows; ++r) {
      count[i][r] = keys[r] > j0 ? std::min(lanes, keys[r] - j0) : 0;
      out[i][r] = scores[r] + j0;
    }
    return k.At(j0);
  };
  size_t j0 = 0;
  for (; j0 + (kChunks - 1) * lanes < longest; j0 += kChunks * lanes) {
    Chunk chunks[kChunks];
    for (size_t i = 0; i < kChunks; ++i) chunks[i] = set_chunk(i, j0 + i * lanes);
    ScoreChunks<kRows, kChunks>(d, q, depth, chunks, scale, count, out);
  }
  for (; j0 < longest; j0 += lanes) {
    const Chunk chunk = set_chunk(0, j0);
    ScoreChunks<kRows, 1>(d, q, depth, &chunk, scale, count, out);
  }
}

template <class Keys>
HWY_INLINE void ScoreGroupedRows(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                                 const Keys& k, const size_t* HWY_RESTRICT keys, float scale,
                                 float* const* HWY_RESTRICT scores) {
  const hn::CappedTag<float, kGroup> d;
  for (size_t r0 = 0; r0 < rows; r0 += kCachedTileRows) {
    switch (std::min(kCachedTileRows, rows - r0)) {
      case 1:
        ScoreTile<1>(d, q + r0, depth, k, keys + r0, scale, scores + r0);
        break;
      case 2:
        ScoreTile<2>(d, q + r0, depth, k, keys + r0, scale, scores + r0);
        break;
      case 3:
        ScoreTile<3>(d, q + r0, depth, k, keys + r0, scale, scores + r0);
        break;
      default:
        ScoreTile<4>(d, q + r0, depth, k, keys + r0, scale, scores + r0);
    }
  }
}

void ScoreRowsBf16(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                   const kernels::Bf16Keys& k, const size_t* HWY_RESTRICT keys, float scale,
                   float* const* HWY_RESTRICT scores) {
  ScoreGroupedRows(rows, q, depth, Bf16GroupKeys{k, depth}, keys, scale, scores);
}

void ScoreRowsInt8(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
                   const kernels::Int8Keys& k, const size_t* HWY_RESTRICT keys, float scale,
                   float* const* HWY_RESTRICT scores) {
  ScoreGroupedRows(rows, q, depth, Int8GroupKeys{k, depth}, keys, scale, scores);
}

void AddMixesInt8(size_t rows, const float* const* HWY_RESTRICT weights,
                  const size_t* HWY_RESTRICT keys, const kernels::Int8Values& v, size_t value_dim,
                  float* const* HWY_RESTRICT out) {
  // The weights times their rows' scales, a chunk of keys at a time, so
  // the loop over the keys does no scalar multiply per key and row; a
  // chunk continues each column's sums, as AddMixes does.
  constexpr size_t kChunk = 64;
  alignas(64) float scaled[kernels::kMaxSharedRows][kChunk];
  const float* chunk_weights[kernels::kMaxSharedRows] = {};
  size_t chunk_keys[kernels::kMaxSharedRows] = {};
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = std::max(longest, keys[r]);
  for (size_t j0 = 0; j0 < longest; j0 += kChunk) {
    for (size_t r = 0; r < rows; ++r) {
      chunk_keys[r] = keys[r] > j0 ? std::min(kChunk, keys[r] - j0) : 0;
      for (size_t j = 0; j < chunk_keys[r]; ++j)
        scaled[r][j] = weights[r][j0 + j] * v.scales[j0 + j];
      chunk_weights[r] = scaled[r];
    }
    const int8_t* codes = v.codes + static_cast<int64_t>(j0) * v.row_stride;
    AddCachedMixes(rows, chunk_weights, chunk_keys, Int8ValueRows{codes, v.row_stride}, value_dim,
                   out);
  }
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

void ScoreRows(size_t rows, const float* const* q, size_t depth, const Bf16Keys& k,
               const size_t* keys, float scale, float* const* scores) {
  ATTNSCORE_DISPATCH(ScoreRowsBf16)(rows, q, depth, k, keys, scale, scores);
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
