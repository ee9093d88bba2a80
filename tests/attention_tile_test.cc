// The tile kernels (engine/kernels/attention_tile.h) on every target: packed
// keys score as sums in double do, a row's bits do not depend on the tile
// it shares, MixTile flags exactly the rows it made non-finite, and
// MixPackedTile gives MixTile's bits for any panel width.
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

// Shapes across every boundary: D off the 4x4 transpose and the vector
// width, key counts off the panels and the 32-key padding, Dv off one and
// two vectors, one row to a full tile.
struct Case {
  size_t rows, depth, keys, value_dim;
};
const Case kCases[] = {{6, 64, 128, 64}, {6, 13, 37, 5}, {1, 1, 1, 1},    {4, 7, 33, 17},
                       {5, 64, 200, 8},  {2, 3, 16, 31}, {3, 100, 64, 12}};

TEST_P(AttentionTileTest, ScoresAndMixesMatchSumsInDouble) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " D " << c.depth << " M " << c.keys
                                      << " Dv " << c.value_dim);
    // K rows 3 floats apart beyond their width, V rows 5: strided rows.
    const int64_t k_stride = static_cast<int64_t>(c.depth) + 3;
    const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
    const std::vector<float> q = RandomFloats(c.rows * c.depth, 1);
    const std::vector<float> k = RandomFloats(c.keys * static_cast<size_t>(k_stride), 2);
    const std::vector<float> v = RandomFloats(c.keys * static_cast<size_t>(v_stride), 3);
    const std::vector<float> w = RandomFloats(c.rows * c.keys, 4);
    std::vector<float> packed(kernels::PackedKeysFloats(c.keys, c.depth), -1.0f);
    kernels::PackKeys(k.data(), k_stride, 1, c.keys, c.depth, packed.data());

    const size_t padded = kernels::PaddedTileKeys(c.keys);
    std::vector<float> scores(c.rows * padded, -1.0f), out(c.rows * c.value_dim, -1.0f);
    std::vector<const float*> q_rows(c.rows), w_rows(c.rows);
    std::vector<float*> score_rows(c.rows), out_rows(c.rows);
    for (size_t r = 0; r < c.rows; ++r) {
      q_rows[r] = q.data() + r * c.depth;
      w_rows[r] = w.data() + r * c.keys;
      score_rows[r] = scores.data() + r * padded;
      out_rows[r] = out.data() + r * c.value_dim;
    }
    const float scale = 0.125f;
    kernels::ScoreTile(c.rows, q_rows.data(), c.depth, packed.data(), c.keys, scale,
                       score_rows.data());
    EXPECT_EQ(kernels::MixTile(c.rows, w_rows.data(), c.keys, v.data(), v_stride, c.value_dim,
                               out_rows.data()),
              0u);
    for (size_t r = 0; r < c.rows; ++r) {
      for (size_t j = 0; j < c.keys; ++j) {
        double want = 0;
        for (size_t d = 0; d < c.depth; ++d) {
          want += double{q[r * c.depth + d]} * k[j * static_cast<size_t>(k_stride) + d];
        }
        want *= scale;
        ASSERT_NEAR(score_rows[r][j], want, 1e-5 * (1 + std::abs(want))) << r << " " << j;
      }
      for (size_t col = 0; col < c.value_dim; ++col) {
        double want = 0;
        for (size_t j = 0; j < c.keys; ++j) {
          want += double{w[r * c.keys + j]} * v[j * static_cast<size_t>(v_stride) + col];
        }
        ASSERT_NEAR(out_rows[r][col], want, 1e-5 * (1 + std::abs(want))) << r << " " << col;
      }
    }
  }
}

// Packing K with strided columns gives the panels of its dense copy, and the
// keys past `keys` are zeros: panels partial and whole, with features in
// fours and left over after them.
TEST_P(AttentionTileTest, PacksStridedColumnsAsDenseOnes) {
  const std::pair<size_t, size_t> shapes[] = {{21, 9}, {40, 37}, {128, 64}, {16, 16}, {3, 20}};
  for (const auto& [keys, depth] : shapes) {
    SCOPED_TRACE(::testing::Message() << "keys " << keys << " depth " << depth);
    const std::vector<float> k = RandomFloats(keys * depth * 2, 5);
    std::vector<float> dense(keys * depth);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = k[2 * i];
    std::vector<float> from_strided(kernels::PackedKeysFloats(keys, depth), -1.0f);
    std::vector<float> from_dense(from_strided.size(), -2.0f);
    kernels::PackKeys(k.data(), 2 * static_cast<int64_t>(depth), 2, keys, depth,
                      from_strided.data());
    kernels::PackKeys(dense.data(), static_cast<int64_t>(depth), 1, keys, depth, from_dense.data());
    ASSERT_EQ(from_strided, from_dense);
    const size_t padded = kernels::PaddedTileKeys(keys);
    ASSERT_EQ(from_dense.size(), padded * depth);
    // Key j, feature f: panel j / 16, float f * 16 + j % 16.
    for (size_t j = 0; j < padded; ++j) {
      for (size_t f = 0; f < depth; ++f) {
        const float want = j < keys ? dense[j * depth + f] : 0.0f;
        ASSERT_EQ(from_dense[j / 16 * 16 * depth + f * 16 + j % 16], want) << j << " " << f;
      }
    }
  }
}

// Packing V with strided columns gives the panels of its dense copy, each
// panel its columns of every key, key after key, the last one narrower.
TEST_P(AttentionTileTest, PacksValuesInPanelsOfColumns) {
  const size_t keys = 7, value_dim = 11, panel = 4;
  const std::vector<float> v = RandomFloats(keys * value_dim * 3, 12);
  std::vector<float> dense(keys * value_dim);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = v[3 * i];
  std::vector<float> from_strided(keys * value_dim, -1.0f), from_dense(keys * value_dim, -2.0f);
  kernels::PackValues(v.data(), 3 * static_cast<int64_t>(value_dim), 3, keys, value_dim, panel,
                      from_strided.data());
  kernels::PackValues(dense.data(), static_cast<int64_t>(value_dim), 1, keys, value_dim, panel,
                      from_dense.data());
  ASSERT_EQ(from_strided, from_dense);
  // Column c of key j: panel c / 4 starts at c / 4 * 4 * keys, its keys
  // min(4, 11 - c / 4 * 4) floats apart.
  for (size_t j = 0; j < keys; ++j) {
    for (size_t c = 0; c < value_dim; ++c) {
      const size_t first = c / panel * panel, width = std::min(panel, value_dim - first);
      ASSERT_EQ(from_dense[first * keys + j * width + c - first], dense[j * value_dim + c])
          << j << " " << c;
    }
  }
}

// MixPackedTile over V packed in panels of any width gives MixTile's bits
// and flags, with NaN and Inf in the values among them.
TEST_P(AttentionTileTest, MixPackedTileGivesMixTileBitsForAnyPanelWidth) {
  for (const Case& c : kCases) {
    const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
    std::vector<float> v = RandomFloats(c.keys * static_cast<size_t>(v_stride), 13);
    const std::vector<float> w = RandomFloats(c.rows * c.keys, 14);
    // A NaN in the last column (the last panel) of key 2, an Inf in the
    // first column (the first panel) of key 1.
    if (c.keys > 2) v[2 * static_cast<size_t>(v_stride) + c.value_dim - 1] = std::nanf("");
    if (c.keys > 2) v[static_cast<size_t>(v_stride)] = std::numeric_limits<float>::infinity();
    std::vector<const float*> w_rows(c.rows);
    std::vector<float*> want_rows(c.rows), got_rows(c.rows);
    std::vector<float> want(c.rows * c.value_dim), got(want.size());
    for (size_t r = 0; r < c.rows; ++r) {
      w_rows[r] = w.data() + r * c.keys;
      want_rows[r] = want.data() + r * c.value_dim, got_rows[r] = got.data() + r * c.value_dim;
    }
    for (const size_t panel : {size_t{1}, size_t{3}, size_t{16}, size_t{32}, c.value_dim,
                               kernels::ValuePanelColumns()}) {
      SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " M " << c.keys << " Dv "
                                        << c.value_dim << " panels of " << panel);
      std::vector<float> packed(c.keys * c.value_dim);
      kernels::PackValues(v.data(), v_stride, 1, c.keys, c.value_dim, panel, packed.data());
      // Over all keys (key 2's NaN reaches every row) and over the first
      // two (key 1's Inf, in another panel where the columns are many).
      for (const size_t width : {c.keys, std::min<size_t>(2, c.keys)}) {
        std::fill(got.begin(), got.end(), -1.0f);
        const uint32_t want_flags = kernels::MixTile(c.rows, w_rows.data(), width, v.data(),
                                                     v_stride, c.value_dim, want_rows.data());
        EXPECT_EQ(kernels::MixPackedTile(c.rows, w_rows.data(), width, packed.data(), c.keys,
                                         c.value_dim, panel, got_rows.data()),
                  want_flags)
            << width;
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << width;
      }
    }
  }
}

// A row's scores and output are the same bits alone as beside five others,
// and its output over a longer width of zero weights is the same bits too.
TEST_P(AttentionTileTest, ARowGetsTheSameBitsInAnyTile) {
  const size_t depth = 64, keys = 96, value_dim = 40, padded = kernels::PaddedTileKeys(keys);
  const std::vector<float> q = RandomFloats(6 * depth, 6);
  const std::vector<float> k = RandomFloats(keys * depth, 7);
  const std::vector<float> v = RandomFloats(keys * value_dim, 8);
  std::vector<float> w = RandomFloats(6 * keys, 9);
  for (size_t j = 50; j < keys; ++j) w[2 * keys + j] = 0.0f;  // row 2 ends at key 50
  std::vector<float> packed(kernels::PackedKeysFloats(keys, depth));
  kernels::PackKeys(k.data(), depth, 1, keys, depth, packed.data());
  std::vector<float> scores(6 * padded), out(6 * value_dim);
  const float* q_rows[6];
  const float* w_rows[6];
  float* score_rows[6];
  float* out_rows[6];
  for (size_t r = 0; r < 6; ++r) {
    q_rows[r] = q.data() + r * depth, w_rows[r] = w.data() + r * keys;
    score_rows[r] = scores.data() + r * padded, out_rows[r] = out.data() + r * value_dim;
  }
  kernels::ScoreTile(6, q_rows, depth, packed.data(), keys, 0.5f, score_rows);
  kernels::MixTile(6, w_rows, keys, v.data(), value_dim, value_dim, out_rows);
  std::vector<float> alone_scores(padded), alone_out(value_dim);
  float* alone_score_row[1] = {alone_scores.data()};
  float* alone_out_row[1] = {alone_out.data()};
  kernels::ScoreTile(1, &q_rows[2], depth, packed.data(), keys, 0.5f, alone_score_row);
  EXPECT_EQ(std::memcmp(alone_scores.data(), score_rows[2], keys * sizeof(float)), 0);
  kernels::MixTile(1, &w_rows[2], 50, v.data(), value_dim, value_dim, alone_out_row);
  EXPECT_EQ(std::memcmp(alone_out.data(), out_rows[2], value_dim * sizeof(float)), 0);
}

// MixTile's flags: the rows whose outputs hold a NaN or Inf, and only those.
TEST_P(AttentionTileTest, FlagsTheRowsMadeNonFinite) {
  const size_t rows = 5, keys = 10, value_dim = 19;  // Dv: two vectors and a tail, or more
  std::vector<float> v = RandomFloats(keys * value_dim, 10);
  std::vector<float> w = RandomFloats(rows * keys, 11);
  w[1 * keys + 3] = std::numeric_limits<float>::quiet_NaN();
  w[4 * keys + 2] = std::numeric_limits<float>::infinity();
  std::vector<float> out(rows * value_dim);
  const float* w_rows[rows];
  float* out_rows[rows];
  for (size_t r = 0; r < rows; ++r) {
    w_rows[r] = w.data() + r * keys, out_rows[r] = out.data() + r * value_dim;
  }
  EXPECT_EQ(kernels::MixTile(rows, w_rows, keys, v.data(), value_dim, value_dim, out_rows),
            0b10010u);
  for (size_t r : {0, 2, 3}) {
    for (size_t c = 0; c < value_dim; ++c) EXPECT_TRUE(std::isfinite(out_rows[r][c])) << r;
  }
  // An Inf in V's last column at key 7 reaches every row that sums key 7.
  v[7 * value_dim + value_dim - 1] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(kernels::MixTile(rows, w_rows, keys, v.data(), value_dim, value_dim, out_rows), 0x1Fu);
  EXPECT_EQ(kernels::MixTile(rows, w_rows, 7, v.data(), value_dim, value_dim, out_rows), 0b10010u);
}

}  // namespace
}  // namespace attnscore::test
