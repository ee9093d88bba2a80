// Shared test helpers: golden files, double-precision references, and a
// fixture that runs a test once per Highway target the CPU supports.
#ifndef ATTNSCORE_TESTS_TEST_UTIL_H_
#define ATTNSCORE_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "base/call_scope.h"
#include "hwy/targets.h"
#include "npy/npy.h"

namespace attnscore::test {

// docs/semantics.md section 7.1's tolerances: attention weights within 1e-5 absolute,
// outputs within 1e-5 · (1 + max|V|).
inline constexpr double kWeightTolerance = 1e-5;
double OutTolerance(const std::vector<float>& values);

// Marks outputs a failed call must not touch.
inline constexpr float kSentinel = -12345.0f;

// tests/golden/<case>/<name>.npy; fails the test if it cannot be read.
npy::NpyArray LoadGolden(const std::string& test_case, const std::string& name);
bool GoldenExists(const std::string& test_case, const std::string& name);

// An attention golden case (make_golden.py): inputs, optional valid lengths,
// and the expected out and weights.
struct GoldenAttention {
  npy::NpyArray queries, keys, values, out, weights, lens_array;
  ValidLens lens = ValidLens::None();  // a view of lens_array
};
void LoadGoldenAttention(const std::string& test_case, GoldenAttention* golden);

// out and weights (dense, as the golden's shapes) within the tolerances.
void ExpectMatchesGolden(const GoldenAttention& golden, const std::vector<float>& out,
                         const std::vector<float>& weights);

// Valid lengths of every row, as the reference reads them: lens[b * N + i].
// `per_query`: one length per (b, i); otherwise per batch entry.
std::vector<int64_t> RowLengths(const std::vector<int64_t>& lens, bool per_query,
                                int64_t batch, int64_t queries);
// Lengths for B entries (or B·N queries when `per_query`) in [0, M + 2],
// with 0, 1 and M among them when there are more than 3.
std::vector<int64_t> TestLengths(int64_t batch, int64_t queries, int64_t keys, bool per_query,
                                 uint32_t seed);
// K (B, M, D) stored as (B, D, M): viewed back as (B, M, D) with strides
// {D·M, 1, M}, it sends an op down its strided (oneDNN) path.
std::vector<float> TransposeKeys(const std::vector<float>& k, int64_t batch, int64_t keys,
                                 int64_t depth);
// `lens` as a ValidLens view: none when empty, else per query or per batch.
ValidLens LensOf(const std::vector<int64_t>& lens, bool per_query, int64_t batch, int64_t queries);
// Lengths read from a golden valid_lens.npy (int32 or int64, (B,) or (B, N)).
std::vector<int64_t> RowLengths(const npy::NpyArray& lens, int64_t batch, int64_t queries);
// The same file as a ValidLens view (the array must outlive it).
ValidLens LensView(const npy::NpyArray& lens);

// docs/semantics.md section 1, in double, literally: positions j >= L become
// -1e6, then a softmax over all M. x is (B, N, M) dense; row_lens from
// RowLengths, or empty for no lengths.
std::vector<double> ReferenceMaskedSoftmax(const std::vector<float>& x, int64_t batch,
                                           int64_t queries, int64_t keys,
                                           const std::vector<int64_t>& row_lens);
std::vector<double> ReferenceMaskedSoftmax(const std::vector<double>& x, int64_t batch,
                                           int64_t queries, int64_t keys,
                                           const std::vector<int64_t>& row_lens);

// docs/semantics.md section 2 in double. Dense inputs; returns out (B, N, Dv) and
// sets *weights (B, N, M).
std::vector<double> ReferenceDotProduct(const std::vector<float>& q, const std::vector<float>& k,
                                        const std::vector<float>& v, int64_t batch,
                                        int64_t queries, int64_t keys, int64_t depth,
                                        int64_t value_dim, const std::vector<int64_t>& row_lens,
                                        std::vector<double>* weights);

// n floats ~ N(0, scale^2) from `seed`.
std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f);

// x rounded to the nearest bfloat16, ties to even, written from the format's
// definition (the engine's own rounding is not used): finite inputs only.
inline float RoundedToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t low = bits & 0xFFFFu, kept = bits >> 16;
  uint32_t word = kept;
  if (low > 0x8000u || (low == 0x8000u && (kept & 1u) != 0)) ++word;
  bits = word << 16;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

// Largest |a - b| over the arrays (NaN if any pair differs in NaN-ness).
double MaxAbsDiff(const float* actual, const std::vector<double>& expected);

// One engine with default options (1 thread, best ISA) for the whole run.
const Engine& DefaultEngine();

// A new engine of `threads` threads, other options default; null, with the
// test failed, where it cannot be made.
std::unique_ptr<Engine> EngineWithThreads(int threads);

// A call context for running the engine's internals directly (a path, a
// plan, a resolution of lengths): the given options, a team of their
// threads and a workspace for it, as an engine call has.
class DirectCall {
 public:
  explicit DirectCall(const EngineOptions& options = EngineOptions())
      : options_(options),
        team_(MakeTeam(options.threads)),
        workspace_(options.threads, team_.get()),
        call_{options_, workspace_} {}
  const internal::CallContext& call() const { return call_; }
  internal::Workspace& workspace() { return workspace_; }

 private:
  static std::unique_ptr<internal::ThreadTeam> MakeTeam(int threads);
  EngineOptions options_;
  std::unique_ptr<internal::ThreadTeam> team_;
  internal::Workspace workspace_;
  internal::CallContext call_;
};

// Runs each test once per Highway target the CPU supports, the library was
// built for and the process's ISA cap allows (test_main.cc applies the cap
// first), with dispatch forced to that target.
class PerTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override;
  void TearDown() override;
};

std::string TargetParamName(const ::testing::TestParamInfo<int64_t>& info);

}  // namespace attnscore::test

#define ATTNSCORE_INSTANTIATE_PER_TARGET(suite)                                   \
  INSTANTIATE_TEST_SUITE_P(AllTargets, suite,                                     \
                           ::testing::ValuesIn(::hwy::SupportedAndGeneratedTargets()), \
                           ::attnscore::test::TargetParamName)

#endif  // ATTNSCORE_TESTS_TEST_UTIL_H_
