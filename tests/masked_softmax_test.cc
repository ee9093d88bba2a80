// Masked softmax (docs/semantics.md section 1): every Highway target against a
// double-precision reference, the seed checks, golden data from the PyTorch
// seed module, and every edge case of the contract.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/masked_softmax.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

class MaskedSoftmaxTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(MaskedSoftmaxTest);

// Runs the op on dense (B, N, M) data with per-query lengths and checks it
// against the reference: within tolerance, exact zeros past each length.
void CheckAgainstReference(int64_t batch, int64_t queries, int64_t keys,
                           const std::vector<int64_t>& per_query_lens, uint32_t seed) {
  SCOPED_TRACE("shape (" + std::to_string(batch) + ", " + std::to_string(queries) + ", " +
               std::to_string(keys) + ")");
  const std::vector<float> x = RandomFloats(static_cast<size_t>(batch * queries * keys), seed, 3.0f);
  std::vector<float> y(x.size(), kSentinel);
  const ValidLens lens = per_query_lens.empty()
                             ? ValidLens::None()
                             : ValidLens::PerQuery(per_query_lens.data(), batch, queries);
  const Status s = DefaultEngine().MaskedSoftmax(ConstTensor(x.data(), {batch, queries, keys}), lens,
                                                 Tensor(y.data(), {batch, queries, keys}));
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<double> expected = ReferenceMaskedSoftmax(x, batch, queries, keys, per_query_lens);
  EXPECT_LE(MaxAbsDiff(y.data(), expected), kWeightTolerance);
  for (int64_t r = 0; r < batch * queries; ++r) {
    const int64_t valid = per_query_lens.empty() ? keys : per_query_lens[static_cast<size_t>(r)];
    for (int64_t j = valid; valid > 0 && j < keys; ++j) {
      ASSERT_EQ(y[static_cast<size_t>(r * keys + j)], 0.0f) << "row " << r << " key " << j;
    }
  }
}

// Lengths 0, 1, M - 1, M, M + 5 and random ones, cycling over the rows.
std::vector<int64_t> MixedLengths(int64_t rows, int64_t keys, uint32_t seed) {
  std::vector<int64_t> lens(static_cast<size_t>(rows));
  const int64_t specials[] = {0, 1, keys - 1, keys, keys + 5};
  uint32_t state = seed;
  for (int64_t r = 0; r < rows; ++r) {
    state = state * 1664525u + 1013904223u;
    lens[static_cast<size_t>(r)] = r < 5 ? std::max<int64_t>(specials[r], 0)
                                         : static_cast<int64_t>(state >> 8) % (keys + 1);
  }
  return lens;
}

TEST_P(MaskedSoftmaxTest, SizesAroundTheVectorWidth) {
  const int64_t lanes = 16;  // AVX-512 floats; covers the narrower targets' multiples too
  for (int64_t keys = 1; keys <= 2 * lanes + 1; ++keys) {
    CheckAgainstReference(2, 7, keys, MixedLengths(14, keys, static_cast<uint32_t>(keys)), 1);
  }
  for (int64_t keys : {17, 33, 1000}) {
    CheckAgainstReference(3, 5, keys, MixedLengths(15, keys, 7), 2);
    CheckAgainstReference(3, 5, keys, {}, 3);
  }
}

TEST_P(MaskedSoftmaxTest, LargeOutputsTakeTheStreamingPath) {
  // 8 x 64 x 4096 floats = 8 MiB: at the streaming threshold.
  CheckAgainstReference(8, 64, 4096, MixedLengths(8 * 64, 4096, 11), 4);
}

// The streaming kernel stores each row while the next one computes, in chunks
// of rows: an odd width (unaligned rows, a straddling vector, a tail), a last
// partial chunk, and NaN, all -Inf and zero-length rows next to normal ones
// must each give their own row's result.
TEST_P(MaskedSoftmaxTest, StreamedRowsKeepTheirOwnResults) {
  const int64_t batch = 8, queries = 65, keys = 4099, rows = batch * queries;
  std::vector<float> x = RandomFloats(static_cast<size_t>(rows * keys), 12, 3.0f);
  std::vector<int64_t> lens = MixedLengths(rows, keys, 13);
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t nan_rows[] = {63, 64, 130, rows - 1};
  for (int64_t r : nan_rows) {
    lens[static_cast<size_t>(r)] = 100;
    x[static_cast<size_t>(r * keys + 37)] = std::numeric_limits<float>::quiet_NaN();
  }
  lens[200] = 50;
  for (int64_t j = 0; j < 50; ++j) x[static_cast<size_t>(200 * keys + j)] = -inf;
  lens[201] = 0;
  std::vector<float> y(x.size(), kSentinel);
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {batch, queries, keys}),
                                 ValidLens::PerQuery(lens.data(), batch, queries),
                                 Tensor(y.data(), {batch, queries, keys}))
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &y[static_cast<size_t>(r * keys)];
    const bool nan_row =
        r == 200 || std::find(std::begin(nan_rows), std::end(nan_rows), r) != std::end(nan_rows);
    if (nan_row) {
      for (int64_t j = 0; j < keys; ++j) ASSERT_TRUE(std::isnan(row[j])) << "row " << r << " key " << j;
      continue;
    }
    const std::vector<float> own(x.begin() + r * keys, x.begin() + (r + 1) * keys);
    const std::vector<double> expected =
        ReferenceMaskedSoftmax(own, 1, 1, keys, {lens[static_cast<size_t>(r)]});
    ASSERT_LE(MaxAbsDiff(row, expected), kWeightTolerance) << "row " << r;
    for (int64_t j = lens[static_cast<size_t>(r)]; j > 0 && j < keys; ++j) {
      ASSERT_EQ(row[j], 0.0f) << "row " << r << " key " << j;
    }
  }
  // In place, each row's scores are read before its weights are stored.
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {batch, queries, keys}),
                                 ValidLens::PerQuery(lens.data(), batch, queries),
                                 Tensor(x.data(), {batch, queries, keys}))
                  .ok());
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
}

// A copy of x[0, n) that starts on a 64-byte line, in storage that
// outlives the returned pointer.
const float* OnALine(const float* x, size_t n, std::vector<float>* storage) {
  storage->assign(n + 16, 0.0f);
  float* aligned = storage->data();
  while (reinterpret_cast<uintptr_t>(aligned) % 64 != 0) ++aligned;
  std::copy(x, x + n, aligned);
  return aligned;
}

// What the streaming kernel gives for one row alone, its scores and weights
// on a line.
std::vector<float> StreamedAlone(const float* x, size_t valid, size_t width) {
  std::vector<float> x_storage, y_storage(width + 16), scratch(2 * width);
  float* y = y_storage.data();
  while (reinterpret_cast<uintptr_t>(y) % 64 != 0) ++y;
  const kernels::StreamedRow row{OnALine(x, valid, &x_storage), valid, y};
  kernels::MaskedSoftmaxRowsStream(&row, 1, width, scratch.data());
  kernels::FlushStreams();
  return std::vector<float>(y, y + width);
}

// Rows starting anywhere in a vector. Where rows are contiguous, the
// streaming kernel stores a row's tail and the next row's head as one
// aligned vector; where they are not, it stores them plainly. Each row must
// give, bit for bit, what the streaming kernel gives for the same scores
// alone on a line (so no result depends
// on alignment), in place too; the scores past a row's length (NaN here)
// must not be read, and nothing around or between rows may change.
TEST_P(MaskedSoftmaxTest, StreamedRowsAtEveryAlignment) {
  const size_t rows = 9, guard = 16;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t width : {1, 3, 13, 16, 17, 40, 100}) {
    for (size_t gap : {0, 3, 16}) {  // 16: apart by whole vectors
      for (size_t start = 0; start < 16; ++start) {
        SCOPED_TRACE("width " + std::to_string(width) + ", gap " + std::to_string(gap) +
                     ", start " + std::to_string(start));
        const size_t stride = width + gap, first = guard + start;
        const auto in_a_row = [&](size_t k) {
          return k >= first && (k - first) % stride < width && (k - first) / stride < rows;
        };
        std::vector<float> x = RandomFloats(first + rows * stride + guard,
                                            static_cast<uint32_t>(width * 100 + start), 3.0f);
        // Lengths 0, 1, all, and in between; row 4 has a NaN among its scores,
        // where the max pass's head or its vectors read it, as start varies.
        std::vector<size_t> lens = {width, 1, 0, width / 2, width, width - 1, 2, width, width / 3};
        for (size_t& l : lens) l = std::min(l, width);
        for (size_t r = 0; r < rows; ++r) {
          std::fill(x.begin() + static_cast<std::ptrdiff_t>(first + r * stride + lens[r]),
                    x.begin() + static_cast<std::ptrdiff_t>(first + r * stride + width), nan);
        }
        x[first + 4 * stride + start % width] = nan;

        std::vector<float> y(x.size(), kSentinel), scratch(2 * width);
        std::vector<kernels::StreamedRow> descriptors;
        for (size_t r = 0; r < rows; ++r) {
          descriptors.push_back({&x[first + r * stride], lens[r], &y[first + r * stride]});
        }
        kernels::MaskedSoftmaxRowsStream(descriptors.data(), rows, width, scratch.data());
        kernels::FlushStreams();

        for (size_t r = 0; r < rows; ++r) {
          const std::vector<float> expected = StreamedAlone(&x[first + r * stride], lens[r], width);
          ASSERT_EQ(std::memcmp(&y[first + r * stride], expected.data(), width * sizeof(float)), 0)
              << "row " << r;
          if (r == 4) {
            EXPECT_TRUE(std::isnan(expected[0]));
            continue;
          }
          const std::vector<float> own(x.begin() + static_cast<std::ptrdiff_t>(first + r * stride),
                                       x.begin() + static_cast<std::ptrdiff_t>(first + r * stride + width));
          EXPECT_LE(MaxAbsDiff(expected.data(),
                               ReferenceMaskedSoftmax(own, 1, 1, static_cast<int64_t>(width),
                                                      {static_cast<int64_t>(lens[r])})),
                    kWeightTolerance)
              << "row " << r;
        }
        for (size_t k = 0; k < y.size(); ++k) {
          if (!in_a_row(k)) {
            ASSERT_EQ(y[k], kSentinel) << "wrote outside the rows at " << k;
          }
        }

        // In place: each row's scores are read before its weights land on them.
        const std::vector<float> before = x;
        for (kernels::StreamedRow& row : descriptors) row.y = const_cast<float*>(row.x);
        kernels::MaskedSoftmaxRowsStream(descriptors.data(), rows, width, scratch.data());
        kernels::FlushStreams();
        for (size_t k = 0; k < x.size(); ++k) {
          if (in_a_row(k)) {
            ASSERT_EQ(std::memcmp(&x[k], &y[k], sizeof(float)), 0) << "in place, at " << k;
          } else {
            ASSERT_EQ(std::memcmp(&x[k], &before[k], sizeof(float)), 0) << "in place, wrote at " << k;
          }
        }
      }
    }
  }
}

// Rows that share no vector (each on a line, whole vectors long) are taken
// in order of valid length, not in array order: each must still give, bit
// for bit, what it gives streamed alone, and the reference's weights within
// tolerance, with lengths from 0 to the width, ties, and a NaN row among
// them, in a full chunk and a short one.
TEST_P(MaskedSoftmaxTest, StreamedRowsOnLinesInAnyOrder) {
  const size_t width = 64;
  for (size_t rows : {kernels::kMaxStreamedRows, size_t{7}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    std::vector<float> storage;
    const std::vector<float> scores =
        RandomFloats(rows * width, static_cast<uint32_t>(rows), 3.0f);
    float* x = const_cast<float*>(OnALine(scores.data(), scores.size(), &storage));
    x[3 * width + 5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<int64_t> lens = MixedLengths(static_cast<int64_t>(rows), static_cast<int64_t>(width), 21);
    for (int64_t& l : lens) l = std::min(l, static_cast<int64_t>(width));  // as the op clamps them
    lens[3] = 40;
    lens[rows - 1] = 0;
    std::vector<float> y_storage(rows * width + 16, kSentinel), scratch(2 * width);
    float* y = y_storage.data();
    while (reinterpret_cast<uintptr_t>(y) % 64 != 0) ++y;
    std::vector<kernels::StreamedRow> descriptors;
    for (size_t r = 0; r < rows; ++r) {
      descriptors.push_back({x + r * width, static_cast<size_t>(lens[r]), y + r * width});
    }
    kernels::MaskedSoftmaxRowsStream(descriptors.data(), rows, width, scratch.data());
    kernels::FlushStreams();
    for (size_t r = 0; r < rows; ++r) {
      const std::vector<float> expected =
          StreamedAlone(x + r * width, static_cast<size_t>(lens[r]), width);
      ASSERT_EQ(std::memcmp(y + r * width, expected.data(), width * sizeof(float)), 0)
          << "row " << r << ", length " << lens[r];
      const std::vector<float> own(x + r * width, x + (r + 1) * width);
      EXPECT_LE(MaxAbsDiff(y + r * width,
                           ReferenceMaskedSoftmax(own, 1, 1, static_cast<int64_t>(width), {lens[r]})),
                kWeightTolerance)
          << "row " << r;
    }
    EXPECT_TRUE(std::isnan(y[3 * width]));
    EXPECT_EQ(y[(rows - 1) * width], 1.0f / static_cast<float>(width));
  }
}

// The streaming kernel shifts a row's exps by the max of its first vector,
// and by the row's max where a score lies too far above that (see
// kMaxShiftedSum). Rows with one score far above the rest, in the first
// vector or after it, one 13.5 above the first vector (the bound's edge,
// kept), a first vector of -Inf, and a row of many exps that sum past the
// bound: each within tolerance and finite, and where the fallback must run
// (a score more than 14.5 above the first vector's, the -Inf and the last
// row), the row kernel's bits. In place too: the fallback reads the scores
// again.
TEST_P(MaskedSoftmaxTest, StreamedRowsFallBackToTheRowMax) {
  // An odd width: rows share vectors, and their tails and heads merge, on
  // every vector target.
  const size_t width = 1001, valid = 997;
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    float score;  // put at `at`, among scores in [-3, 3]
    size_t at;
    bool must_fall_back;
    float first = 0.0f;  // if not 0, the row's first 16 scores (every target's first vector)
  };
  const Case cases[] = {{8.0f, 20, false},    {16.0f, 500, false},       {17.5f, 20, true},
                        {17.5f, 996, true},   {100.0f, 300, true},       {1e4f, 20, true},
                        {3e38f, 996, true},   {1e4f, 0, false},          {-1e4f, 20, false},
                        {16.5f, 500, false, 3.0f}, {1.0f, 500, true, -inf}};
  const size_t rows = std::size(cases) + 1;
  std::vector<float> x = RandomFloats(rows * width, 77);
  for (float& score : x) score = std::clamp(score, -3.0f, 3.0f);
  for (size_t r = 0; r < std::size(cases); ++r) {
    if (cases[r].first != 0.0f) std::fill_n(&x[r * width], 16, cases[r].first);
    x[r * width + cases[r].at] = cases[r].score;
  }
  // The last row: every score after the first 16 is 15, each exp at least e^12.
  std::fill(x.begin() + static_cast<std::ptrdiff_t>((rows - 1) * width + 16),
            x.begin() + static_cast<std::ptrdiff_t>(rows * width), 15.0f);
  std::vector<float> y(x.size(), kSentinel), scratch(2 * width);
  std::vector<kernels::StreamedRow> descriptors;
  for (size_t r = 0; r < rows; ++r) descriptors.push_back({&x[r * width], valid, &y[r * width]});
  kernels::MaskedSoftmaxRowsStream(descriptors.data(), rows, width, scratch.data());
  kernels::FlushStreams();
  for (size_t r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const float* got = &y[r * width];
    const std::vector<float> own(x.begin() + static_cast<std::ptrdiff_t>(r * width),
                                 x.begin() + static_cast<std::ptrdiff_t>((r + 1) * width));
    const std::vector<double> expected = ReferenceMaskedSoftmax(
        own, 1, 1, static_cast<int64_t>(width), {static_cast<int64_t>(valid)});
    for (size_t j = 0; j < width; ++j) ASSERT_TRUE(std::isfinite(got[j])) << "key " << j;
    EXPECT_LE(MaxAbsDiff(got, expected), kWeightTolerance);
    if (r + 1 == rows || cases[r].must_fall_back) {
      std::vector<float> by_row(width);
      kernels::MaskedSoftmaxRow(&x[r * width], valid, width, by_row.data());
      EXPECT_EQ(std::memcmp(got, by_row.data(), width * sizeof(float)), 0);
    }
  }
  for (kernels::StreamedRow& row : descriptors) row.y = const_cast<float*>(row.x);
  kernels::MaskedSoftmaxRowsStream(descriptors.data(), rows, width, scratch.data());
  kernels::FlushStreams();
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << "in place";
}

TEST_P(MaskedSoftmaxTest, GoldenCasesFromTheSeedModule) {
  for (const char* name : {"softmax_seed_per_batch", "softmax_seed_per_query", "softmax_no_lens",
                           "softmax_odd_int32", "softmax_per_query_mixed"}) {
    SCOPED_TRACE(name);
    const npy::NpyArray x = LoadGolden(name, "x"), expected = LoadGolden(name, "y");
    npy::NpyArray lens_array;
    ValidLens lens = ValidLens::None();
    if (GoldenExists(name, "valid_lens")) {
      lens_array = LoadGolden(name, "valid_lens");
      lens = LensView(lens_array);
    }
    const int64_t b = x.shape[0], n = x.shape[1], m = x.shape[2];
    std::vector<float> y(static_cast<size_t>(x.size()));
    const Status s = DefaultEngine().MaskedSoftmax(ConstTensor(x.data<float>(), {b, n, m}), lens,
                                                   Tensor(y.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<double> want(expected.data<float>(), expected.data<float>() + expected.size());
    EXPECT_LE(MaxAbsDiff(y.data(), want), kWeightTolerance);
  }
}

TEST_P(MaskedSoftmaxTest, SeedChecks) {
  // masked_softmax(rand(2, 2, 4), [2, 3]): zeros in columns 2-3 of batch 0
  // and column 3 of batch 1; rows sum to 1.
  const std::vector<float> x = {0.1f, 0.9f, 0.4f, 0.3f, 0.7f, 0.2f, 0.5f, 0.8f,
                                0.6f, 0.0f, 0.3f, 0.9f, 0.2f, 0.4f, 0.1f, 0.5f};
  const int32_t per_batch[] = {2, 3};
  std::vector<float> y(16);
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {2, 2, 4}), ValidLens::PerBatch(per_batch, 2),
                                 Tensor(y.data(), {2, 2, 4}))
                  .ok());
  for (int r = 0; r < 4; ++r) {
    const int valid = r < 2 ? 2 : 3;
    double sum = 0;
    for (int j = 0; j < 4; ++j) {
      sum += y[r * 4 + j];
      if (j >= valid) EXPECT_EQ(y[r * 4 + j], 0.0f);
      else EXPECT_GT(y[r * 4 + j], 0.0f);
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  // With [[1, 3], [2, 4]], row (0, 0) is exactly [1, 0, 0, 0].
  const int64_t per_query[] = {1, 3, 2, 4};
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {2, 2, 4}),
                                 ValidLens::PerQuery(per_query, 2, 2), Tensor(y.data(), {2, 2, 4}))
                  .ok());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST_P(MaskedSoftmaxTest, StridedAndInPlaceViews) {
  const int64_t b = 2, n = 3, m = 37;
  const std::vector<float> dense = RandomFloats(static_cast<size_t>(b * n * m), 5, 2.0f);
  const std::vector<int64_t> lens = MixedLengths(b * n, m, 9);
  const std::vector<double> expected = ReferenceMaskedSoftmax(dense, b, n, m, lens);
  const ValidLens valid = ValidLens::PerQuery(lens.data(), b, n);

  // x with padded rows (stride m + 3); y with every other column (stride 2).
  std::vector<float> padded(static_cast<size_t>(b * n * (m + 3)), std::nanf(""));
  for (int64_t r = 0; r < b * n; ++r) {
    std::memcpy(&padded[static_cast<size_t>(r * (m + 3))], &dense[static_cast<size_t>(r * m)],
                sizeof(float) * static_cast<size_t>(m));
  }
  std::vector<float> wide(static_cast<size_t>(b * n * m * 2), kSentinel);
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(padded.data(), {b, n, m}, {n * (m + 3), m + 3, 1}), valid,
                                 Tensor(wide.data(), {b, n, m}, {n * m * 2, m * 2, 2}))
                  .ok());
  std::vector<float> gathered(dense.size());
  for (size_t e = 0; e < gathered.size(); ++e) {
    gathered[e] = wide[2 * e];
    EXPECT_EQ(wide[2 * e + 1], kSentinel) << "wrote between strided columns";
  }
  EXPECT_LE(MaxAbsDiff(gathered.data(), expected), kWeightTolerance);

  // In place: y is exactly x.
  std::vector<float> inplace = dense;
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(inplace.data(), {b, n, m}), valid,
                                 Tensor(inplace.data(), {b, n, m}))
                  .ok());
  EXPECT_LE(MaxAbsDiff(inplace.data(), expected), kWeightTolerance);
}

TEST_P(MaskedSoftmaxTest, ZeroLengthGivesUniformWeights) {
  const std::vector<float> x = RandomFloats(2 * 3 * 7, 6);
  const int64_t lens[] = {0, 3};
  std::vector<float> y(x.size());
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {2, 3, 7}), ValidLens::PerBatch(lens, 2),
                                 Tensor(y.data(), {2, 3, 7}))
                  .ok());
  for (int j = 0; j < 21; ++j) EXPECT_FLOAT_EQ(y[j], 1.0f / 7) << j;
}

TEST_P(MaskedSoftmaxTest, LengthAtOrBeyondKeysIsPlainSoftmax) {
  const std::vector<float> x = RandomFloats(4 * 19, 7);
  const int32_t lens[] = {19, 20, 1 << 30, 19};
  std::vector<float> with(x.size()), without(x.size());
  const auto& engine = DefaultEngine();
  ASSERT_TRUE(engine.MaskedSoftmax(ConstTensor(x.data(), {4, 1, 19}), ValidLens::PerBatch(lens, 4),
                                   Tensor(with.data(), {4, 1, 19})).ok());
  ASSERT_TRUE(engine.MaskedSoftmax(ConstTensor(x.data(), {4, 1, 19}), ValidLens::None(),
                                   Tensor(without.data(), {4, 1, 19})).ok());
  EXPECT_EQ(with, without);
}

TEST_P(MaskedSoftmaxTest, NonFiniteScores) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t m = 21;
  // Rows: NaN in a valid position; +Inf valid; -Inf valid with finite others;
  // NaN and Inf only in masked positions; all valid -Inf.
  std::vector<float> x = RandomFloats(5 * m, 8);
  x[0 * m + 4] = nan;
  x[1 * m + 17] = inf;
  x[2 * m + 3] = -inf;
  x[3 * m + 15] = nan;
  x[3 * m + 16] = inf;
  x[3 * m + 20] = -inf;
  for (int j = 0; j < 10; ++j) x[4 * m + j] = -inf;
  const int64_t lens[] = {10, 18, 10, 10, 10};
  std::vector<float> y(x.size());
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {5, 1, m}), ValidLens::PerBatch(lens, 5),
                                 Tensor(y.data(), {5, 1, m}))
                  .ok());
  for (int j = 0; j < m; ++j) EXPECT_TRUE(std::isnan(y[0 * m + j])) << "NaN row, key " << j;
  for (int j = 0; j < m; ++j) EXPECT_TRUE(std::isnan(y[1 * m + j])) << "+Inf row, key " << j;
  for (int j = 0; j < m; ++j) EXPECT_TRUE(std::isnan(y[4 * m + j])) << "all -Inf row, key " << j;
  EXPECT_EQ(y[2 * m + 3], 0.0f);  // -Inf among finite scores weighs nothing
  for (int r : {2, 3}) {
    double sum = 0;
    for (int j = 0; j < m; ++j) {
      ASSERT_TRUE(std::isfinite(y[r * m + j])) << "row " << r << " key " << j;
      sum += y[r * m + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
  // Masked NaN/Inf ignored: row 3 equals the softmax of its first 10 scores.
  std::vector<float> clean(x.begin() + 3 * m, x.begin() + 4 * m);
  const std::vector<double> expected = ReferenceMaskedSoftmax(clean, 1, 1, m, {10});
  EXPECT_LE(MaxAbsDiff(&y[3 * m], expected), kWeightTolerance);
}

// The same cases in rows too long to be held in registers, through the row
// kernel's passes and the streaming kernel (the max pass of AVX-512 does not
// look for NaN: its exps carry one into the row's sum, which then tells).
// Rows start 3 floats past a cache line, so the max pass has a head; the
// bad score sits in it (0, 5 on AVX-512), in whole vectors and in the last
// partial vector, for lengths on and off a vector boundary.
TEST_P(MaskedSoftmaxTest, NonFiniteScoresInLongRows) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const size_t width = 300;
  for (size_t valid : {size_t{150}, size_t{256}, size_t{299}, width}) {
    for (size_t at : {size_t{0}, size_t{5}, size_t{70}, valid - 1}) {
      SCOPED_TRACE("valid " + std::to_string(valid) + ", at " + std::to_string(at));
      // Rows: NaN, +Inf, -Inf among finite scores, all -Inf, then NaN and
      // +Inf past the valid length only.
      constexpr size_t kRows = 5;
      const std::vector<float> scores =
          RandomFloats(kRows * width, static_cast<uint32_t>(valid + at), 3.0f);
      std::vector<float> storage(kRows * width + 3 + 16);
      float* x = storage.data();
      while (reinterpret_cast<uintptr_t>(x) % 64 != 0) ++x;
      x += 3;
      std::copy(scores.begin(), scores.end(), x);
      x[0 * width + at] = nan;
      x[1 * width + at] = inf;
      x[2 * width + at] = -inf;
      std::fill(x + 3 * width, x + 3 * width + valid, -inf);
      if (valid < width) {
        x[4 * width + valid] = nan;
        x[4 * width + width - 1] = inf;
      }
      std::vector<float> by_row(kRows * width), streamed(kRows * width), scratch(2 * width);
      std::vector<kernels::StreamedRow> rows;
      for (size_t r = 0; r < kRows; ++r) {
        kernels::MaskedSoftmaxRow(&x[r * width], valid, width, &by_row[r * width]);
        rows.push_back({&x[r * width], valid, &streamed[r * width]});
      }
      kernels::MaskedSoftmaxRowsStream(rows.data(), kRows, width, scratch.data());
      kernels::FlushStreams();
      for (const std::vector<float>* y : {&by_row, &streamed}) {
        const char* path = y == &by_row ? "row kernel" : "streamed";
        for (size_t r : {size_t{0}, size_t{1}, size_t{3}}) {
          for (size_t j = 0; j < width; ++j) {
            ASSERT_TRUE(std::isnan((*y)[r * width + j])) << path << ", row " << r << ", key " << j;
          }
        }
        EXPECT_EQ((*y)[2 * width + at], 0.0f) << path;  // -Inf among finite scores weighs nothing
        for (size_t r : {size_t{2}, size_t{4}}) {
          const std::vector<float> own(x + r * width, x + (r + 1) * width);
          const std::vector<double> expected = ReferenceMaskedSoftmax(
              own, 1, 1, static_cast<int64_t>(width), {static_cast<int64_t>(valid)});
          EXPECT_LE(MaxAbsDiff(&(*y)[r * width], expected), kWeightTolerance) << path << ", row " << r;
        }
      }
    }
  }
}

// What docs/semantics.md sections 1.1, 1.4 and 1.5 give row x[0, width) with
// `len` (clamped to width): a NaN in every position, masked ones included,
// when its valid scores are all -Inf (a sum of 0, 0/0); otherwise the softmax
// of its valid scores against their max, exactly 0 at every valid -Inf and
// every masked position. Scores here are finite or -Inf.
void ExpectRowSemantics(const float* x, size_t len, size_t width, const float* y,
                        const std::string& what) {
  const size_t valid = std::min(len, width);
  double max = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < valid; ++j) max = std::max<double>(max, x[j]);
  if (valid > 0 && max == -std::numeric_limits<double>::infinity()) {
    for (size_t j = 0; j < width; ++j) {
      ASSERT_TRUE(std::isnan(y[j])) << what << ": all valid scores -Inf, key " << j << " (of "
                                    << width << ", L = " << len << ") is " << y[j];
    }
    return;
  }
  double sum = 0;
  for (size_t j = 0; j < valid; ++j) sum += std::exp(static_cast<double>(x[j]) - max);
  for (size_t j = 0; j < width; ++j) {
    if (j >= valid || x[j] == -std::numeric_limits<float>::infinity()) {
      ASSERT_EQ(y[j], 0.0f) << what << ": key " << j << " (of " << width << ", L = " << len << ")";
    } else {
      ASSERT_NEAR(y[j], std::exp(static_cast<double>(x[j]) - max) / sum, kWeightTolerance)
          << what << ": key " << j << " (of " << width << ", L = " << len << ")";
    }
  }
}

// A row whose valid scores are all -Inf is NaN throughout, masked positions
// included (docs/semantics.md 1.4, 1.5), on every target: for L = 1, for
// L < M and L = M (or past it), for rows narrower than a vector, a few
// vectors long (held in registers) and longer (the passes), through the op
// with per-batch and per-query lengths, the row kernel out of place and in
// place, and the streaming kernel (the op streams only from 8 MiB on).
// Beside them, rows that must stay ordinary: a -Inf among finite scores
// weighs 0, and -Inf scores with one at the lowest finite float (a max that
// is finite, however low) give that one all the weight.
TEST_P(MaskedSoftmaxTest, AllMinusInfValidScoresMakeTheWholeRowNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float lowest = std::numeric_limits<float>::lowest();
  {  // The smallest case: x = [-Inf, 0.5, 0.5, 0.5] with L = 1, per batch and per query.
    const std::vector<float> x = {-inf, 0.5f, 0.5f, 0.5f};
    const int64_t one[] = {1};
    const int32_t one32[] = {1};
    for (const ValidLens& lens : {ValidLens::PerBatch(one, 1), ValidLens::PerQuery(one32, 1, 1)}) {
      std::vector<float> y(4, kSentinel);
      ASSERT_TRUE(DefaultEngine()
                      .MaskedSoftmax(ConstTensor(x.data(), {1, 1, 4}), lens, Tensor(y.data(), {1, 1, 4}))
                      .ok());
      for (int j = 0; j < 4; ++j) EXPECT_TRUE(std::isnan(y[j])) << "key " << j << " is " << y[j];
    }
  }
  for (size_t width : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 300}) {
    std::vector<size_t> lens_to_try = {1, 3, width - 1, width, width + 5};
    for (size_t len : lens_to_try) {
      if (len == 0) continue;
      SCOPED_TRACE("M = " + std::to_string(width) + ", L = " + std::to_string(len));
      const size_t valid = std::min(len, width);
      const auto m = static_cast<int64_t>(width);
      // Per query, (2, 3, M): rows 0, 2 and 4 all -Inf where valid (row 2 for
      // L past M; row 4 with NaN and +Inf where masked, which is never read);
      // row 1 ordinary with a -Inf, row 3 -Inf but its last valid score, the
      // lowest float; row 5 ordinary.
      std::vector<float> x = RandomFloats(6 * width, static_cast<uint32_t>(width * 7 + len), 3.0f);
      const std::vector<int64_t> lens = {static_cast<int64_t>(len), static_cast<int64_t>(len),
                                         m + 5, static_cast<int64_t>(len),
                                         static_cast<int64_t>(len), static_cast<int64_t>(len)};
      float* row[6];
      for (size_t r = 0; r < 6; ++r) row[r] = &x[r * width];
      std::fill(row[0], row[0] + valid, -inf);
      if (valid > 1) row[1][valid / 2] = -inf;
      std::fill(row[2], row[2] + width, -inf);
      std::fill(row[3], row[3] + valid, -inf);
      row[3][valid - 1] = lowest;
      std::fill(row[4], row[4] + valid, -inf);
      for (size_t j = valid; j < width; ++j) row[4][j] = j % 2 == 0 ? nan : inf;
      const auto check_all = [&](const std::vector<float>& y, const std::string& path) {
        for (size_t r = 0; r < 6; ++r) {
          ASSERT_NO_FATAL_FAILURE(ExpectRowSemantics(row[r], static_cast<size_t>(lens[r]), width,
                                                     &y[r * width], path + ", row " + std::to_string(r)));
        }
      };
      std::vector<float> y(x.size(), kSentinel);
      ASSERT_TRUE(DefaultEngine()
                      .MaskedSoftmax(ConstTensor(x.data(), {2, 3, m}), ValidLens::PerQuery(lens.data(), 2, 3),
                                     Tensor(y.data(), {2, 3, m}))
                      .ok());
      ASSERT_NO_FATAL_FAILURE(check_all(y, "per query"));

      std::vector<float> by_row(x.size(), kSentinel), in_place = x, streamed(x.size(), kSentinel);
      std::vector<float> scratch(2 * width);
      std::vector<kernels::StreamedRow> streamed_rows;
      for (size_t r = 0; r < 6; ++r) {
        const size_t row_valid = std::min(static_cast<size_t>(lens[r]), width);
        kernels::MaskedSoftmaxRow(row[r], row_valid, width, &by_row[r * width]);
        kernels::MaskedSoftmaxRow(&in_place[r * width], row_valid, width, &in_place[r * width]);
        streamed_rows.push_back({row[r], row_valid, &streamed[r * width]});
      }
      kernels::MaskedSoftmaxRowsStream(streamed_rows.data(), streamed_rows.size(), width,
                                       scratch.data());
      kernels::FlushStreams();
      ASSERT_NO_FATAL_FAILURE(check_all(by_row, "row kernel"));
      ASSERT_NO_FATAL_FAILURE(check_all(in_place, "row kernel in place"));
      ASSERT_NO_FATAL_FAILURE(check_all(streamed, "streamed"));

      // Per batch, (2, 2, M): entry 0 is rows 0 and 4 above, entry 1 rows 1 and 5.
      std::vector<float> xb;
      for (size_t r : {0, 4, 1, 5}) xb.insert(xb.end(), row[r], row[r] + width);
      const int64_t batch_lens[] = {static_cast<int64_t>(len), static_cast<int64_t>(len)};
      std::vector<float> yb(xb.size(), kSentinel);
      ASSERT_TRUE(DefaultEngine()
                      .MaskedSoftmax(ConstTensor(xb.data(), {2, 2, m}), ValidLens::PerBatch(batch_lens, 2),
                                     Tensor(yb.data(), {2, 2, m}))
                      .ok());
      for (size_t r = 0; r < 4; ++r) {
        ASSERT_NO_FATAL_FAILURE(ExpectRowSemantics(&xb[r * width], len, width, &yb[r * width],
                                                   "per batch, row " + std::to_string(r)));
      }
    }
  }
}

// The block kernel the dot product's row path merges: a normal block equals
// the row kernel bit for bit; -Inf, +Inf and NaN blocks report what the merge
// needs to reproduce the one-row semantics.
TEST_P(MaskedSoftmaxTest, BlockKernelGivesTheRowResultAndItsStatistics) {
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1, 7, 16, 33, 256}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::vector<float> x = RandomFloats(n, static_cast<uint32_t>(n), 4.0f);
    if (n > 2) x[1] = -inf;
    std::vector<float> row(n), block(n);
    kernels::MaskedSoftmaxRow(x.data(), n, n, row.data());
    const kernels::SoftmaxBlockStats stats = kernels::MaskedSoftmaxBlock(x.data(), n, block.data());
    EXPECT_FALSE(stats.poisoned);
    EXPECT_EQ(std::memcmp(row.data(), block.data(), n * sizeof(float)), 0);
    double max = -inf, sum = 0;
    for (float v : x) max = std::max<double>(max, v);
    for (float v : x) sum += std::exp(v - max);
    EXPECT_EQ(stats.max, static_cast<float>(max));
    EXPECT_NEAR(stats.sum, sum, 1e-5 * sum);

    std::vector<float> all_minus_inf(n, -inf);
    const kernels::SoftmaxBlockStats none = kernels::MaskedSoftmaxBlock(all_minus_inf.data(), n, block.data());
    EXPECT_FALSE(none.poisoned);
    EXPECT_EQ(none.max, -inf);
    EXPECT_EQ(none.sum, 0.0f);
    for (float w : block) EXPECT_EQ(w, 0.0f);

    for (float bad : {inf, std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> poisoned = x;
      poisoned[n - 1] = bad;
      EXPECT_TRUE(kernels::MaskedSoftmaxBlock(poisoned.data(), n, block.data()).poisoned) << bad;
    }
  }
}

// Rows of up to eight vectors are held in registers, and rows end without
// masked stores (they held up the next row's loads): a last partial vector
// and the zeros go out as whole vectors ending at the row's end, reaching
// back into it. Each row must give the three passes' bits (the block kernel
// runs them on its valid scores) and exact zeros after them, for every
// width up to just past the register path, and write nothing outside
// itself: rows lie back to back and are done in place, in turn, so a store
// past one row's end would change the next row's scores before they are
// read. Scores past each length are NaN, and must not be read. With a -Inf
// among its scores a row takes the passes instead, whatever its length.
TEST_P(MaskedSoftmaxTest, ShortRowsGiveThePassesBitsAndStayInTheirRow) {
  const size_t rows = 6, guard = 16;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t width = 1; width <= 8 * 16 + 2; ++width) {
    std::vector<size_t> lens = {width, 1, width - 1, width / 2, width * 2 / 3, width - 17};
    for (size_t& l : lens) l = std::clamp<size_t>(l, 1, width);  // width - 17 may wrap
    for (size_t start : {0, 3}) {
      for (bool minus_inf : {false, true}) {
        SCOPED_TRACE("width " + std::to_string(width) + ", start " + std::to_string(start) +
                     (minus_inf ? ", a -Inf in each row" : ""));
        const size_t first = guard + start;
        std::vector<float> scores = RandomFloats(first + rows * width + guard,
                                                 static_cast<uint32_t>(width * 10 + start), 3.0f);
        for (size_t r = 0; r < rows; ++r) {
          float* row = &scores[first + r * width];
          std::fill(row + lens[r], row + width, nan);
          if (minus_inf && lens[r] > 1) row[lens[r] / 2] = -inf;
        }
        std::vector<float> x = scores;
        for (size_t r = 0; r < rows; ++r) {
          float* row = &x[first + r * width];
          kernels::MaskedSoftmaxRow(row, lens[r], width, row);
        }
        for (size_t r = 0; r < rows; ++r) {
          std::vector<float> expected(lens[r]);
          kernels::MaskedSoftmaxBlock(&scores[first + r * width], lens[r], expected.data());
          const float* got = &x[first + r * width];
          ASSERT_EQ(std::memcmp(got, expected.data(), lens[r] * sizeof(float)), 0) << "row " << r;
          for (size_t j = lens[r]; j < width; ++j) {
            ASSERT_EQ(got[j], 0.0f) << "row " << r << " key " << j;
          }
        }
        for (size_t k = 0; k < x.size(); ++k) {
          if (k < first || k >= first + rows * width) {
            ASSERT_EQ(std::memcmp(&x[k], &scores[k], sizeof(float)), 0)
                << "wrote outside the rows at " << k;
          }
        }
      }
    }
  }
}

TEST_P(MaskedSoftmaxTest, VeryLargeScoresStayStable) {
  std::vector<float> x = {1e4f, -1e4f, 1e4f, 0.0f, -1e4f, 3e38f, -3e38f, 1.0f};
  std::vector<float> y(x.size());
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {2, 1, 4}), ValidLens::None(),
                                 Tensor(y.data(), {2, 1, 4}))
                  .ok());
  const std::vector<double> expected = ReferenceMaskedSoftmax(x, 2, 1, 4, {});
  for (float w : y) EXPECT_TRUE(std::isfinite(w));
  EXPECT_LE(MaxAbsDiff(y.data(), expected), kWeightTolerance);
}

class MaskedSoftmaxThreads : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};
INSTANTIATE_TEST_SUITE_P(CachedAndStreamed, MaskedSoftmaxThreads,
                         ::testing::Values(std::tuple{4, 33, 515},     // in cache
                                           std::tuple{8, 64, 4096}),  // streamed (8 MiB)
                         [](const auto& info) {
                           return "B" + std::to_string(std::get<0>(info.param)) + "_N" +
                                  std::to_string(std::get<1>(info.param)) + "_M" +
                                  std::to_string(std::get<2>(info.param));
                         });

TEST_P(MaskedSoftmaxThreads, ResultsIdenticalForAnyThreadCount) {
  const auto [b, n, m] = GetParam();
  const std::vector<float> x = RandomFloats(static_cast<size_t>(b * n * m), 10);
  const std::vector<int64_t> lens = MixedLengths(b * n, m, 3);
  std::vector<float> one(x.size()), two(x.size());
  for (auto [threads, y] : {std::pair{1, &one}, {2, &two}}) {
    EngineOptions options;
    options.threads = threads;
    std::unique_ptr<Engine> engine;
    ASSERT_TRUE(Engine::Create(options, &engine).ok());
    ASSERT_TRUE(engine->MaskedSoftmax(ConstTensor(x.data(), {b, n, m}),
                                      ValidLens::PerQuery(lens.data(), b, n),
                                      Tensor(y->data(), {b, n, m})).ok());
  }
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
}

// ---- bad input: a clear error naming the argument, nothing written --------

struct BadCase {
  std::string name;
  std::function<Status(const Engine&, float* y)> call;
  std::string message_part;
};

TEST(MaskedSoftmaxErrors, RejectsBadInputAndWritesNothing) {
  static const std::vector<float> x(2 * 3 * 4, 0.5f);
  static const int64_t good_lens[] = {1, 2};
  static const int64_t negative[] = {1, -2};
  static const int32_t negative_per_query[] = {1, 2, 3, 4, 5, -6};
  static const int64_t five[] = {1, 2, 3, 4, 5};
  const ConstTensor xv(x.data(), {2, 3, 4});
  const std::vector<BadCase> cases = {
      {"x rank 2", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(ConstTensor(x.data(), {6, 4}), ValidLens::None(), Tensor(y, {2, 3, 4}));
       }, "x must have rank 3"},
      {"x null", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(ConstTensor(nullptr, {2, 3, 4}), ValidLens::None(), Tensor(y, {2, 3, 4}));
       }, "x is null"},
      {"x zero-size", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(ConstTensor(x.data(), {2, 0, 4}), ValidLens::None(), Tensor(y, {2, 0, 4}));
       }, "x has shape (2, 0, 4)"},
      {"x negative stride", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(ConstTensor(x.data(), {2, 3, 4}, {12, -4, 1}), ValidLens::None(),
                                Tensor(y, {2, 3, 4}));
       }, "negative stride"},
      {"x huge", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(ConstTensor(x.data(), {int64_t{1} << 40, int64_t{1} << 40, 4}),
                                ValidLens::None(), Tensor(y, {2, 3, 4}));
       }, "too large"},
      {"y shape", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::None(), Tensor(y, {2, 4, 3}));
       }, "y has shape (2, 4, 3)"},
      {"y aliases itself", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::None(), Tensor(y, {2, 3, 4}, {0, 4, 1}));
       }, "share memory"},
      {"y overlaps x", [&](const Engine& e, float*) {
         return e.MaskedSoftmax(xv, ValidLens::None(),
                                Tensor(const_cast<float*>(x.data()) + 1, {2, 3, 4}));
       }, "y overlaps x"},
      {"y is x with other strides", [&](const Engine& e, float*) {
         return e.MaskedSoftmax(xv, ValidLens::None(),
                                Tensor(const_cast<float*>(x.data()), {2, 3, 4}, {12, 1, 3}));
       }, "y overlaps x (only an exact in-place view is allowed)"},
      {"lens of unknown kind", [&](const Engine& e, float* y) {
         ValidLens lens = ValidLens::PerBatch(good_lens, 2);
         lens.kind = static_cast<ValidLens::Kind>(7);
         return e.MaskedSoftmax(xv, lens, Tensor(y, {2, 3, 4}));
       }, "valid_lens has an unknown kind"},
      {"lens negative", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::PerBatch(negative, 2), Tensor(y, {2, 3, 4}));
       }, "valid_lens[1] is -2"},
      {"lens negative per query", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::PerQuery(negative_per_query, 2, 3), Tensor(y, {2, 3, 4}));
       }, "valid_lens[1, 2] is -6"},
      {"lens wrong batch", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::PerBatch(five, 5), Tensor(y, {2, 3, 4}));
       }, "valid_lens has shape (5,)"},
      {"lens wrong queries", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::PerQuery(good_lens, 2, 1), Tensor(y, {2, 3, 4}));
       }, "valid_lens has shape (2, 1)"},
      {"y overlaps lens", [&](const Engine& e, float* y) {
         auto* lens_in_y = reinterpret_cast<int64_t*>(y);
         return e.MaskedSoftmax(xv, ValidLens::PerBatch(lens_in_y, 2), Tensor(y, {2, 3, 4}));
       }, "y overlaps valid_lens"},
      {"lens null", [&](const Engine& e, float* y) {
         return e.MaskedSoftmax(xv, ValidLens::PerBatch(static_cast<const int64_t*>(nullptr), 2),
                                Tensor(y, {2, 3, 4}));
       }, "valid_lens is null"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> y(x.size(), kSentinel);
    const Status s = c.call(DefaultEngine(), y.data());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("MaskedSoftmax: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.message_part), std::string::npos) << s.message();
    for (float v : y) ASSERT_EQ(v, kSentinel) << "a failed call wrote its output";
  }
}

}  // namespace
}  // namespace attnscore::test
