// Packed variable-length batches of the multi-head op (docs/semantics.md
// section 5.8): sequence s is rows cu_q[s]..cu_q[s+1]-1 of Q and out and
// rows cu_k[s]..cu_k[s+1]-1 of K and V, its own call. Each sequence against
// float64 math on its own rows, and against the same call made alone (the
// same bits); sequences of no query; the same bits for any thread count;
// the refusals, with nothing written.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "multihead_cases.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

// A packed batch: each sequence's queries and keys, Hq, Hkv, D, Dv, and its
// random rows.
struct Packed {
  std::vector<int64_t> queries, keys;  // per sequence
  int64_t heads, kv_heads, depth, value_dim;
  std::vector<int64_t> cu_q{0}, cu_k{0};
  std::vector<float> q, k, v;

  Packed(std::vector<int64_t> n, std::vector<int64_t> m, int64_t hq, int64_t hkv, int64_t d,
         int64_t dv, uint32_t seed)
      : queries(std::move(n)),
        keys(std::move(m)),
        heads(hq),
        kv_heads(hkv),
        depth(d),
        value_dim(dv) {
    for (size_t s = 0; s < queries.size(); ++s) {
      cu_q.push_back(cu_q.back() + queries[s]);
      cu_k.push_back(cu_k.back() + keys[s]);
    }
    q = RandomFloats(static_cast<size_t>(cu_q.back() * heads * depth), seed);
    k = RandomFloats(static_cast<size_t>(cu_k.back() * kv_heads * depth), seed + 1);
    v = RandomFloats(static_cast<size_t>(cu_k.back() * kv_heads * value_dim), seed + 2, 3.0f);
  }
  int64_t tq() const { return cu_q.back(); }
  int64_t tk() const { return cu_k.back(); }
  ConstTensor Q() const { return ConstTensor(q.data(), {tq(), heads, depth}); }
  ConstTensor K() const { return ConstTensor(k.data(), {tk(), kv_heads, depth}); }
  ConstTensor V() const { return ConstTensor(v.data(), {tk(), kv_heads, value_dim}); }
  // Sequence s as a call of its own: its shape and its rows.
  Shape ShapeOf(size_t s) const {
    return {1, queries[s], keys[s], heads, kv_heads, depth, value_dim};
  }
  Inputs InputsOf(size_t s) const {
    Inputs in(ShapeOf(s), 1);
    const auto rows = [](const std::vector<float>& x, int64_t first, int64_t count, int64_t row) {
      return std::vector<float>(x.begin() + first * row, x.begin() + (first + count) * row);
    };
    in.q = rows(q, cu_q[s], queries[s], heads * depth);
    in.k = rows(k, cu_k[s], keys[s], kv_heads * depth);
    in.v = rows(v, cu_k[s], keys[s], kv_heads * value_dim);
    return in;
  }
};

Status RunPacked(const Engine& engine, const Packed& p, const MultiHeadOptions& options,
                 std::vector<float>* out) {
  out->assign(static_cast<size_t>(p.tq() * p.heads * p.value_dim), kSentinel);
  return engine.MultiHeadAttentionPacked(
      p.Q(), p.K(), p.V(), SequenceOffsets::Of(p.cu_q.data(), static_cast<int64_t>(p.cu_q.size())),
      SequenceOffsets::Of(p.cu_k.data(), static_cast<int64_t>(p.cu_k.size())), options,
      Tensor(out->data(), {p.tq(), p.heads, p.value_dim}));
}

// Issue 51's batch: lengths 37, 1, 8, 64 and 3, each with a few keys before
// its queries (a cache's), causal, a window and sinks, GQA.
TEST(MultiHeadPacked, RaggedSequencesMatchTheirOwnMathAndTheirOwnCalls) {
  const Packed p({37, 1, 8, 64, 3}, {40, 5, 8, 100, 19}, 4, 2, 16, 8, 11);
  Form form{Causal::kBottomRight};
  form.window_left = 20;
  form.window_right = 0;
  form.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  MultiHeadOptions options;
  options.causal = form.causal;
  options.window = {form.window_left, form.window_right};
  options.sinks = ConstTensor(form.sinks.data(), {p.heads});
  std::vector<float> out;
  ASSERT_TRUE(RunPacked(DefaultEngine(), p, options, &out).ok());
  for (size_t s = 0; s < p.queries.size(); ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    const Shape shape = p.ShapeOf(s);
    const Inputs in = p.InputsOf(s);
    std::vector<double> weights;
    const std::vector<double> want = Reference(shape, in, {}, false, form, &weights);
    const float* got = out.data() + p.cu_q[s] * p.heads * p.value_dim;
    EXPECT_LE(MaxAbsDiff(got, want), OutTolerance(in.v));
    const Result alone = RunMultiHead(DefaultEngine(), shape, in, ValidLens::None(), options);
    EXPECT_TRUE(std::equal(alone.out.begin(), alone.out.end(), got));
  }
}

// A sequence of no query (idle) is skipped, whatever its keys; one of no
// query and no key too. Thread counts give the same bits.
TEST(MultiHeadPacked, IdleSequencesAndThreads) {
  const Packed p({3, 0, 70, 0, 1}, {9, 4, 80, 0, 3000}, 8, 2, 32, 16, 21);
  MultiHeadOptions options;
  options.causal = Causal::kBottomRight;
  std::vector<float> one, two;
  ASSERT_TRUE(RunPacked(DefaultEngine(), p, options, &one).ok());
  ASSERT_TRUE(RunPacked(*EngineWithThreads(2), p, options, &two).ok());
  EXPECT_EQ(one, two);
  EXPECT_TRUE(std::none_of(one.begin(), one.end(), [](float x) { return x == kSentinel; }));
  for (size_t s : {size_t{0}, size_t{2}, size_t{4}}) {
    const Result alone =
        RunMultiHead(DefaultEngine(), p.ShapeOf(s), p.InputsOf(s), ValidLens::None(), options);
    EXPECT_TRUE(std::equal(alone.out.begin(), alone.out.end(),
                           one.begin() + p.cu_q[s] * p.heads * p.value_dim));
  }
}

// Offsets that do not begin at 0, decrease, miss the rows' count or differ
// in number; a sequence with queries and no key; a sequence its own call
// would refuse (bottom-right, fewer keys than queries); a bias: each
// refused by name, nothing written, and by CheckMultiHeadAttentionPacked
// alike, which reports out's shape for a good call.
TEST(MultiHeadPacked, RefusesBadOffsetsAndSequencesNamingThemAndWritesNothing) {
  const Packed p({2, 3}, {4, 5}, 2, 1, 8, 4, 31);
  std::vector<float> out(static_cast<size_t>(p.tq() * p.heads * p.value_dim), kSentinel);
  // The call's refusal, which its Check twin must make too (but for out's
  // own, which Check has no out to see).
  const auto run = [&](std::vector<int64_t> cu_q, std::vector<int64_t> cu_k,
                       const MultiHeadOptions& options) {
    const SequenceOffsets offsets_q =
        SequenceOffsets::Of(cu_q.data(), static_cast<int64_t>(cu_q.size()));
    const SequenceOffsets offsets_k =
        SequenceOffsets::Of(cu_k.data(), static_cast<int64_t>(cu_k.size()));
    const std::string message =
        DefaultEngine()
            .MultiHeadAttentionPacked(p.Q(), p.K(), p.V(), offsets_q, offsets_k, options,
                                      Tensor(out.data(), {p.tq(), p.heads, p.value_dim}))
            .message();
    std::array<int64_t, 3> shape{};
    const Status checked = DefaultEngine().CheckMultiHeadAttentionPacked(
        p.Q(), p.K(), p.V(), offsets_q, offsets_k, options, &shape);
    if (message.find("out overlaps") == std::string::npos) {
      EXPECT_EQ(checked.message(), message);
    } else {
      EXPECT_TRUE(checked.ok()) << checked.message();
    }
    if (checked.ok()) {
      EXPECT_EQ(shape, (std::array<int64_t, 3>{p.tq(), p.heads, p.value_dim}));
    }
    return message;
  };
  const MultiHeadOptions plain;
  EXPECT_EQ(run({0, 2, 5}, {0, 4, 9}, plain), "");
  std::fill(out.begin(), out.end(), kSentinel);
  EXPECT_EQ(run({1, 2, 5}, {0, 4, 9}, plain),
            "MultiHeadAttentionPacked: cu_seqlens_q[0] is 1; the first sequence begins at row 0");
  EXPECT_EQ(run({0, 3, 2, 5}, {0, 4, 4, 9}, plain),
            "MultiHeadAttentionPacked: cu_seqlens_q[2] is 2, below cu_seqlens_q[1] = 3; offsets "
            "must not decrease");
  EXPECT_EQ(run({0, 2, 5}, {0, 4, 8}, plain),
            "MultiHeadAttentionPacked: cu_seqlens_k[2] is 8; the last offset must be the packed "
            "rows, 9");
  EXPECT_EQ(run({0, 2, 5}, {0, 4, 4, 9}, plain),
            "MultiHeadAttentionPacked: cu_seqlens_q has 3 offsets and cu_seqlens_k 4; both are "
            "S + 1");
  EXPECT_EQ(run({0, 2, 5}, {0, 9, 9}, plain),
            "MultiHeadAttentionPacked: sequence 1 has 3 queries and no key; each sequence with "
            "queries needs keys");
  MultiHeadOptions causal;
  causal.causal = Causal::kBottomRight;
  const std::string refused = run({0, 2, 5}, {0, 7, 9}, causal);
  EXPECT_EQ(refused.rfind("MultiHeadAttentionPacked: sequence 1: causal bottom-right aligns the "
                          "last query with the last key",
                          0),
            0u)
      << refused;
  MultiHeadOptions biased;
  std::vector<float> bias(1, 0.0f);
  biased.bias = ConstTensor(bias.data(), {1, 1, 1, 1});
  EXPECT_EQ(run({0, 2, 5}, {0, 4, 9}, biased),
            "MultiHeadAttentionPacked: a bias or mask is shaped (B, Hq, N, M) for one batch; a "
            "packed call takes neither");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
  // Sinks inside the last sequence's rows of out: refused before sequence 0
  // is written.
  MultiHeadOptions sunk;
  sunk.sinks = ConstTensor(out.data() + out.size() - 2, {p.heads});
  EXPECT_EQ(run({0, 2, 5}, {0, 4, 9}, sunk), "MultiHeadAttentionPacked: out overlaps sinks");
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }));
}

}  // namespace
}  // namespace attnscore::test
