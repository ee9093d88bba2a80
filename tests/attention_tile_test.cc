// The tile kernels (engine/kernels/attention_tile.h) on every target: a
// query tile's scores, exps and mixed outputs match sums in double, a
// query's bits do not depend on the tile, half or lane it takes, the tile's
// flags name exactly the queries without a softmax, MixTile flags exactly
// the rows it made non-finite, MixPackedTile gives MixTile's bits for any
// panel width, and lanes with starts keep to their own keys.
#include "kernels/attention_tile.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

class AttentionTileTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(AttentionTileTest);

constexpr float kInf = std::numeric_limits<float>::infinity();

// One query tile through the kernels as the op runs it: packed, scored,
// each half's exps, then mixed in sub-tiles of up to MixTileRows() queries,
// each over its longest length. Lengths rise and are >= 1; K rows are
// `k_stride` floats apart, V rows `v_stride`.
struct TileRun {
  size_t lanes = kernels::QueryTileLanes(), tile = 2 * lanes;
  std::vector<float> packed, scores, row_max, inv_sum, out;
  size_t widths[2] = {0, 0};
  uint32_t undefined = 0;

  TileRun(const std::vector<const float*>& q_rows, int64_t q_column_stride, size_t depth,
          const float* k, int64_t k_stride, const float* v, int64_t v_stride, size_t value_dim,
          const std::vector<int32_t>& valid_rows, float scale) {
    const size_t count = q_rows.size();
    std::vector<int32_t> valid(valid_rows);
    valid.resize(tile, 0);
    packed.assign(tile * depth, -1.0f);
    kernels::PackQueries(count, q_rows.data(), q_column_stride, depth, packed.data());
    widths[0] = static_cast<size_t>(valid[std::min(count, lanes) - 1]);
    widths[1] = count > lanes ? static_cast<size_t>(valid[count - 1]) : 0;
    const size_t width = std::max(widths[0], widths[1]);
    scores.assign(tile * width, -1.0f);
    row_max.assign(tile, -1.0f);
    inv_sum.assign(tile, -1.0f);
    kernels::ScoreQueryTile(packed.data(), depth, k, k_stride, widths, scale, nullptr, valid.data(),
                            row_max.data(), scores.data());
    // What the op keeps of the scores before the exps overwrite them.
    raw = scores;
    for (size_t half = 0; half * lanes < count; ++half) {
      undefined |=
          kernels::QueryTileExps(nullptr, valid.data() + half * lanes,
                                 row_max.data() + half * lanes, widths[half], tile,
                                 scores.data() + half * lanes, inv_sum.data() + half * lanes)
          << (half * lanes);
    }
    for (size_t j = widths[0]; j < widths[1]; ++j) {
      std::fill_n(scores.begin() + static_cast<std::ptrdiff_t>(j * tile), lanes, 0.0f);
    }
    out.assign(count * value_dim, -1.0f);
    std::vector<const float*> weights(count);
    std::vector<float*> out_rows(count);
    for (size_t r = 0; r < count; ++r) {
      weights[r] = scores.data() + r;
      out_rows[r] = out.data() + r * value_dim;
    }
    // A query that values past its own length made non-finite is mixed
    // again over its own keys.
    const size_t mix_rows = kernels::MixTileRows();
    for (size_t from = 0; from < count; from += mix_rows) {
      const size_t size = std::min(mix_rows, count - from);
      const kernels::TileWeights sub_tile{weights.data() + from, tile, inv_sum.data() + from};
      const auto width = static_cast<size_t>(valid[from + size - 1]);
      const uint32_t flags =
          kernels::MixTile(size, sub_tile, width, v, v_stride, value_dim, out_rows.data() + from);
      mix_flags |= flags << from;
      for (size_t r = from; r < from + size; ++r) {
        if ((flags >> (r - from) & 1) != 0 && static_cast<size_t>(valid[r]) < width) {
          const kernels::TileWeights own{&weights[r], tile, &inv_sum[r]};
          kernels::MixTile(1, own, static_cast<size_t>(valid[r]), v, v_stride, value_dim,
                           &out_rows[r]);
        }
      }
    }
  }
  std::vector<float> raw;
  uint32_t mix_flags = 0;
};

// Shapes across every boundary: D off the 4x4 transpose and the vector
// width, key counts off the score steps, Dv off one and two vectors; one
// query, one half, one more than a half, a whole tile.
struct Case {
  size_t depth, keys, value_dim;
};
const Case kCases[] = {{64, 128, 64}, {13, 37, 5}, {1, 1, 1},    {7, 33, 17},
                       {64, 200, 8},  {3, 16, 31}, {100, 64, 12}};

TEST_P(AttentionTileTest, ScoresExpsAndMixesMatchSumsInDouble) {
  const size_t lanes = kernels::QueryTileLanes();
  for (const Case& c : kCases) {
    for (const size_t count : {size_t{1}, lanes, lanes + 1, 2 * lanes}) {
      SCOPED_TRACE(::testing::Message() << "queries " << count << " D " << c.depth << " M "
                                        << c.keys << " Dv " << c.value_dim);
      // K rows 3 floats apart beyond their width, V rows 5: strided rows.
      const int64_t k_stride = static_cast<int64_t>(c.depth) + 3;
      const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
      const std::vector<float> q = RandomFloats(count * c.depth, 1);
      const std::vector<float> k = RandomFloats(c.keys * static_cast<size_t>(k_stride), 2);
      const std::vector<float> v = RandomFloats(c.keys * static_cast<size_t>(v_stride), 3);
      // Rising lengths in [1, M], the last query's M.
      std::vector<int32_t> valid(count);
      std::vector<const float*> q_rows(count);
      for (size_t r = 0; r < count; ++r) {
        valid[r] = static_cast<int32_t>(1 + (c.keys - 1) * (r + 1) / count);
        q_rows[r] = q.data() + r * c.depth;
      }
      const float scale = 0.125f;
      const TileRun run(q_rows, 1, c.depth, k.data(), k_stride, v.data(), v_stride, c.value_dim,
                        valid, scale);
      // Lanes past the queries have no key, so may be flagged: never read.
      const uint32_t queries_mask = count >= 32 ? ~0u : (uint32_t{1} << count) - 1;
      EXPECT_EQ(run.undefined & queries_mask, 0u);
      EXPECT_EQ(run.mix_flags, 0u);
      for (size_t r = 0; r < count; ++r) {
        const auto own = static_cast<size_t>(valid[r]);
        const size_t width = run.widths[r < lanes ? 0 : 1];
        std::vector<double> score(own);
        double max = -INFINITY, sum = 0;
        for (size_t j = 0; j < own; ++j) {
          for (size_t d = 0; d < c.depth; ++d) {
            score[j] += double{q[r * c.depth + d]} * k[j * static_cast<size_t>(k_stride) + d];
          }
          score[j] *= scale;
          ASSERT_NEAR(run.raw[j * run.tile + r], score[j], 1e-5 * (1 + std::abs(score[j])))
              << r << " " << j;
          max = std::max(max, double{run.raw[j * run.tile + r]});
        }
        EXPECT_EQ(run.row_max[r], max) << r;
        for (size_t j = 0; j < own; ++j) sum += std::exp(score[j] - max);
        for (size_t j = 0; j < width; ++j) {
          const double want = j < own ? std::exp(score[j] - max) / sum : 0.0;
          const double got = double{run.scores[j * run.tile + r]} * run.inv_sum[r];
          if (j >= own) {
            ASSERT_EQ(run.scores[j * run.tile + r], 0.0f) << r << " " << j;
          }
          ASSERT_NEAR(got, want, 2e-6) << r << " " << j;
        }
        for (size_t col = 0; col < c.value_dim; ++col) {
          double want = 0;
          for (size_t j = 0; j < own; ++j) {
            want += std::exp(score[j] - max) / sum * v[j * static_cast<size_t>(v_stride) + col];
          }
          ASSERT_NEAR(run.out[r * c.value_dim + col], want, 1e-5 * (1 + std::abs(want)))
              << r << " " << col;
        }
      }
    }
  }
}

// Packing Q with strided columns gives its dense copy's tile, query r's
// feature f at f · 2L + r, and zeros for the lanes past the queries: rows in
// fours and left over, features in fours and left over.
TEST_P(AttentionTileTest, PacksQueriesFeatureByFeature) {
  const size_t tile = 2 * kernels::QueryTileLanes();
  for (const size_t depth : {size_t{1}, size_t{9}, size_t{64}}) {
    for (const size_t rows : {size_t{1}, size_t{3}, size_t{4}, tile - 1, tile}) {
      if (rows == 0 || rows > tile) continue;
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " depth " << depth);
      const std::vector<float> q = RandomFloats(rows * depth * 2, 5);
      std::vector<float> dense(rows * depth);
      for (size_t i = 0; i < dense.size(); ++i) dense[i] = q[2 * i];
      std::vector<const float*> strided_rows(rows), dense_rows(rows);
      for (size_t r = 0; r < rows; ++r) {
        strided_rows[r] = q.data() + 2 * r * depth;
        dense_rows[r] = dense.data() + r * depth;
      }
      std::vector<float> from_strided(tile * depth, -1.0f), from_dense(tile * depth, -2.0f);
      kernels::PackQueries(rows, strided_rows.data(), 2, depth, from_strided.data());
      kernels::PackQueries(rows, dense_rows.data(), 1, depth, from_dense.data());
      ASSERT_EQ(from_strided, from_dense);
      for (size_t r = 0; r < tile; ++r) {
        for (size_t f = 0; f < depth; ++f) {
          const float want = r < rows ? dense[r * depth + f] : 0.0f;
          ASSERT_EQ(from_dense[f * tile + r], want) << r << " " << f;
        }
      }
    }
  }
}

// A query's scores, max, exps, sum and output are the same bits alone in a
// tile's first lane as in the last lane of a full tile beside others, where
// its sub-tile mixes over a longer width of zero weights.
TEST_P(AttentionTileTest, AQueryGetsTheSameBitsInAnyTileHalfOrLane) {
  const size_t tile = 2 * kernels::QueryTileLanes();
  const size_t depth = 64, keys = 96, value_dim = 40;
  const std::vector<float> q = RandomFloats(tile * depth, 6);
  const std::vector<float> k = RandomFloats(keys * depth, 7);
  const std::vector<float> v = RandomFloats(keys * value_dim, 8);
  std::vector<int32_t> valid(tile);
  std::vector<const float*> q_rows(tile);
  for (size_t r = 0; r < tile; ++r) {
    valid[r] = static_cast<int32_t>(keys * (r + 1) / tile);
    q_rows[r] = q.data() + r * depth;
  }
  // The tile's last query is as long as the one before it: its sub-tile is
  // as wide as itself only where MixTileRows() divides the tile; the query
  // before it mixes over its own width in either case.
  const size_t mine = tile - 2;
  const TileRun full(q_rows, 1, depth, k.data(), depth, v.data(), value_dim, value_dim, valid,
                     0.5f);
  const TileRun alone({q_rows[mine]}, 1, depth, k.data(), depth, v.data(), value_dim, value_dim,
                      {valid[mine]}, 0.5f);
  const auto own = static_cast<size_t>(valid[mine]);
  for (size_t j = 0; j < own; ++j) {
    ASSERT_EQ(std::memcmp(&full.raw[j * full.tile + mine], &alone.raw[j * alone.tile], 4), 0) << j;
    ASSERT_EQ(std::memcmp(&full.scores[j * full.tile + mine], &alone.scores[j * alone.tile], 4), 0)
        << j;
  }
  EXPECT_EQ(full.row_max[mine], alone.row_max[0]);
  EXPECT_EQ(full.inv_sum[mine], alone.inv_sum[0]);
  EXPECT_EQ(
      std::memcmp(full.out.data() + mine * value_dim, alone.out.data(), value_dim * sizeof(float)),
      0);
}

// Lanes with starts (a sliding window's rows): each lane's max, exps and
// sum run over its own keys [start, valid) alone, in double's values, with
// exact zeros before its start; a NaN score before a lane's start does not
// reach it, nor flag it.
TEST_P(AttentionTileTest, StartsKeepEachLaneToItsOwnKeys) {
  const size_t lanes = kernels::QueryTileLanes(), tile = 2 * lanes;
  const size_t depth = 24, keys = 3 * tile;
  const std::vector<float> q = RandomFloats(tile * depth, 21);
  std::vector<float> k = RandomFloats(keys * depth, 22, 2.0f);
  k[0] = NAN;  // key 0: before every lane's start but lane 0's
  std::vector<const float*> q_rows(tile);
  std::vector<int32_t> starts(tile), valid(tile);
  for (size_t r = 0; r < tile; ++r) {
    q_rows[r] = q.data() + r * depth;
    starts[r] = static_cast<int32_t>(r == 0 ? 1 : r);  // lane 0 past key 0 too
    valid[r] = static_cast<int32_t>(r + 1 + tile + r % 3);
  }
  std::vector<float> packed(tile * depth), row_max(tile), inv_sum(tile);
  kernels::PackQueries(tile, q_rows.data(), 1, depth, packed.data());
  const size_t widths[2] = {
      static_cast<size_t>(*std::max_element(valid.begin(), valid.begin() + lanes)),
      static_cast<size_t>(*std::max_element(valid.begin(), valid.end()))};
  std::vector<float> scores(tile * widths[1], -1.0f);
  const float scale = 0.25f;
  kernels::ScoreQueryTile(packed.data(), depth, k.data(), depth, widths, scale, starts.data(),
                          valid.data(), row_max.data(), scores.data());
  uint32_t undefined = 0;
  for (size_t half = 0; half < 2; ++half) {
    undefined |= kernels::QueryTileExps(starts.data() + half * lanes, valid.data() + half * lanes,
                                        row_max.data() + half * lanes, widths[half], tile,
                                        scores.data() + half * lanes, inv_sum.data() + half * lanes)
                 << (half * lanes);
  }
  EXPECT_EQ(undefined, 0u);
  for (size_t r = 0; r < tile; ++r) {
    const auto start = static_cast<size_t>(starts[r]), own = static_cast<size_t>(valid[r]);
    std::vector<double> score(own);
    double max = -INFINITY, sum = 0;
    for (size_t j = start; j < own; ++j) {
      for (size_t d = 0; d < depth; ++d) score[j] += double{q[r * depth + d]} * k[j * depth + d];
      score[j] *= scale;
      max = std::max(max, score[j]);
    }
    EXPECT_NEAR(row_max[r], max, 1e-5 * (1 + std::abs(max))) << r;
    for (size_t j = start; j < own; ++j) sum += std::exp(score[j] - max);
    for (size_t j = 0; j < widths[r < lanes ? 0 : 1]; ++j) {
      const float e = scores[j * tile + r];
      if (j < start || j >= own) {
        ASSERT_EQ(e, 0.0f) << r << " " << j;
      } else {
        ASSERT_NEAR(double{e} * inv_sum[r], std::exp(score[j] - max) / sum, 2e-6) << r << " " << j;
      }
    }
  }
}

// The tile's flags name the queries without a softmax (a NaN or +Inf among
// their valid scores, or only -Inf) and only those, a -Inf score among
// finite ones weighs 0, and a NaN or Inf in a key past a query's length
// does not reach it.
TEST_P(AttentionTileTest, FlagsExactlyTheQueriesWithoutASoftmax) {
  const size_t depth = 5, keys = 9, value_dim = 3;
  std::vector<float> k = RandomFloats(keys * depth, 15);
  for (size_t j = 0; j < keys; ++j) k[j * depth] = 1.0f + static_cast<float>(j);  // feature 0 > 0
  const std::vector<float> v = RandomFloats(keys * value_dim, 16);
  struct Special {
    const char* what;
    float feature0;
    bool undefined;
  };
  const Special specials[] = {{"NaN query", std::nanf(""), true},
                              {"+Inf query: +Inf scores", kInf, true},
                              {"-Inf query: only -Inf scores", -kInf, true},
                              {"finite query", 0.5f, false}};
  for (const Special& special : specials) {
    SCOPED_TRACE(special.what);
    std::vector<float> q = RandomFloats(depth, 17);
    q[0] = special.feature0;
    const TileRun run({q.data()}, 1, depth, k.data(), depth, v.data(), value_dim, value_dim,
                      {static_cast<int32_t>(keys)}, 1.0f);
    EXPECT_EQ(run.undefined & 1u, special.undefined ? 1u : 0u);
  }
  {
    // One -Inf score among finite ones weighs 0: a softmax all the same.
    SCOPED_TRACE("one -Inf score");
    std::vector<float> q = RandomFloats(depth, 20), minus_inf_key = k;
    q[1] = 1.0f;
    minus_inf_key[3 * depth + 1] = -kInf;
    const TileRun run({q.data()}, 1, depth, minus_inf_key.data(), depth, v.data(), value_dim,
                      value_dim, {static_cast<int32_t>(keys)}, 1.0f);
    EXPECT_EQ(run.undefined & 1u, 0u);
    EXPECT_EQ(run.scores[3 * run.tile], 0.0f);
    for (size_t c = 0; c < value_dim; ++c) EXPECT_TRUE(std::isfinite(run.out[c])) << c;
  }
  // Beside finite queries (one in each half where there are two): only the
  // special one's bit.
  const size_t tile = 2 * kernels::QueryTileLanes();
  const std::vector<float> q = RandomFloats(tile * depth, 18);
  std::vector<const float*> q_rows(tile);
  for (size_t r = 0; r < tile; ++r) q_rows[r] = q.data() + r * depth;
  std::vector<float> nan_query(q.begin(), q.begin() + depth);
  nan_query[2] = std::nanf("");
  const size_t at = tile / 2;
  q_rows[at] = nan_query.data();
  const TileRun mixed(q_rows, 1, depth, k.data(), depth, v.data(), value_dim, value_dim,
                      std::vector<int32_t>(tile, static_cast<int32_t>(keys)), 1.0f);
  EXPECT_EQ(mixed.undefined, uint32_t{1} << at);
  // A NaN key and an Inf value past the first query's length: not its.
  std::vector<float> bad_k = k, bad_v = v;
  bad_k[5 * depth + 1] = std::nanf("");
  bad_v[6 * value_dim] = kInf;
  std::vector<int32_t> valid(tile, static_cast<int32_t>(keys));
  valid[0] = 4;
  const TileRun past(q_rows, 1, depth, bad_k.data(), depth, bad_v.data(), value_dim, value_dim,
                     valid, 1.0f);
  EXPECT_EQ(past.undefined & 1u, 0u);
  EXPECT_TRUE(std::isfinite(past.row_max[0]));
  for (size_t c = 0; c < value_dim; ++c) EXPECT_TRUE(std::isfinite(past.out[c])) << c;
  if (tile > 1) {
    EXPECT_NE(past.mix_flags & 1u, 0u);  // its sub-tile summed the Inf
  }
}

// MixTile's sums against sums in double, with the weights `step` floats
// apart and each row's output scaled, and MixPackedTile over V packed in
// panels of any width, from key 0 or key 1, gives MixTile's bits and flags,
// with NaN and Inf in the values among them.
TEST_P(AttentionTileTest, MixPackedTileGivesMixTileBitsForAnyPanelWidth) {
  const size_t step = 3;
  for (const Case& c : kCases) {
    for (const size_t rows : {size_t{1}, size_t{3}, kernels::MixTileRows()}) {
      const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
      std::vector<float> v = RandomFloats(c.keys * static_cast<size_t>(v_stride), 13);
      // Row r's weight of key j at w[r · M · step + j · step].
      const std::vector<float> w = RandomFloats(rows * c.keys * step, 14);
      const std::vector<float> scales = RandomFloats(rows, 19);
      std::vector<const float*> w_rows(rows);
      std::vector<float*> want_rows(rows), got_rows(rows);
      std::vector<float> want(rows * c.value_dim), got(want.size());
      for (size_t r = 0; r < rows; ++r) {
        w_rows[r] = w.data() + r * c.keys * step;
        want_rows[r] = want.data() + r * c.value_dim, got_rows[r] = got.data() + r * c.value_dim;
      }
      const kernels::TileWeights weights{w_rows.data(), step, scales.data()};
      SCOPED_TRACE(::testing::Message()
                   << "rows " << rows << " M " << c.keys << " Dv " << c.value_dim);
      EXPECT_EQ(kernels::MixTile(rows, weights, c.keys, v.data(), v_stride, c.value_dim,
                                 want_rows.data()),
                0u);
      for (size_t r = 0; r < rows; ++r) {
        for (size_t col = 0; col < c.value_dim; ++col) {
          double sum = 0;
          for (size_t j = 0; j < c.keys; ++j) {
            sum += double{w_rows[r][j * step]} * v[j * static_cast<size_t>(v_stride) + col];
          }
          const double scaled = sum * scales[r];
          ASSERT_NEAR(want_rows[r][col], scaled, 1e-5 * (1 + std::abs(scaled))) << r << " " << col;
        }
      }
      // A NaN in the last column (the last panel) of key 2, an Inf in the
      // first column (the first panel) of key 1.
      if (c.keys > 2) v[2 * static_cast<size_t>(v_stride) + c.value_dim - 1] = std::nanf("");
      if (c.keys > 2) v[static_cast<size_t>(v_stride)] = kInf;
      for (const size_t panel : {size_t{1}, size_t{3}, size_t{16}, size_t{32}, c.value_dim,
                                 kernels::ValuePanelColumns()}) {
        SCOPED_TRACE(::testing::Message() << "panels of " << panel);
        std::vector<float> packed(c.keys * c.value_dim);
        kernels::PackValues(v.data(), v_stride, 1, c.keys, c.value_dim, panel, packed.data());
        // Over all keys (key 2's NaN reaches every row) and over the first
        // two (key 1's Inf, in another panel where the columns are many).
        for (const size_t width : {c.keys, std::min<size_t>(2, c.keys)}) {
          std::fill(got.begin(), got.end(), -1.0f);
          const uint32_t want_flags = kernels::MixTile(rows, weights, width, v.data(), v_stride,
                                                       c.value_dim, want_rows.data());
          EXPECT_EQ(kernels::MixPackedTile(rows, weights, width, packed.data(), c.keys, 0,
                                           c.value_dim, panel, got_rows.data()),
                    want_flags)
              << width;
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << width;
        }
        // From key 1 on: the panels read from their second key, as MixTile
        // from V's second row with each row's weights a step on.
        if (c.keys < 2) continue;
        std::vector<const float*> later(w_rows);
        for (const float*& row : later) row += step;
        const kernels::TileWeights from_second{later.data(), step, scales.data()};
        const uint32_t want_flags =
            kernels::MixTile(rows, from_second, c.keys - 1, v.data() + v_stride, v_stride,
                             c.value_dim, want_rows.data());
        EXPECT_EQ(kernels::MixPackedTile(rows, from_second, c.keys - 1, packed.data(), c.keys, 1,
                                         c.value_dim, panel, got_rows.data()),
                  want_flags);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
      }
    }
  }
}

// MixTile's flags: the rows whose outputs hold a NaN or Inf, and only those.
TEST_P(AttentionTileTest, FlagsTheRowsMadeNonFinite) {
  const size_t rows = 5, keys = 10, value_dim = 19;  // Dv: two vectors and a tail, or more
  std::vector<float> v = RandomFloats(keys * value_dim, 10);
  std::vector<float> w = RandomFloats(rows * keys, 11);
  w[1 * keys + 3] = std::numeric_limits<float>::quiet_NaN();
  w[4 * keys + 2] = kInf;
  std::vector<float> out(rows * value_dim);
  const float* w_rows[rows];
  float* out_rows[rows];
  for (size_t r = 0; r < rows; ++r) {
    w_rows[r] = w.data() + r * keys, out_rows[r] = out.data() + r * value_dim;
  }
  const kernels::TileWeights weights{w_rows, 1, nullptr};
  EXPECT_EQ(kernels::MixTile(rows, weights, keys, v.data(), value_dim, value_dim, out_rows),
            0b10010u);
  for (size_t r : {0, 2, 3}) {
    for (size_t c = 0; c < value_dim; ++c) EXPECT_TRUE(std::isfinite(out_rows[r][c])) << r;
  }
  // An Inf in V's last column at key 7 reaches every row that sums key 7.
  v[7 * value_dim + value_dim - 1] = kInf;
  EXPECT_EQ(kernels::MixTile(rows, weights, keys, v.data(), value_dim, value_dim, out_rows), 0x1Fu);
  EXPECT_EQ(kernels::MixTile(rows, weights, 7, v.data(), value_dim, value_dim, out_rows), 0b10010u);
}

}  // namespace
}  // namespace attnscore::test
