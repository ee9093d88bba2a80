// The row kernels over a KvCache's stored rows, bf16 words and int8 codes
// (engine/kernels/attention_row_cached.cc), on every target: scores and
// mixes agree with sums in double over the values the stored elements stand
// for, a row gets the same bits alone as beside others, and AddMixes over
// the keys cut into ranges gives MixRows' bits.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/attention_row.h"
#include "kernels/bf16.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class AttentionRowBf16Test : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(AttentionRowBf16Test);
class AttentionRowInt8Test : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(AttentionRowInt8Test);

float WordValue(uint16_t word) {
  const uint32_t bits = uint32_t{word} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::vector<uint16_t> Words(size_t n, uint32_t seed) {
  const std::vector<float> x = RandomFloats(n, seed);
  std::vector<uint16_t> words(n);
  kernels::RoundToBf16(x.data(), n, words.data());
  return words;
}

// Depths and value widths on and off every target's vector width and the
// mix's strips, key counts off the 16-key groups and the score kernel's
// passes of 2 and 4 groups, unequal rows, a row with no keys, one to eight
// rows (tiles of four and fewer).
struct Case {
  size_t depth, value_dim;
  std::vector<size_t> keys;  // per row
};
const Case kCases[] = {
    {64, 64, {256, 256, 256, 256}},
    {64, 64, {131, 200, 1, 0, 64, 65, 3, 130}},
    {13, 37, {7, 5}},
    {40, 24, {9, 10, 11}},
    {1, 1, {9}},
    {128, 128, {70, 70, 70, 70, 70, 70, 70, 70}},
    {16, 200, {3, 129, 128, 1, 0, 2, 77}},
    {24, 181, {40, 33}},  // two rows: strips of 8, 4 (AVX2), 2, 1 (AVX-512), then 5 columns
};

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

constexpr size_t kGroup = kernels::kCachedKeyGroup;

// A bf16 cache's rows: random words, keys in groups laid out as
// kernels::Bf16Keys says, values in rows.
struct Bf16Rows {
  std::vector<uint16_t> k, v;
  int64_t v_stride;
  size_t depth;
  Bf16Rows(size_t keys, size_t depth_, size_t value_dim)
      : k(Words((keys / kGroup + 1) * kGroup * depth_, 1)),
        v(Words(keys * (value_dim + 1) + 1, 2)),
        v_stride(static_cast<int64_t>(value_dim) + 1),
        depth(depth_) {}
  // The kernels from key `first` on (for K, a group's first key).
  void Score(size_t rows, const float* const* q, size_t first, const size_t* keys, float scale,
             float* const* scores) const {
    kernels::ScoreRows(rows, q, depth,
                       kernels::Bf16Keys{k.data() + first / kGroup * kGroup * depth}, keys, scale,
                       scores);
  }
  template <class Mix, class... Rest>
  void MixWith(Mix mix, size_t first, Rest... rest) const {
    mix(v.data() + static_cast<int64_t>(first) * v_stride, v_stride, rest...);
  }
  // What key j's element d and value j's element c stand for.
  double Key(size_t j, size_t d) const { return WordValue(k[kernels::Bf16KeyWord(j, d, depth)]); }
  double Value(size_t j, size_t c) const {
    return WordValue(v[j * static_cast<size_t>(v_stride) + c]);
  }
};

// An int8 cache's rows: random codes (keys channel-major per group, as
// kernels::Int8Keys lays them), each key group's lo and step per channel,
// each value row's scale.
struct Int8Rows {
  std::vector<uint8_t> key_codes;
  std::vector<int8_t> value_codes;
  std::vector<float> params, scales;
  int64_t v_stride;
  size_t depth;
  Int8Rows(size_t keys, size_t depth_, size_t value_dim)
      : v_stride(static_cast<int64_t>(value_dim) + 2), depth(depth_) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> code(0, 255);
    const size_t groups = keys / kGroup + 1;
    key_codes.resize(groups * kGroup * depth);
    value_codes.resize(keys * static_cast<size_t>(v_stride) + 1);
    for (uint8_t& c : key_codes) c = static_cast<uint8_t>(code(rng));
    for (int8_t& c : value_codes) c = static_cast<int8_t>(code(rng) - 128);
    params = RandomFloats(groups * 2 * depth, 8);
    for (size_t g = 0; g < groups; ++g) {  // steps positive and small beside lo
      for (size_t d = 0; d < depth; ++d) {
        float& step = params[(2 * g + 1) * depth + d];
        step = std::abs(step) / 100.0f;
      }
    }
    scales = RandomFloats(keys + 1, 9);
    for (float& x : scales) x = std::abs(x) / 100.0f;
  }
  void Score(size_t rows, const float* const* q, size_t first, const size_t* keys, float scale,
             float* const* scores) const {
    kernels::ScoreRows(rows, q, depth,
                       kernels::Int8Keys{key_codes.data() + first / kGroup * kGroup * depth,
                                         params.data() + first / kGroup * 2 * depth},
                       keys, scale, scores);
  }
  template <class Mix, class... Rest>
  void MixWith(Mix mix, size_t first, Rest... rest) const {
    mix(kernels::Int8Values{value_codes.data() + static_cast<int64_t>(first) * v_stride, v_stride,
                            scales.data() + first},
        rest...);
  }
  double Key(size_t j, size_t d) const {
    const float* lo = params.data() + j / kGroup * 2 * depth;
    const uint8_t code = key_codes[((j / kGroup) * depth + d) * kGroup + j % kGroup];
    return lo[d] + static_cast<double>(lo[depth + d]) * code;
  }
  double Value(size_t j, size_t c) const {
    return static_cast<double>(scales[j]) * value_codes[j * static_cast<size_t>(v_stride) + c];
  }
};

// Scores and mixes of every case against sums in double over what the
// stored elements stand for; each row's bits alone; scores from a later
// group on; AddMixes over ranges of keys giving MixRows' bits.
template <class Stored>
void CheckCachedRows() {
  for (const Case& c : kCases) {
    const size_t rows = c.keys.size();
    size_t longest = 0;
    for (size_t n : c.keys) longest = std::max(longest, n);
    const Stored stored(longest, c.depth, c.value_dim);
    const std::vector<float> q = RandomFloats(rows * c.depth, 3);
    const std::vector<float> w = RandomFloats(rows * longest + 1, 4);
    std::vector<float> scores(rows * longest + 1, 0.0f), out(rows * c.value_dim, -1.0f);
    std::vector<const float*> q_rows(rows), w_rows(rows);
    std::vector<float*> score_rows(rows), out_rows(rows);
    for (size_t r = 0; r < rows; ++r) {
      q_rows[r] = q.data() + r * c.depth;
      w_rows[r] = w.data() + r * longest;
      score_rows[r] = scores.data() + r * longest;
      out_rows[r] = out.data() + r * c.value_dim;
    }
    const float scale = 0.3f;
    const auto mix_rows = [&](auto... values) {
      kernels::MixRows(rows, w_rows.data(), c.keys.data(), values..., c.value_dim, out_rows.data());
    };
    stored.Score(rows, q_rows.data(), 0, c.keys.data(), scale, score_rows.data());
    stored.MixWith(mix_rows, 0);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < c.keys[r]; ++j) {
        double dot = 0, size = 0;
        for (size_t d = 0; d < c.depth; ++d) {
          const double term = static_cast<double>(q_rows[r][d]) * stored.Key(j, d);
          dot += term;
          size += std::abs(term);
        }
        ASSERT_NEAR(score_rows[r][j], scale * dot, 1e-6 * scale * size + 1e-30)
            << "row " << r << " key " << j << " of depth " << c.depth;
      }
      for (size_t col = 0; col < c.value_dim; ++col) {
        double sum = 0, size = 0;
        for (size_t j = 0; j < c.keys[r]; ++j) {
          const double term = static_cast<double>(w_rows[r][j]) * stored.Value(j, col);
          sum += term;
          size += std::abs(term);
        }
        ASSERT_NEAR(out_rows[r][col], sum, 1e-6 * size + 1e-30)
            << "row " << r << " column " << col << " of " << c.value_dim;
      }
      // Alone, the row's own bits; from a later group on, the same scores there.
      std::vector<float> alone_scores(longest + 1), alone_out(c.value_dim);
      float* alone_score_row = alone_scores.data();
      stored.Score(1, &q_rows[r], 0, &c.keys[r], scale, &alone_score_row);
      stored.MixWith(
          [&](auto... values) {
            kernels::MixRow(w_rows[r], c.keys[r], values..., c.value_dim, alone_out.data());
          },
          0);
      EXPECT_TRUE(SameBits(alone_scores.data(), score_rows[r], c.keys[r])) << "row " << r;
      EXPECT_TRUE(SameBits(alone_out.data(), out_rows[r], c.value_dim)) << "row " << r;
      const size_t first = std::min(c.keys[r], 2 * kGroup);
      const size_t rest = c.keys[r] - first;
      stored.Score(1, &q_rows[r], first, &rest, scale, &alone_score_row);
      EXPECT_TRUE(SameBits(alone_scores.data(), score_rows[r] + first, rest)) << "row " << r;
    }
    std::vector<float> ranged(rows * c.value_dim, 0.0f);
    std::vector<float*> ranged_rows(rows);
    std::vector<const float*> w_range(rows);
    std::vector<size_t> in_range(rows);
    for (size_t r = 0; r < rows; ++r) ranged_rows[r] = ranged.data() + r * c.value_dim;
    for (size_t first = 0; first < longest; first += 37) {
      for (size_t r = 0; r < rows; ++r) {
        in_range[r] = c.keys[r] > first ? std::min<size_t>(37, c.keys[r] - first) : 0;
        w_range[r] = w_rows[r] + first;
      }
      stored.MixWith(
          [&](auto... values) {
            kernels::AddMixes(rows, w_range.data(), in_range.data(), values..., c.value_dim,
                              ranged_rows.data());
          },
          first);
    }
    for (size_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(SameBits(ranged_rows[r], out_rows[r], c.value_dim)) << "row " << r;
    }
  }
}

TEST_P(AttentionRowBf16Test, MatchesDoubleSumsAndGivesEachRowItsOwnBits) {
  CheckCachedRows<Bf16Rows>();
}

TEST_P(AttentionRowInt8Test, MatchesDoubleSumsAndGivesEachRowItsOwnBits) {
  CheckCachedRows<Int8Rows>();
}

}  // namespace
}  // namespace attnscore::test
