#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "api/isa.h"
#include "hwy/targets.h"
#include "kernels/dispatch.h"
#include "kernels/masked_softmax.h"

namespace attnscore::test {

namespace {
std::string GoldenPath(const std::string& test_case, const std::string& name) {
  return std::string(ATTNSCORE_GOLDEN_DIR) + "/" + test_case + "/" + name + ".npy";
}
}  // namespace

npy::NpyArray LoadGolden(const std::string& test_case, const std::string& name) {
  npy::NpyArray array;
  const Status s = npy::ReadNpy(GoldenPath(test_case, name), &array);
  EXPECT_TRUE(s.ok()) << s.message();
  return array;
}

bool GoldenExists(const std::string& test_case, const std::string& name) {
  return std::filesystem::exists(GoldenPath(test_case, name));
}

std::vector<int64_t> RowLengths(const std::vector<int64_t>& lens, bool per_query,
                                int64_t batch, int64_t queries) {
  std::vector<int64_t> rows(static_cast<size_t>(batch * queries));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      rows[static_cast<size_t>(b * queries + i)] =
          lens[static_cast<size_t>(per_query ? b * queries + i : b)];
    }
  }
  return rows;
}

std::vector<float> TransposeKeys(const std::vector<float>& k, int64_t batch, int64_t keys,
                                 int64_t depth) {
  std::vector<float> transposed(k.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t d = 0; d < depth; ++d)
        transposed[static_cast<size_t>((b * depth + d) * keys + j)] =
            k[static_cast<size_t>((b * keys + j) * depth + d)];
  return transposed;
}

std::vector<int64_t> TestLengths(int64_t batch, int64_t queries, int64_t keys, bool per_query,
                                 uint32_t seed) {
  const int64_t count = per_query ? batch * queries : batch;
  std::vector<int64_t> lens(static_cast<size_t>(count));
  std::mt19937 rng(seed);
  for (int64_t& l : lens) l = static_cast<int64_t>(rng() % (keys + 3));
  if (count > 3) lens[1] = 0, lens[2] = 1, lens[3] = keys;
  return lens;
}

ValidLens LensOf(const std::vector<int64_t>& lens, bool per_query, int64_t batch, int64_t queries) {
  if (lens.empty()) return ValidLens::None();
  return per_query ? ValidLens::PerQuery(lens.data(), batch, queries)
                   : ValidLens::PerBatch(lens.data(), batch);
}

std::vector<int64_t> RowLengths(const npy::NpyArray& lens, int64_t batch, int64_t queries) {
  std::vector<int64_t> values(static_cast<size_t>(lens.size()));
  for (size_t n = 0; n < values.size(); ++n) {
    values[n] = lens.dtype == npy::DType::kInt64 ? lens.data<int64_t>()[n]
                                                : lens.data<int32_t>()[n];
  }
  return RowLengths(values, lens.shape.size() == 2, batch, queries);
}

ValidLens LensView(const npy::NpyArray& lens) {
  const bool is64 = lens.dtype == npy::DType::kInt64;
  if (lens.shape.size() == 1) {
    return is64 ? ValidLens::PerBatch(lens.data<int64_t>(), lens.shape[0])
                : ValidLens::PerBatch(lens.data<int32_t>(), lens.shape[0]);
  }
  return is64 ? ValidLens::PerQuery(lens.data<int64_t>(), lens.shape[0], lens.shape[1])
              : ValidLens::PerQuery(lens.data<int32_t>(), lens.shape[0], lens.shape[1]);
}

double OutTolerance(const std::vector<float>& values) {
  double max_abs = 0;
  for (float x : values) max_abs = std::max(max_abs, static_cast<double>(std::abs(x)));
  return 1e-5 * (1 + max_abs);
}

void LoadGoldenAttention(const std::string& test_case, GoldenAttention* golden) {
  golden->queries = LoadGolden(test_case, "queries");
  golden->keys = LoadGolden(test_case, "keys");
  golden->values = LoadGolden(test_case, "values");
  golden->out = LoadGolden(test_case, "out");
  golden->weights = LoadGolden(test_case, "weights");
  golden->lens = ValidLens::None();
  if (GoldenExists(test_case, "valid_lens")) {
    golden->lens_array = LoadGolden(test_case, "valid_lens");
    golden->lens = LensView(golden->lens_array);
  }
}

void ExpectMatchesGolden(const GoldenAttention& golden, const std::vector<float>& out,
                         const std::vector<float>& weights) {
  const auto as_vector = [](const npy::NpyArray& a) {
    return std::vector<float>(a.data<float>(), a.data<float>() + a.size());
  };
  const auto want = [](const npy::NpyArray& a) {
    return std::vector<double>(a.data<float>(), a.data<float>() + a.size());
  };
  EXPECT_LE(MaxAbsDiff(out.data(), want(golden.out)), OutTolerance(as_vector(golden.values)));
  EXPECT_LE(MaxAbsDiff(weights.data(), want(golden.weights)), kWeightTolerance);
}

std::vector<double> ReferenceMaskedSoftmax(const std::vector<float>& x, int64_t batch,
                                           int64_t queries, int64_t keys,
                                           const std::vector<int64_t>& row_lens) {
  return ReferenceMaskedSoftmax(std::vector<double>(x.begin(), x.end()), batch, queries, keys,
                                row_lens);
}

std::vector<double> ReferenceMaskedSoftmax(const std::vector<double>& x, int64_t batch,
                                           int64_t queries, int64_t keys,
                                           const std::vector<int64_t>& row_lens) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < batch * queries; ++r) {
    const int64_t valid = row_lens.empty() ? keys : row_lens[static_cast<size_t>(r)];
    std::vector<double> row(static_cast<size_t>(keys));
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < keys; ++j) {
      row[j] = j < valid ? x[static_cast<size_t>(r * keys + j)] : -1e6;
      max = std::max(max, row[j]);
    }
    double sum = 0;
    for (int64_t j = 0; j < keys; ++j) sum += row[j] = std::exp(row[j] - max);
    for (int64_t j = 0; j < keys; ++j) y[static_cast<size_t>(r * keys + j)] = row[j] / sum;
  }
  return y;
}

std::vector<double> ReferenceDotProduct(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, int64_t batch,
                                        int64_t queries, int64_t keys, int64_t depth,
                                        int64_t value_dim, const std::vector<int64_t>& row_lens,
                                        std::vector<double>* weights) {
  std::vector<double> out(static_cast<size_t>(batch * queries * value_dim));
  weights->assign(static_cast<size_t>(batch * queries * keys), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(depth));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t r = b * queries + i;
      const int64_t valid = row_lens.empty() ? keys : row_lens[static_cast<size_t>(r)];
      std::vector<double> row(static_cast<size_t>(keys));
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < depth; ++d) {
          dot += static_cast<double>(q[static_cast<size_t>(r * depth + d)]) *
                 k[static_cast<size_t>((b * keys + j) * depth + d)];
        }
        row[j] = j < valid ? dot * scale : -1e6;
        max = std::max(max, row[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < keys; ++j) sum += row[j] = std::exp(row[j] - max);
      for (int64_t j = 0; j < keys; ++j) {
        const double w = row[j] / sum;
        (*weights)[static_cast<size_t>(r * keys + j)] = w;
        for (int64_t c = 0; c < value_dim; ++c) {
          out[static_cast<size_t>(r * value_dim + c)] +=
              w * v[static_cast<size_t>((b * keys + j) * value_dim + c)];
        }
      }
    }
  }
  return out;
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

double MaxAbsDiff(const float* actual, const std::vector<double>& expected) {
  double worst = 0;
  for (size_t n = 0; n < expected.size(); ++n) {
    if (std::isnan(actual[n]) != std::isnan(expected[n])) return std::nan("");
    if (!std::isnan(expected[n])) worst = std::max(worst, std::abs(actual[n] - expected[n]));
  }
  return worst;
}

const Engine& DefaultEngine() {
  static std::unique_ptr<Engine> engine = [] {
    std::unique_ptr<Engine> created;
    const Status s = Engine::Create(EngineOptions(), &created);
    if (!s.ok()) ADD_FAILURE() << s.message();
    return created;
  }();
  return *engine;
}

std::unique_ptr<Engine> EngineWithThreads(int threads) {
  EngineOptions options;
  options.threads = threads;
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  if (!s.ok()) ADD_FAILURE() << s.message();
  return engine;
}

std::unique_ptr<internal::ThreadTeam> DirectCall::MakeTeam(int threads) {
  std::unique_ptr<internal::ThreadTeam> team;
  const Status s = internal::ThreadTeam::Create(threads, &team);
  EXPECT_TRUE(s.ok()) << s.message();
  return team;
}

void PerTarget::SetUp() {
  kernels::SetDispatchTargets(GetParam());
  // The dispatch really goes to the target under test.
  ASSERT_STREQ(kernels::MaskedSoftmaxTarget(), hwy::TargetName(GetParam()));
}

// Back to what the process's ISA cap allows.
void PerTarget::TearDown() { kernels::SetDispatchTargets(internal::CapTargets()); }

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info) {
  return hwy::TargetName(info.param);
}

}  // namespace attnscore::test
