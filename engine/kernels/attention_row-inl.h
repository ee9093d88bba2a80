// Per-target bodies of the attention row kernels (attention_row.h); included
// once per Highway target by attention_row.cc through foreach_target.h.
#if defined(ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#undef ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#else
#define ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/attention_row.h"
#include "kernels/lane_sums-inl.h"
#include "kernels/score_rows_held-inl.h"
#include "kernels/tails-inl.h"

HWY_BEFORE_NAMESPACE();
namespace attnscore {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Four keys' dot products with one query, each as a vector of partial sums
// (reduced by the caller): two accumulators per key, over alternate vectors
// of D, the query's vectors loaded once for the four keys.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void DotPartials4(D d, const float* HWY_RESTRICT q, const float* const* HWY_RESTRICT row,
                             size_t depth, V* HWY_RESTRICT sums) {
  const size_t lanes = hn::Lanes(d);
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  size_t c = 0;
  for (; c + 2 * lanes <= depth; c += 2 * lanes) {
    const V qa = hn::LoadU(d, q + c), qb = hn::LoadU(d, q + c + lanes);
    a0 = hn::MulAdd(qa, hn::LoadU(d, row[0] + c), a0);
    a1 = hn::MulAdd(qa, hn::LoadU(d, row[1] + c), a1);
    a2 = hn::MulAdd(qa, hn::LoadU(d, row[2] + c), a2);
    a3 = hn::MulAdd(qa, hn::LoadU(d, row[3] + c), a3);
    b0 = hn::MulAdd(qb, hn::LoadU(d, row[0] + c + lanes), b0);
    b1 = hn::MulAdd(qb, hn::LoadU(d, row[1] + c + lanes), b1);
    b2 = hn::MulAdd(qb, hn::LoadU(d, row[2] + c + lanes), b2);
    b3 = hn::MulAdd(qb, hn::LoadU(d, row[3] + c + lanes), b3);
  }
  if (c + lanes <= depth) {
    const V qa = hn::LoadU(d, q + c);
    a0 = hn::MulAdd(qa, hn::LoadU(d, row[0] + c), a0);
    a1 = hn::MulAdd(qa, hn::LoadU(d, row[1] + c), a1);
    a2 = hn::MulAdd(qa, hn::LoadU(d, row[2] + c), a2);
    a3 = hn::MulAdd(qa, hn::LoadU(d, row[3] + c), a3);
    c += lanes;
  }
  if (c < depth) {
    const size_t rest = depth - c;
    const V qb = LoadTail(d, q + c, rest, 0.0f);
    b0 = hn::MulAdd(qb, LoadTail(d, row[0] + c, rest, 0.0f), b0);
    b1 = hn::MulAdd(qb, LoadTail(d, row[1] + c, rest, 0.0f), b1);
    b2 = hn::MulAdd(qb, LoadTail(d, row[2] + c, rest, 0.0f), b2);
    b3 = hn::MulAdd(qb, LoadTail(d, row[3] + c, rest, 0.0f), b3);
  }
  sums[0] = hn::Add(a0, b0), sums[1] = hn::Add(a1, b1);
  sums[2] = hn::Add(a2, b2), sums[3] = hn::Add(a3, b3);
}

// Scores of up to kernels::kMaxSharedRows rows over the same keys: row r's
// score j is scale · q[r]·k_j for j < keys[r]. Keys go four at a time, every
// row taking each group of four while its K rows are in L1, so K is read from
// memory once for all rows. A score's arithmetic is that of its own query
// and key alone: a row's last keys short of four are scored with the last
// key standing in for the missing ones, and only their own scores stored.
void ScoreRows(size_t rows, const float* const* HWY_RESTRICT q, size_t depth,
               const float* HWY_RESTRICT k, int64_t k_row_stride, const size_t* HWY_RESTRICT keys,
               float scale, float* const* HWY_RESTRICT scores) {
  using D = hn::ScalableTag<float>;
  const D d;
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = keys[r] > longest ? keys[r] : longest;
#if HWY_TARGET <= HWY_AVX3
  if (depth % hn::Lanes(d) == 0 && rows == 1) {
    switch (depth / hn::Lanes(d)) {
      case 1:
        return ScoreRowAlone<1>(d, q[0], k, k_row_stride, keys[0], scale, scores[0]);
      case 2:
        return ScoreRowAlone<2>(d, q[0], k, k_row_stride, keys[0], scale, scores[0]);
      case 3:
        return ScoreRowAlone<3>(d, q[0], k, k_row_stride, keys[0], scale, scores[0]);
      case 4:
        return ScoreRowAlone<4>(d, q[0], k, k_row_stride, keys[0], scale, scores[0]);
      default:
        break;
    }
  }
  if (depth % hn::Lanes(d) == 0) {
    switch (depth / hn::Lanes(d)) {
      case 1:
        return ScoreRowsHeld<1>(d, rows, q, k, k_row_stride, keys, longest, scale, scores);
      case 2:
        return ScoreRowsHeld<2>(d, rows, q, k, k_row_stride, keys, longest, scale, scores);
      case 3:
        return ScoreRowsHeld<3>(d, rows, q, k, k_row_stride, keys, longest, scale, scores);
      case 4:
        return ScoreRowsHeld<4>(d, rows, q, k, k_row_stride, keys, longest, scale, scores);
      default:
        break;
    }
  }
#endif
  hn::Vec<D> sums[4];
  for (size_t j = 0; j < longest; j += 4) {
    // One row's keys are a single stream the hardware prefetcher follows;
    // rows sharing them keep the core busier, and miss more without this.
    if (rows > 1) PrefetchRows(k, j + kPrefetchKeys, 4, longest, k_row_stride, depth);
    for (size_t r = 0; r < rows; ++r) {
      if (j >= keys[r]) continue;
      const size_t count = keys[r] - j < 4 ? keys[r] - j : 4;
      const float* row[4];
      for (size_t i = 0; i < 4; ++i) {
        row[i] = k + static_cast<int64_t>(j + (i < count ? i : count - 1)) * k_row_stride;
      }
      DotPartials4(d, q[r], row, depth, sums);
      StoreSums4(d, sums, scale, count, scores[r] + j);
    }
  }
}

void ScoreRow(const float* HWY_RESTRICT q, size_t depth, const float* HWY_RESTRICT k,
              int64_t k_row_stride, size_t keys, float scale, float* HWY_RESTRICT scores) {
  const float* const query[1] = {q};
  float* const out[1] = {scores};
  ScoreRows(1, query, depth, k, k_row_stride, &keys, scale, out);
}

// MixRows' arithmetic: each output float is one sum of w_j · v_j over the
// keys j in order, by MulAdd from 0 (fused where the target has FMA), so it
// has the same bits whatever rows or columns share its tile and wherever the
// keys are cut into passes. Speed comes from tiles of such sums side by
// side: each V vector loaded once for a tile's rows, eight or more
// accumulators in flight to cover the FMA's latency.

// out[r] += Σ_{first <= j < last} w[r][j] · v_j over kVectors vectors of
// columns (the last `rest` lanes wide when kTail), for kRows rows: each V
// vector loaded once for all the rows, each row's weight broadcast once per
// key. The sums stay in registers over the keys; out holds them between
// calls, so splitting the keys does not change a bit. With
// `prefetch_columns` > 0, it asks for that many floats of V's rows
// kPrefetchKeys ahead, below `limit`.
template <size_t kRows, size_t kVectors, bool kTail, class D>
HWY_INLINE void MixTile(D d, const float* const* HWY_RESTRICT w, size_t first, size_t last,
                        const float* HWY_RESTRICT v, int64_t v_row_stride, size_t rest,
                        size_t prefetch_columns, size_t limit, float* const* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  const auto load = [&](const float* x, size_t vec) HWY_ATTR {
    return kTail && vec + 1 == kVectors ? LoadTail(d, x + vec * lanes, rest, 0.0f)
                                        : hn::LoadU(d, x + vec * lanes);
  };
  V acc[kRows * kVectors];
  HWY_UNROLL(8)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(8)
    for (size_t vec = 0; vec < kVectors; ++vec) acc[r * kVectors + vec] = load(out[r], vec);
  }
  for (size_t j = first; j < last; ++j) {
    const float* row = v + static_cast<int64_t>(j) * v_row_stride;
    if (prefetch_columns != 0) {
      PrefetchRows(v, j + kPrefetchKeys, 1, limit, v_row_stride, prefetch_columns);
    }
    V vv[kVectors];
    HWY_UNROLL(8)
    for (size_t vec = 0; vec < kVectors; ++vec) vv[vec] = load(row, vec);
    HWY_UNROLL(8)
    for (size_t r = 0; r < kRows; ++r) {
      const V weight = hn::Set(d, w[r][j]);
      HWY_UNROLL(8)
      for (size_t vec = 0; vec < kVectors; ++vec) {
        acc[r * kVectors + vec] = hn::MulAdd(weight, vv[vec], acc[r * kVectors + vec]);
      }
    }
  }
  HWY_UNROLL(8)
  for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(8)
    for (size_t vec = 0; vec < kVectors; ++vec) {
      if (kTail && vec + 1 == kVectors) {
        StoreTail(d, acc[r * kVectors + vec], rest, out[r] + vec * lanes);
      } else {
        hn::StoreU(acc[r * kVectors + vec], d, out[r] + vec * lanes);
      }
    }
  }
}

// MixTile over the last strip of columns: `vectors` <= kVectors of them,
// the last one partial when `rest` > 0, the tile's shape chosen once here
// rather than tested in the loop.
template <size_t kRows, size_t kVectors, class D>
HWY_INLINE void MixLastStrip(D d, size_t vectors, const float* const* HWY_RESTRICT w, size_t first,
                             size_t last, const float* HWY_RESTRICT v, int64_t v_row_stride,
                             size_t rest, size_t prefetch_columns, size_t limit,
                             float* const* HWY_RESTRICT out) {
  if (vectors == kVectors) {
    if (rest != 0) {
      return MixTile<kRows, kVectors, true>(d, w, first, last, v, v_row_stride, rest,
                                            prefetch_columns, limit, out);
    }
    return MixTile<kRows, kVectors, false>(d, w, first, last, v, v_row_stride, 0, prefetch_columns,
                                           limit, out);
  }
  if constexpr (kVectors > 1) {
    MixLastStrip<kRows, kVectors - 1>(d, vectors, w, first, last, v, v_row_stride, rest,
                                      prefetch_columns, limit, out);
  }
}

// Vectors of columns per tile of kRows rows: one accumulator per row and
// vector, at least eight of them to cover the FMA's latency, as many as 16
// registers hold beside the tile's V vectors and its broadcast weight. Four
// rows by three vectors: twelve chains in flight, where four by two only
// matched the latency (four rows of D 64 in L2: 7.3 ns per key, against
// 8.2 for four by two and 10.3 for the earlier kernel's even and odd keys;
// minima of alternated runs on a Zen 3). Two rows by four; one by eight
// (its V loads fold into its FMAs, so eight accumulators and the weight
// fit). A row alone over fewer columns than that (Dv < 64 at AVX2) has
// fewer chains than the latency wants and pays an FMA latency per key: the
// price of one order for every tile.
// AVX-512 has 32 registers: four rows by four vectors, two by eight, sixteen
// chains. Dv 64 is then one strip, where four by three left a strip of one
// vector, four chains waiting on the latency (GQA decode from a KvCache,
// (4, Hq 16, Hkv 4, 2,048 keys, D 64): 332-346 µs a call against 307-320,
// alternated on an AMD EPYC Zen 5).
template <size_t kRows>
constexpr size_t StripVectors() {
#if HWY_TARGET <= HWY_AVX3
  return kRows == 4 ? 4 : 8;
#else
  return kRows == 4 ? 3 : kRows == 2 ? 4 : 8;
#endif
}

// MixTile over all `value_dim` columns, keys [first, last), for the kRows
// rows whose indices are `rows`: strips of full vectors, then the rest in
// one strip of fewer. Only the first strip prefetches. A function of its own
// per tile height: inlined, MixRows held every tile shape of every height.
template <size_t kRows, class D>
HWY_NOINLINE void MixStrips(D d, const size_t* HWY_RESTRICT rows,
                            const float* const* HWY_RESTRICT weights, size_t first, size_t last,
                            const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
                            size_t prefetch_columns, size_t limit, float* const* HWY_RESTRICT out) {
  constexpr size_t kVectors = StripVectors<kRows>();
  const size_t strip = kVectors * hn::Lanes(d);
  const float* w[kRows];
  float* o[kRows];
  for (size_t r = 0; r < kRows; ++r) w[r] = weights[rows[r]];
  size_t c = 0;
  for (; c + strip <= value_dim; c += strip) {
    for (size_t r = 0; r < kRows; ++r) o[r] = out[rows[r]] + c;
    MixTile<kRows, kVectors, false>(d, w, first, last, v + c, v_row_stride, 0, prefetch_columns,
                                    limit, o);
    prefetch_columns = 0;
  }
  if (c == value_dim) return;
  for (size_t r = 0; r < kRows; ++r) o[r] = out[rows[r]] + c;
  const size_t rest = (value_dim - c) % hn::Lanes(d);
  const size_t vectors = (value_dim - c + hn::Lanes(d) - 1) / hn::Lanes(d);
  MixLastStrip<kRows, kVectors>(d, vectors, w, first, last, v + c, v_row_stride, rest,
                                prefetch_columns, limit, o);
}

// MixStrips for the kRows rows `rows` over their keys of [first, pass_end):
// together over the keys all of them have, then each row's further keys
// alone.
template <size_t kRows, class D>
HWY_INLINE void MixRowTile(D d, const size_t* HWY_RESTRICT rows,
                           const float* const* HWY_RESTRICT weights,
                           const size_t* HWY_RESTRICT keys, size_t first, size_t pass_end,
                           const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
                           size_t prefetch_columns, size_t limit, float* const* HWY_RESTRICT out) {
  size_t common = pass_end;
  for (size_t r = 0; r < kRows; ++r) common = keys[rows[r]] < common ? keys[rows[r]] : common;
  MixStrips<kRows>(d, rows, weights, first, common, v, v_row_stride, value_dim, prefetch_columns,
                   limit, out);
  if constexpr (kRows > 1) {
    for (size_t r = 0; r < kRows; ++r) {
      const size_t own = keys[rows[r]] < pass_end ? keys[rows[r]] : pass_end;
      if (own > common) {
        MixStrips<1>(d, rows + r, weights, common, own, v, v_row_stride, value_dim, 0, limit, out);
      }
    }
  }
}

#if HWY_TARGET <= HWY_AVX3
// MixTile<1, kVectors>'s sums for a row alone over its `keys` V rows from
// v, read with `rows` but the first and the last (by LoadU): each column's
// sum goes on from out's key after key, so the bits are MixStrips<1>'s.
template <size_t kVectors, class D>
HWY_NOINLINE void MixRowOffLine(D d, const float* HWY_RESTRICT w, size_t keys,
                                const float* HWY_RESTRICT v, const OffLineRows<D>& rows,
                                float* HWY_RESTRICT out) {
  using V = hn::Vec<D>;
  const size_t lanes = hn::Lanes(d);
  constexpr size_t kRowFloats = kVectors * hn::MaxLanes(d);
  V acc[kVectors];
  HWY_UNROLL(8)
  for (size_t t = 0; t < kVectors; ++t) acc[t] = hn::LoadU(d, out + t * lanes);
  const auto add = [&](size_t j, const V* HWY_RESTRICT value) HWY_ATTR {
    const V weight = hn::Set(d, w[j]);
    HWY_UNROLL(8)
    for (size_t t = 0; t < kVectors; ++t) acc[t] = hn::MulAdd(weight, value[t], acc[t]);
  };
  const auto add_loaded = [&](size_t j) HWY_ATTR {
    V value[kVectors];
    HWY_UNROLL(8)
    for (size_t t = 0; t < kVectors; ++t) value[t] = hn::LoadU(d, v + j * kRowFloats + t * lanes);
    add(j, value);
  };
  add_loaded(0);
  for (size_t j = 1; j + 1 < keys; ++j) {
    V value[kVectors];
    rows.template Row<kVectors>(d, v + j * kRowFloats, value);
    add(j, value);
  }
  add_loaded(keys - 1);
  HWY_UNROLL(8)
  for (size_t t = 0; t < kVectors; ++t) hn::StoreU(acc[t], d, out + t * lanes);
}

// MixRowOffLine for rows of `vectors` <= kVectors vectors, the row's length
// chosen once here.
template <size_t kVectors, class D>
HWY_INLINE void MixRowOffLineOf(D d, size_t vectors, const float* HWY_RESTRICT w, size_t keys,
                                const float* HWY_RESTRICT v, const OffLineRows<D>& rows,
                                float* HWY_RESTRICT out) {
  if (vectors == kVectors) return MixRowOffLine<kVectors>(d, w, keys, v, rows, out);
  if constexpr (kVectors > 1) MixRowOffLineOf<kVectors - 1>(d, vectors, w, keys, v, rows, out);
}

// AddMixes for a row alone whose V rows lie back to back off a line
// (OffLineRows), at least three of them, of 1 to 8 whole vectors: true
// where it ran.
template <class D>
HWY_INLINE bool MixRowOffLines(D d, const float* HWY_RESTRICT w, size_t keys,
                               const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
                               float* HWY_RESTRICT out) {
  const OffLineRows<D> rows(d, v, v_row_stride, value_dim);
  const size_t vectors = value_dim / hn::Lanes(d);
  if (rows.off() == 0 || keys < 3 || vectors > 8) return false;
  MixRowOffLineOf<8>(d, vectors, w, keys, v, rows, out);
  return true;
}
#endif

// Keys per pass of MixRows: every tile of rows takes this many V rows while
// they are in L1 (64 rows of Dv 64: 16 KiB; much wider V rows spill to L2).
constexpr size_t kMixPassKeys = 64;

// out[r][c] += Σ_{j < keys[r]} weights[r][j] · v_j[c] for up to
// kMaxSharedRows rows over the same values, each sum going on from the
// value out holds. Pass by pass of kMixPassKeys keys, the rows that still
// have keys go in tiles of four, two, one, so V is read from memory once for
// all rows.
void AddMixes(size_t rows, const float* const* HWY_RESTRICT weights,
              const size_t* HWY_RESTRICT keys, const float* HWY_RESTRICT v, int64_t v_row_stride,
              size_t value_dim, float* const* HWY_RESTRICT out) {
  using D = hn::ScalableTag<float>;
  const D d;
  size_t longest = 0;
  for (size_t r = 0; r < rows; ++r) longest = keys[r] > longest ? keys[r] : longest;
#if HWY_TARGET <= HWY_AVX3
  if (rows == 1 && MixRowOffLines(d, weights[0], keys[0], v, v_row_stride, value_dim, out[0])) {
    return;
  }
#endif
  // A row alone has no tile to share V's rows with: one pass over its keys.
  const size_t pass_keys = rows == 1 ? longest : kMixPassKeys;
  for (size_t first = 0; first < longest; first += pass_keys) {
    const size_t pass_end = longest - first < pass_keys ? longest : first + pass_keys;
    size_t active[kernels::kMaxSharedRows];
    size_t count = 0;
    for (size_t r = 0; r < rows; ++r) {
      if (keys[r] > first) active[count++] = r;
    }
    // With rows sharing V, the first tile asks for the rows ahead, whole, over
    // the keys its rows share: the other tiles find them in cache.
    const size_t prefetch_columns = rows > 1 ? value_dim : 0;
    size_t a = 0;
    for (; a + 4 <= count; a += 4) {
      MixRowTile<4>(d, active + a, weights, keys, first, pass_end, v, v_row_stride, value_dim,
                    a == 0 ? prefetch_columns : 0, longest, out);
    }
    if (a + 2 <= count) {
      MixRowTile<2>(d, active + a, weights, keys, first, pass_end, v, v_row_stride, value_dim,
                    a == 0 ? prefetch_columns : 0, longest, out);
      a += 2;
    }
    if (a < count) {
      MixRowTile<1>(d, active + a, weights, keys, first, pass_end, v, v_row_stride, value_dim,
                    a == 0 ? prefetch_columns : 0, longest, out);
    }
  }
}

void MixRows(size_t rows, const float* const* HWY_RESTRICT weights, const size_t* HWY_RESTRICT keys,
             const float* HWY_RESTRICT v, int64_t v_row_stride, size_t value_dim,
             float* const* HWY_RESTRICT out) {
  for (size_t r = 0; r < rows; ++r) std::memset(out[r], 0, value_dim * sizeof(float));
  AddMixes(rows, weights, keys, v, v_row_stride, value_dim, out);
}

void MixRow(const float* HWY_RESTRICT weights, size_t keys, const float* HWY_RESTRICT v,
            int64_t v_row_stride, size_t value_dim, float* HWY_RESTRICT out) {
  const float* const row[1] = {weights};
  float* const mixed[1] = {out};
  MixRows(1, row, &keys, v, v_row_stride, value_dim, mixed);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace attnscore
HWY_AFTER_NAMESPACE();

#endif  // ATTNSCORE_KERNELS_ATTENTION_ROW_INL_H_ toggle
