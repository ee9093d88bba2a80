// One query row against its keys and values, for problems with very few
// queries (decode): matrix-vector products, where a oneDNN matmul spends more
// on set-up than on arithmetic. Vectorised by Highway, dispatched at run time.
#ifndef ATTNSCORE_KERNELS_ATTENTION_ROW_H_
#define ATTNSCORE_KERNELS_ATTENTION_ROW_H_

#include <cstddef>
#include <cstdint>

namespace attnscore::kernels {

// scores[j] = scale · Σ_d q[d] · k[j·k_row_stride + d] for j < keys.
// q and each key row are `depth` contiguous floats.
void ScoreRow(const float* q, size_t depth, const float* k, int64_t k_row_stride, size_t keys,
              float scale, float* scores);

// out[c] = Σ_j weights[j] · v[j·v_row_stride + c] for c < value_dim, j < keys.
// Each value row is `value_dim` contiguous floats; out is overwritten.
void MixRow(const float* weights, size_t keys, const float* v, int64_t v_row_stride,
            size_t value_dim, float* out);

// Rows that share their keys (an entry's few queries, a group's query heads)
// go through the two kernels below together, at most this many at a time.
inline constexpr size_t kMaxSharedRows = 8;

// ScoreRow for `rows` <= kMaxSharedRows queries over the same keys: row r
// writes scores[r][j] for j < keys[r]. K is read once for all rows, and
// every row gets the bits ScoreRow gives it alone.
void ScoreRows(size_t rows, const float* const* q, size_t depth, const float* k,
               int64_t k_row_stride, const size_t* keys, float scale, float* const* scores);

// MixRow for `rows` <= kMaxSharedRows weight rows over the same values: row r
// writes out[r][c] = Σ_{j < keys[r]} weights[r][j] · v[j·v_row_stride + c].
// V is read once for all rows, and every row gets the bits MixRow gives it.
void MixRows(size_t rows, const float* const* weights, const size_t* keys, const float* v,
             int64_t v_row_stride, size_t value_dim, float* const* out);

// MixRows going on from what out holds: out[r][c] += Σ_{j < keys[r]}
// weights[r][j] · v[j·v_row_stride + c], each sum continued term by term in
// the same order. So with out first set to +0, a row's keys cut into
// consecutive ranges, one call per range (weights, v advanced to the
// range's first key), give the bits of MixRows over them all. A row with
// keys[r] = 0 is left as it is.
void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const float* v,
              int64_t v_row_stride, size_t value_dim, float* const* out);

// Positions of a bf16 or int8 KvCache's keys that lie together: positions
// [g · kCachedKeyGroup, (g + 1) · kCachedKeyGroup) of a head make its group
// g, held channel-major (a group's keys of one channel side by side), so
// the kernels score a vector of keys at once; an int8 group's keys share
// their scales.
inline constexpr size_t kCachedKeyGroup = 16;

// A bf16 KvCache's keys from the first position of a group on: key j's
// element d is the word at words[Bf16KeyWord(j, d, depth)]. Within a group,
// channels go in pairs, a key's two words side by side (one 32-bit load
// holds both channels of a key), then, for an odd depth, the last channel
// alone.
struct Bf16Keys {
  const uint16_t* words;
};
inline size_t Bf16KeyWord(size_t j, size_t d, size_t depth) {
  const size_t group = j / kCachedKeyGroup * kCachedKeyGroup * depth, lane = j % kCachedKeyGroup;
  const size_t paired = depth / 2 * 2;  // channels in pairs
  return group + (d < paired ? d / 2 * 2 * kCachedKeyGroup + 2 * lane + d % 2
                             : paired * kCachedKeyGroup + lane);
}

// ScoreRows over a bf16 KvCache's keys, and MixRows, AddMixes and MixRow
// over V rows held as bfloat16 words (row strides in words), in
// attention_row_cached.cc. Each word widens exactly to the float it stands
// for as it is read; products and sums are in float. A score is its
// products summed channel after channel (even and odd channels in two
// sums, added), and depends on its own query and key alone; AddMixes
// continues each column's sum key after key, as above.
void ScoreRows(size_t rows, const float* const* q, size_t depth, const Bf16Keys& k,
               const size_t* keys, float scale, float* const* scores);
void MixRows(size_t rows, const float* const* weights, const size_t* keys, const uint16_t* v,
             int64_t v_row_stride, size_t value_dim, float* const* out);
void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const uint16_t* v,
              int64_t v_row_stride, size_t value_dim, float* const* out);
void MixRow(const float* weights, size_t keys, const uint16_t* v, int64_t v_row_stride,
            size_t value_dim, float* out);

// An int8 KvCache's keys from the first position of a group on: key j's
// element d is the code at codes[(j / kCachedKeyGroup) · kCachedKeyGroup ·
// depth + d · kCachedKeyGroup + j % kCachedKeyGroup] (0..255) and stands
// for lo[d] + step[d] · code, rounded once to float, where lo and step are
// the `depth` floats at params + (j / kCachedKeyGroup) · 2 · depth and the
// `depth` floats after them.
struct Int8Keys {
  const uint8_t* codes;
  const float* params;
};
// An int8 KvCache's values: value j's element c stands for scales[j] ·
// codes[j · row_stride + c] (a code -127..127).
struct Int8Values {
  const int8_t* codes;
  int64_t row_stride;
  const float* scales;
};

// The kernels above over an int8 KvCache's rows (attention_row_cached.cc):
// a key element is read as the float it stands for, a score summed as over
// bf16 keys; a value row's scale is folded into its weight (w · scale, then
// times each code). Mixes continue key after key, as above.
void ScoreRows(size_t rows, const float* const* q, size_t depth, const Int8Keys& k,
               const size_t* keys, float scale, float* const* scores);
void MixRows(size_t rows, const float* const* weights, const size_t* keys, const Int8Values& v,
             size_t value_dim, float* const* out);
void AddMixes(size_t rows, const float* const* weights, const size_t* keys, const Int8Values& v,
              size_t value_dim, float* const* out);
void MixRow(const float* weights, size_t keys, const Int8Values& v, size_t value_dim, float* out);

}  // namespace attnscore::kernels

#endif  // ATTNSCORE_KERNELS_ATTENTION_ROW_H_
