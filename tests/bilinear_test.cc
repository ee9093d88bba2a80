// The bilinear score (docs/semantics.md section 6): golden data from the
// seed module (tools/make_golden.py), a double-precision reference on both
// of the dot product's paths, and bad input.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

class BilinearTest : public PerTarget {};
ATTNSCORE_INSTANTIATE_PER_TARGET(BilinearTest);

std::string GoldenModel(const std::string& name) {
  return std::string(ATTNSCORE_GOLDEN_DIR) + "/" + name + "/model.safetensors";
}

TEST_P(BilinearTest, GoldenCasesFromTheSeedModule) {
  for (const char* name : {"bilinear_per_query", "bilinear_per_batch_int32"}) {
    SCOPED_TRACE(name);
    GoldenAttention g;
    LoadGoldenAttention(name, &g);
    std::unique_ptr<BilinearAttention> model;
    const Status loaded = BilinearAttention::Load(GoldenModel(name), &model);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    const int64_t b = g.queries.shape[0], n = g.queries.shape[1], m = g.keys.shape[1],
                  dv = g.values.shape[2];
    EXPECT_EQ(model->query_size(), g.queries.shape[2]);
    EXPECT_EQ(model->key_size(), g.keys.shape[2]);
    std::vector<float> out(static_cast<size_t>(b * n * dv), kSentinel),
        weights(static_cast<size_t>(b * n * m), kSentinel);
    const Status s = model->Forward(
        DefaultEngine(), ConstTensor(g.queries.data<float>(), {b, n, g.queries.shape[2]}),
        ConstTensor(g.keys.data<float>(), {b, m, g.keys.shape[2]}),
        ConstTensor(g.values.data<float>(), {b, m, dv}), g.lens, Tensor(out.data(), {b, n, dv}),
        Tensor(weights.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    ExpectMatchesGolden(g, out, weights);
  }
}

// S = Q W Kᵀ in double, unscaled, then section 1's softmax and W V.
TEST_P(BilinearTest, MatchesTheReferenceOnTheRowAndMatmulPaths) {
  const int64_t dq = 7, dk = 11, dv = 5, m = 30;
  const std::vector<float> w = RandomFloats(static_cast<size_t>(dq * dk), 1, 0.3f);
  std::unique_ptr<BilinearAttention> model;
  ASSERT_TRUE(BilinearAttention::Create(ConstTensor(w.data(), {dq, dk}), &model).ok());
  for (int64_t n : {1, 2, 3, 17}) {  // up to 3 queries: the row path
    SCOPED_TRACE("N = " + std::to_string(n));
    const int64_t b = 3;
    const std::vector<float> q = RandomFloats(static_cast<size_t>(b * n * dq), 2),
                             k = RandomFloats(static_cast<size_t>(b * m * dk), 3),
                             v = RandomFloats(static_cast<size_t>(b * m * dv), 4, 2.0f);
    const std::vector<int64_t> lens = TestLengths(b, n, m, true, 5);
    std::vector<double> scores(static_cast<size_t>(b * n * m));
    for (int64_t e = 0; e < b; ++e)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
          double s = 0;
          for (int64_t x = 0; x < dq; ++x)
            for (int64_t y = 0; y < dk; ++y)
              s += static_cast<double>(q[(e * n + i) * dq + x]) * w[x * dk + y] *
                   k[(e * m + j) * dk + y];
          scores[static_cast<size_t>((e * n + i) * m + j)] = s;
        }
    const std::vector<double> want_w =
        ReferenceMaskedSoftmax(scores, b, n, m, RowLengths(lens, true, b, n));
    std::vector<double> want_out(static_cast<size_t>(b * n * dv), 0.0);
    for (int64_t e = 0; e < b; ++e)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < dv; ++c)
          for (int64_t j = 0; j < m; ++j)
            want_out[static_cast<size_t>((e * n + i) * dv + c)] +=
                want_w[static_cast<size_t>((e * n + i) * m + j)] * v[(e * m + j) * dv + c];
    std::vector<float> out(want_out.size(), kSentinel), weights(want_w.size(), kSentinel);
    const Status s = model->Forward(
        DefaultEngine(), ConstTensor(q.data(), {b, n, dq}), ConstTensor(k.data(), {b, m, dk}),
        ConstTensor(v.data(), {b, m, dv}), LensOf(lens, true, b, n), Tensor(out.data(), {b, n, dv}),
        Tensor(weights.data(), {b, n, m}));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_LE(MaxAbsDiff(weights.data(), want_w), kWeightTolerance);
    EXPECT_LE(MaxAbsDiff(out.data(), want_out), OutTolerance(v));
  }
}

TEST(BilinearErrors, RejectsBadParametersAndInputNamingThem) {
  std::vector<float> w(6 * 4, 0.5f);
  std::unique_ptr<BilinearAttention> model;
  EXPECT_EQ(BilinearAttention::Create(ConstTensor(w.data(), {24}), &model).message(),
            "BilinearAttention: W.weight must have rank 2 (Dq, Dk) but has rank 1");
  w[5] = NAN;
  EXPECT_NE(
      BilinearAttention::Create(ConstTensor(w.data(), {6, 4}), &model).message().find("W.weight"),
      std::string::npos);
  w[5] = 0.5f;
  const Status loaded = BilinearAttention::Load(GoldenModel("additive_toy"), &model);
  EXPECT_EQ(loaded.message(), GoldenModel("additive_toy") +
                                  ": unexpected tensor \"W_k.weight\"; a bilinear attention "
                                  "state_dict has only W.weight");
  ASSERT_TRUE(BilinearAttention::Create(ConstTensor(w.data(), {6, 4}), &model).ok());
  const std::vector<float> q(2 * 3 * 6, 1.0f), k(2 * 5 * 4, 1.0f), v(2 * 5 * 2, 1.0f);
  std::vector<float> out(2 * 3 * 2, kSentinel);
  EXPECT_EQ(model
                ->Forward(DefaultEngine(), ConstTensor(q.data(), {2, 3, 6}),
                          ConstTensor(k.data(), {2, 4, 5}), ConstTensor(v.data(), {2, 5, 2}),
                          ValidLens::None(), Tensor(out.data(), {2, 3, 2}))
                .message(),
            "BilinearAttention: keys has shape (2, 4, 5) but must be (B, M, Dk) = (2, *, 4)");
  OutputShapes shapes;
  ASSERT_TRUE(model
                  ->Check(ConstTensor(q.data(), {2, 3, 6}), ConstTensor(k.data(), {2, 5, 4}),
                          ConstTensor(v.data(), {2, 5, 2}), ValidLens::None(), &shapes)
                  .ok());
  EXPECT_EQ(shapes.out, (std::array<int64_t, 3>{2, 3, 2}));
  EXPECT_EQ(shapes.attention_weights, (std::array<int64_t, 3>{2, 3, 5}));
  EXPECT_EQ(model
                ->Forward(DefaultEngine(), ConstTensor(q.data(), {2, 3, 6}),
                          ConstTensor(k.data(), {2, 5, 4}), ConstTensor(v.data(), {2, 5, 2}),
                          ValidLens::None(), Tensor(out.data(), {2, 3, 3}))
                .message(),
            "BilinearAttention: out has shape (2, 3, 3) but must be (B, N, Dv) = (2, 3, 2)");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
}

}  // namespace
}  // namespace attnscore::test
