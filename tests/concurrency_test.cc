// One Engine (and one model) shared by several threads issuing mixed ops and
// shapes: every call must give bitwise the result of the same call made alone.
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

struct Call {
  bool dot;
  int64_t batch, queries, keys, depth, value_dim;
  std::vector<float> q, k, v;
  std::vector<int64_t> lens;  // per batch entry
  std::vector<float> expected;

  std::vector<float> Run(const Engine& engine) const {
    std::vector<float> out(static_cast<size_t>(batch * queries * (dot ? value_dim : keys)));
    const ValidLens valid = ValidLens::PerBatch(lens.data(), batch);
    const Status s =
        dot ? engine.DotProductAttention(ConstTensor(q.data(), {batch, queries, depth}),
                                         ConstTensor(k.data(), {batch, keys, depth}),
                                         ConstTensor(v.data(), {batch, keys, value_dim}), valid,
                                         Tensor(out.data(), {batch, queries, value_dim}))
            : engine.MaskedSoftmax(ConstTensor(q.data(), {batch, queries, keys}), valid,
                                   Tensor(out.data(), {batch, queries, keys}));
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }
};

std::vector<Call> MakeCalls() {
  std::vector<Call> calls;
  uint32_t seed = 1;
  for (int n = 0; n < 12; ++n) {
    Call c;
    c.dot = n % 3 != 0;
    c.batch = 1 + n % 3;
    c.queries = 1 + 7 * (n % 4);
    c.keys = 5 + 13 * n;
    c.depth = 8 + 8 * (n % 2);
    c.value_dim = 3 + n % 5;
    const int64_t q_size = c.dot ? c.batch * c.queries * c.depth : c.batch * c.queries * c.keys;
    c.q = RandomFloats(static_cast<size_t>(q_size), seed++);
    c.k = RandomFloats(static_cast<size_t>(c.batch * c.keys * c.depth), seed++);
    c.v = RandomFloats(static_cast<size_t>(c.batch * c.keys * c.value_dim), seed++);
    for (int64_t b = 0; b < c.batch; ++b) c.lens.push_back((b * 7 + n) % (c.keys + 2));
    calls.push_back(std::move(c));
  }
  return calls;
}

// Runs each of `calls` serially, then from kThreads threads at once, and
// expects every concurrent result to equal the serial one bit for bit.
void ExpectSerialResultsUnderLoad(const std::vector<std::function<std::vector<float>()>>& calls) {
  std::vector<std::vector<float>> expected;
  for (const auto& call : calls) expected.push_back(call());
  constexpr int kThreads = 4, kRounds = 60;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t n = static_cast<size_t>(round * 5 + t) % calls.size();
        const std::vector<float> got = calls[n]();
        if (got.size() != expected[n].size() ||
            std::memcmp(got.data(), expected[n].data(), got.size() * sizeof(float)) != 0) {
          ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

TEST(Concurrency, SharedEngineGivesTheSerialResults) {
  const std::vector<Call> calls = MakeCalls();
  std::vector<std::function<std::vector<float>()>> runs;
  for (const Call& c : calls) runs.push_back([&c] { return c.Run(DefaultEngine()); });
  ExpectSerialResultsUnderLoad(runs);
}

TEST(Concurrency, SharedConcatModelGivesTheSerialResults) {
  // Attn(Dq 6, Dk 5, M 17, Dv 4, O 3); calls of 1 to 3 entries with 1 to 22
  // queries, so both ways of W V (row by row, oneDNN) run side by side.
  constexpr int64_t kDq = 6, kDk = 5, kRows = 17, kDv = 4, kOut = 3;
  const std::vector<float> attn_w = RandomFloats(kRows * (kDq + kDk), 1, 0.3f),
                           attn_b = RandomFloats(kRows, 2, 0.3f),
                           combine_w = RandomFloats(kOut * (kDq + kDv), 3, 0.3f),
                           combine_b = RandomFloats(kOut, 4, 0.3f);
  std::unique_ptr<ConcatAttention> model;
  ASSERT_TRUE(ConcatAttention::Create(kDq, ConstTensor(attn_w.data(), {kRows, kDq + kDk}),
                                      ConstTensor(attn_b.data(), {kRows}),
                                      ConstTensor(combine_w.data(), {kOut, kDq + kDv}),
                                      ConstTensor(combine_b.data(), {kOut}), &model)
                  .ok());
  struct Inputs {
    int64_t batch, queries;
    std::vector<float> q, k, v;
    std::vector<int64_t> lens;
  };
  std::vector<Inputs> inputs;
  for (int n = 0; n < 8; ++n) {
    Inputs in{1 + n % 3, 1 + 7 * (n % 4), {}, {}, {}, {}};
    in.q = RandomFloats(static_cast<size_t>(in.batch * in.queries * kDq), 10 + n);
    in.k = RandomFloats(static_cast<size_t>(in.batch * in.queries * kDk), 20 + n);
    in.v = RandomFloats(static_cast<size_t>(in.batch * kRows * kDv), 30 + n);
    for (int64_t b = 0; b < in.batch; ++b) in.lens.push_back((b * 7 + n) % (kRows + 2));
    inputs.push_back(std::move(in));
  }
  std::vector<std::function<std::vector<float>()>> runs;
  for (const Inputs& in : inputs) {
    runs.push_back([&in, &model] {
      std::vector<float> out(static_cast<size_t>(in.batch * in.queries * (kOut + kRows)));
      const Status s = model->Forward(
          DefaultEngine(), ConstTensor(in.q.data(), {in.batch, in.queries, kDq}),
          ConstTensor(in.k.data(), {in.batch, in.queries, kDk}), ConstTensor(in.v.data(), {in.batch, kRows, kDv}),
          ValidLens::PerBatch(in.lens.data(), in.batch), Tensor(out.data(), {in.batch, in.queries, kOut}),
          Tensor(out.data() + in.batch * in.queries * kOut, {in.batch, in.queries, kRows}));
      EXPECT_TRUE(s.ok()) << s.message();
      return out;
    });
  }
  ExpectSerialResultsUnderLoad(runs);
}

}  // namespace
}  // namespace attnscore::test
