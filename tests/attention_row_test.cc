// The row kernels (engine/kernels/attention_row.h) on every target: rows
// that share their keys give each row the bits it gets alone, both kernels
// agree with sums in double, a score has the bits of its order of sums
// (where the target has FMA), and AddMixes over the keys cut into ranges
// gives MixRows' bits.
#include "kernels/attention_row.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class AttentionRowTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(AttentionRowTest);

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Shapes that cross every boundary: D and Dv off the vector width and off
// the mix's strips (24, 32 and 64 columns at AVX2; 48, 64 and 128 at
// AVX-512), key counts off the score's four-key groups and the mix's 64-key
// passes, a row with no keys, rows of unequal lengths, every row count from
// one to eight (tiles of four, two and one row), and D of one to four whole
// vectors at AVX-512 (16, 32, 48, 64: four keys' rows held in registers).
struct Case {
  size_t depth, value_dim;
  std::vector<size_t> keys;  // per row
};

const Case kCases[] = {
    {64, 64, {256, 256, 256, 256}},
    {64, 64, {131, 200, 1, 0, 64, 65, 3, 130}},
    {13, 37, {7, 5}},
    {100, 129, {300, 299, 2}},
    {1, 1, {9}},
    {64, 24, {5, 300, 7, 299, 64}},
    {64, 48, {130, 128, 129, 127, 2, 3}},
    {48, 64, {9, 1, 6, 33}},
    {32, 128, {70, 70, 70}},
    {16, 200, {3, 129, 128, 1, 0, 2, 77, 64}},
    {8, 16, {65, 66, 67, 68, 69, 70, 71}},
};

TEST_P(AttentionRowTest, SharedRowsGiveEachRowItsOwnBits) {
  for (const Case& c : kCases) {
    const size_t rows = c.keys.size();
    size_t longest = 0;
    for (size_t n : c.keys) longest = std::max(longest, n);
    const int64_t k_stride = static_cast<int64_t>(c.depth) + 3;  // rows apart in memory
    const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
    const std::vector<float> q = RandomFloats(rows * c.depth, 1);
    const std::vector<float> k = RandomFloats(longest * static_cast<size_t>(k_stride) + 1, 2);
    const std::vector<float> v = RandomFloats(longest * static_cast<size_t>(v_stride) + 1, 3);
    const std::vector<float> w = RandomFloats(rows * longest + 1, 4);

    std::vector<float> scores(rows * longest + 1, -1.0f), mixed(rows * c.value_dim, -1.0f);
    std::vector<const float*> q_rows(rows), w_rows(rows);
    std::vector<float*> score_rows(rows), out_rows(rows);
    for (size_t r = 0; r < rows; ++r) {
      q_rows[r] = q.data() + r * c.depth;
      w_rows[r] = w.data() + r * longest;
      score_rows[r] = scores.data() + r * longest;
      out_rows[r] = mixed.data() + r * c.value_dim;
    }
    const float scale = 0.125f;
    kernels::ScoreRows(rows, q_rows.data(), c.depth, k.data(), k_stride, c.keys.data(), scale,
                       score_rows.data());
    kernels::MixRows(rows, w_rows.data(), c.keys.data(), v.data(), v_stride, c.value_dim,
                     out_rows.data());

    for (size_t r = 0; r < rows; ++r) {
      const size_t n = c.keys[r];
      std::vector<float> alone_scores(n + 1), alone_out(c.value_dim);
      kernels::ScoreRow(q_rows[r], c.depth, k.data(), k_stride, n, scale, alone_scores.data());
      kernels::MixRow(w_rows[r], n, v.data(), v_stride, c.value_dim, alone_out.data());
      EXPECT_TRUE(SameBits(score_rows[r], alone_scores.data(), n)) << "row " << r;
      EXPECT_TRUE(SameBits(out_rows[r], alone_out.data(), c.value_dim)) << "row " << r;

      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (size_t d = 0; d < c.depth; ++d) {
          dot += static_cast<double>(q_rows[r][d]) * k[j * static_cast<size_t>(k_stride) + d];
        }
        EXPECT_NEAR(score_rows[r][j], scale * dot, 1e-5 * (1.0 + std::sqrt(c.depth)))
            << "row " << r << " key " << j;
      }
      for (size_t col = 0; col < c.value_dim; ++col) {
        double sum = 0;
        for (size_t j = 0; j < n; ++j) {
          sum += static_cast<double>(w_rows[r][j]) * v[j * static_cast<size_t>(v_stride) + col];
        }
        EXPECT_NEAR(out_rows[r][col], sum, 1e-5 * (1.0 + std::sqrt(n))) << "row " << r;
      }
      // Scores past a row's own keys are not written.
      if (n < longest) {
        EXPECT_EQ(score_rows[r][n], -1.0f) << "row " << r;
      }
    }
  }
}

// A score's arithmetic on the targets with FMA, where D is whole vectors of
// L lanes, in scalar: per lane l, vector v's product q·k into one of two
// fused sums as v is even or odd, the two added; the lanes added in 128-bit
// blocks, (l0 + l2) + (l1 + l3); the blocks halves by halves; then the
// scale. One row alone and rows sharing their keys (the AVX-512 kernel that
// holds four keys' rows in registers) both give exactly these bits.
float ScoreInOrder(const float* q, const float* k, size_t depth, size_t lanes, float scale) {
  std::vector<float> blocks;
  for (size_t block = 0; block < lanes / 4; ++block) {
    float lane_sums[4];
    for (size_t l = 0; l < 4; ++l) {
      float even = 0.0f, odd = 0.0f;
      for (size_t v = 0; v * lanes < depth; ++v) {
        const size_t at = v * lanes + block * 4 + l;
        float& sum = v % 2 == 0 ? even : odd;
        sum = std::fma(q[at], k[at], sum);
      }
      lane_sums[l] = even + odd;
    }
    blocks.push_back((lane_sums[0] + lane_sums[2]) + (lane_sums[1] + lane_sums[3]));
  }
  for (size_t half = blocks.size() / 2; half >= 1; half /= 2) {
    for (size_t b = 0; b < half; ++b) blocks[b] = blocks[b] + blocks[b + half];
  }
  return blocks[0] * scale;
}

TEST_P(AttentionRowTest, ScoresKeepTheirOrderOfSums) {
  const int64_t target = GetParam();
  if (target != HWY_AVX3 && target != HWY_AVX2) GTEST_SKIP() << "a target without FMA";
  const size_t lanes = target == HWY_AVX3 ? 16 : 8;
  // A row alone goes sixteen keys at a time at AVX-512: whole groups and a
  // part, a whole group, a part alone.
  for (size_t vectors = 1; vectors <= 5; ++vectors) {
    for (size_t keys : {size_t{37}, size_t{16}, size_t{3}}) {
      const size_t depth = vectors * lanes, rows = 3;
      const int64_t k_stride = static_cast<int64_t>(depth) + 16;
      const std::vector<float> q = RandomFloats(rows * depth, 5);
      const std::vector<float> k = RandomFloats(keys * static_cast<size_t>(k_stride), 6);
      const float scale = 0.3f;
      std::vector<float> alone(keys), shared(rows * keys);
      kernels::ScoreRow(q.data(), depth, k.data(), k_stride, keys, scale, alone.data());
      const float* q_rows[rows] = {q.data(), q.data() + depth, q.data() + 2 * depth};
      float* score_rows[rows] = {shared.data(), shared.data() + keys, shared.data() + 2 * keys};
      const size_t row_keys[rows] = {keys, keys - 2, 1};
      kernels::ScoreRows(rows, q_rows, depth, k.data(), k_stride, row_keys, scale, score_rows);
      for (size_t j = 0; j < keys; ++j) {
        const float* key = k.data() + static_cast<int64_t>(j) * k_stride;
        const float expected = ScoreInOrder(q.data(), key, depth, lanes, scale);
        EXPECT_TRUE(SameBits(&alone[j], &expected, 1))
            << "D " << depth << ", M " << keys << ", key " << j;
        for (size_t r = 0; r < rows; ++r) {
          if (j >= row_keys[r]) continue;
          const float in_row = ScoreInOrder(q_rows[r], key, depth, lanes, scale);
          EXPECT_TRUE(SameBits(score_rows[r] + j, &in_row, 1))
              << "D " << depth << ", M " << keys << ", row " << r << ", key " << j;
        }
      }
    }
  }
}

// AddMixes over consecutive ranges of the keys, each call going on from the
// sums the last one left, gives every row MixRows' bits over all its keys;
// a row with no keys in a range is left as it is.
TEST_P(AttentionRowTest, AddMixesOverRangesOfKeysGivesMixRowsBits) {
  for (const Case& c : kCases) {
    for (size_t range : {size_t{1}, size_t{5}, size_t{64}, size_t{100}}) {
      const size_t rows = c.keys.size();
      size_t longest = 0;
      for (size_t n : c.keys) longest = std::max(longest, n);
      const int64_t v_stride = static_cast<int64_t>(c.value_dim) + 5;
      const std::vector<float> v = RandomFloats(longest * static_cast<size_t>(v_stride) + 1, 3);
      const std::vector<float> w = RandomFloats(rows * longest + 1, 4);
      std::vector<float> whole(rows * c.value_dim, -1.0f), ranged(rows * c.value_dim, 0.0f);
      std::vector<const float*> w_rows(rows), w_range(rows);
      std::vector<float*> whole_rows(rows), ranged_rows(rows);
      for (size_t r = 0; r < rows; ++r) {
        w_rows[r] = w.data() + r * longest;
        whole_rows[r] = whole.data() + r * c.value_dim;
        ranged_rows[r] = ranged.data() + r * c.value_dim;
      }
      kernels::MixRows(rows, w_rows.data(), c.keys.data(), v.data(), v_stride, c.value_dim,
                       whole_rows.data());
      std::vector<size_t> in_range(rows);
      for (size_t first = 0; first < longest; first += range) {
        for (size_t r = 0; r < rows; ++r) {
          in_range[r] = c.keys[r] > first ? std::min(range, c.keys[r] - first) : 0;
          w_range[r] = w_rows[r] + first;
        }
        kernels::AddMixes(rows, w_range.data(), in_range.data(),
                          v.data() + static_cast<int64_t>(first) * v_stride, v_stride, c.value_dim,
                          ranged_rows.data());
      }
      for (size_t r = 0; r < rows; ++r) {
        EXPECT_TRUE(SameBits(whole_rows[r], ranged_rows[r], c.value_dim))
            << "row " << r << " of " << c.keys[r] << " keys, ranges of " << range;
      }
    }
  }
}

// `values` copied to a buffer of their own that starts `lanes_off` floats
// past a 64-byte line and ends where they end (so that a read past their
// end leaves the allocation, which ASan reports: posix_memalign takes the
// exact size, where aligned_alloc's is a multiple of the alignment).
class OffLine {
 public:
  OffLine(const std::vector<float>& values, size_t lanes_off) {
    void* base = nullptr;
    if (posix_memalign(&base, 64, (lanes_off + values.size()) * sizeof(float)) != 0) {
      throw std::bad_alloc();
    }
    base_ = static_cast<float*>(base);
    std::copy(values.begin(), values.end(), base_ + lanes_off);
    data_ = base_ + lanes_off;
  }
  ~OffLine() { std::free(base_); }
  OffLine(const OffLine&) = delete;
  OffLine& operator=(const OffLine&) = delete;
  const float* data() const { return data_; }

 private:
  float* base_ = nullptr;
  float* data_ = nullptr;
};

// Rows back to back that start off a 64-byte line (as a std::vector's or a
// NumPy array's floats, 16 bytes past one) give a row alone the bits it
// gets from the same rows on a line: its scores, MixRow, and AddMixes over
// ranges of the keys; D and Dv of one to eight vectors and off them, every
// offset within a line, key counts that leave no inner row, one, a part of
// sixteen and several.
TEST_P(AttentionRowTest, RowsOffALineGiveTheBitsOfRowsOnOne) {
  for (size_t depth : {size_t{16}, size_t{48}, size_t{64}, size_t{128}, size_t{20}}) {
    for (size_t keys : {size_t{1}, size_t{2}, size_t{3}, size_t{17}, size_t{70}}) {
      const std::vector<float> q = RandomFloats(depth, 7);
      const std::vector<float> k = RandomFloats(keys * depth, 8);
      const std::vector<float> v = RandomFloats(keys * depth, 9);
      const std::vector<float> w = RandomFloats(keys, 10);
      const OffLine k_on(k, 0), v_on(v, 0);
      const auto stride = static_cast<int64_t>(depth);
      std::vector<float> scores_on(keys), mixed_on(depth);
      kernels::ScoreRow(q.data(), depth, k_on.data(), stride, keys, 0.25f, scores_on.data());
      kernels::MixRow(w.data(), keys, v_on.data(), stride, depth, mixed_on.data());
      for (size_t off = 1; off < 16; ++off) {
        const OffLine k_off(k, off), v_off(v, off);
        std::vector<float> scores(keys), mixed(depth), ranged(depth, 0.0f);
        kernels::ScoreRow(q.data(), depth, k_off.data(), stride, keys, 0.25f, scores.data());
        kernels::MixRow(w.data(), keys, v_off.data(), stride, depth, mixed.data());
        for (size_t first = 0; first < keys; first += 5) {
          const size_t n = std::min<size_t>(5, keys - first);
          const float* w_range = w.data() + first;
          float* out = ranged.data();
          kernels::AddMixes(1, &w_range, &n, v_off.data() + first * depth, stride, depth, &out);
        }
        const std::string at = "D " + std::to_string(depth) + ", M " + std::to_string(keys) + ", " +
                               std::to_string(off) + " floats past a line";
        EXPECT_TRUE(SameBits(scores.data(), scores_on.data(), keys)) << at;
        EXPECT_TRUE(SameBits(mixed.data(), mixed_on.data(), depth)) << at;
        EXPECT_TRUE(SameBits(ranged.data(), mixed_on.data(), depth)) << at;
      }
    }
  }
}

}  // namespace
}  // namespace attnscore::test
