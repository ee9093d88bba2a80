// The oneDNN adapter: products against a double reference, whatever way a
// problem is cut into tasks, and bitwise the same when 1, 2 or 3 threads
// share the tasks. (The plan is made once here; that a plan made under any
// thread count computes the same is checked across processes in cli_test.)
#include "matmul/matmul.h"

#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

struct Case {
  std::string name;
  int64_t batch, m, k, n;
  bool transposed_b = false, shared_b = false, bias = false, accumulate = false;
  float scale = 1.0f;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Dense row-major A (batch, m, k) and C (batch, m, n); B (batch or 1, k, n),
// or its transpose (n, k) read through strides.
struct Operands {
  matmul::Problem problem;
  std::vector<float> a, b, c, bias;
};

Operands Make(const Case& t) {
  Operands o;
  matmul::Problem& p = o.problem;
  p.batch = t.batch;
  p.a = {t.m, t.k, t.m * t.k, t.k, 1};
  p.b = t.transposed_b ? matmul::Layout{t.k, t.n, t.k * t.n, 1, t.k}
                       : matmul::Layout{t.k, t.n, t.k * t.n, t.n, 1};
  p.c = {t.m, t.n, t.m * t.n, t.n, 1};
  p.scale = t.scale;
  p.shared_b = t.shared_b;
  p.bias = t.bias;
  p.accumulate = t.accumulate;
  o.a = RandomFloats(static_cast<size_t>(t.batch * t.m * t.k), 1);
  o.b = RandomFloats(static_cast<size_t>((t.shared_b ? 1 : t.batch) * t.k * t.n), 2);
  o.c = RandomFloats(static_cast<size_t>(t.batch * t.m * t.n), 3);  // what += adds to
  o.bias = RandomFloats(static_cast<size_t>(t.n), 4);
  return o;
}

std::vector<double> Reference(const Case& t, const Operands& o) {
  const matmul::Problem& p = o.problem;
  std::vector<double> c(o.c.size());
  for (int64_t e = 0; e < t.batch; ++e) {
    const float* b = o.b.data() + (t.shared_b ? 0 : e * p.b.batch_stride);
    for (int64_t i = 0; i < t.m; ++i) {
      for (int64_t j = 0; j < t.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < t.k; ++l) {
          sum += static_cast<double>(o.a[static_cast<size_t>(e * p.a.batch_stride + i * t.k + l)]) *
                 b[l * p.b.row_stride + j * p.b.col_stride];
        }
        const size_t at = static_cast<size_t>(e * p.c.batch_stride + i * t.n + j);
        c[at] = t.scale * sum + (t.bias ? o.bias[static_cast<size_t>(j)] : 0.0) +
                (t.accumulate ? o.c[at] : 0.0);
      }
    }
  }
  return c;
}

// Runs the plan with `threads` OpenMP threads, as an engine call would.
std::vector<float> RunWith(int threads, const Operands& o) {
  std::shared_ptr<const matmul::Plan> plan;
  const Status s = matmul::GetPlan(o.problem, &plan);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  std::vector<float> c = o.c;
  EngineOptions options;
  options.threads = threads;
  DirectCall direct(options);
  const Status run = plan->Run(direct.workspace(), o.a.data(), o.b.data(), c.data(),
                               o.problem.bias ? o.bias.data() : nullptr);
  EXPECT_TRUE(run.ok()) << run.message();
  return c;
}

class MatmulTasks : public ::testing::TestWithParam<Case> {};

// Tasks are about 32 MFLOP, as few as that allows, of near-equal size, rows
// in multiples of 16, but an entry's blocks of rows have at least 512 rows
// each (but the last) where the entry has 1,024 or more, else it is halved:
// these shapes are one task (the second just under the limit), whole
// entries per task with a shorter last block, blocks of rows with a shorter
// last one, and entries whose B makes their row blocks large.
INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTasks,
    ::testing::Values(
        Case{"one_task", 3, 5, 7, 9}, Case{"one_task_near_the_limit", 1, 256, 236, 256},
        Case{"entries_with_tail", 11, 100, 64, 300},                      // 6 + 5 entries
        Case{"rows_with_tail", 2, 1000, 64, 300, /*transposed_b=*/true},  // 512 + 488 rows
        Case{"rows_shared_b_bias", 3, 2000, 100, 90, false, true, true},  // 1008 + 992
        Case{"entries_accumulate_scaled", 9, 64, 128, 300, true, false, false, true,
             0.125f},                                                              // 5 + 4
        Case{"rows_accumulate_bias", 1, 1500, 257, 50, false, false, true, true},  // 752 + 748
        // 2 tasks by flops, fewer than 5000 / 512 allows: 2512 + 2488 rows.
        Case{"rows_by_flops_under_the_floor", 1, 5000, 64, 100},
        // 8 tasks by flops (9, odd); 2100 / 512 = 4 blocks: 3 x 528 + 516 rows.
        Case{"rows_at_least_512", 1, 2100, 128, 512, false, true, true},
        // 14 tasks by flops; 1600 / 512 = 3, odd: 2 x 800 rows.
        Case{"rows_at_least_512_even", 1, 1600, 1024, 128},
        // 10 tasks by flops; fewer than 1,024 rows: halves, 32 + 8.
        Case{"rows_halved_under_a_large_b", 1, 40, 2048, 2048}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST_P(MatmulTasks, MatchesReferenceForAnyThreadCount) {
  const Case& t = GetParam();
  const Operands o = Make(t);
  const std::vector<double> expected = Reference(t, o);
  const std::vector<float> one = RunWith(1, o), two = RunWith(2, o), three = RunWith(3, o);
  ASSERT_EQ(one.size(), expected.size());
  // fp32 products of k terms ~ N(0, 1): error grows like sqrt(k) ulps.
  EXPECT_LE(MaxAbsDiff(one.data(), expected), 1e-6 * (1 + t.k));
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * sizeof(float)));
}

TEST(Matmul, CachedPlansNameTheImplementationAndCountRuns) {
  const Case t{"listed", 2, 3, 4, 5};
  const Operands o = Make(t);
  RunWith(1, o);
  RunWith(2, o);
  bool found = false;
  for (const matmul::PlanSummary& plan : matmul::CachedPlans()) {
    if (plan.problem != "2 x (3 x 4) . (4 x 5)") continue;
    found = true;
    EXPECT_FALSE(plan.implementation.empty());
    EXPECT_GE(plan.runs, 2);
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace attnscore::test
