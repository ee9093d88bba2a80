// One Engine shared by several threads issuing mixed ops and shapes: every
// call must give bitwise the result of the same call made alone.
#include <cstring>
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

TEST(Concurrency, SharedEngineGivesTheSerialResults) {
  std::vector<Call> calls = MakeCalls();
  for (Call& c : calls) c.expected = c.Run(DefaultEngine());

  constexpr int kThreads = 4, kRounds = 60;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const Call& c = calls[static_cast<size_t>(round * 5 + t) % calls.size()];
        const std::vector<float> got = c.Run(DefaultEngine());
        if (got.size() != c.expected.size() ||
            std::memcmp(got.data(), c.expected.data(), got.size() * sizeof(float)) != 0) {
          ++mismatches[static_cast<size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

}  // namespace
}  // namespace attnscore::test
