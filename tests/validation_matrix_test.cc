// The input-validation matrix: for each op, malformed inputs of every kind a
// server may be handed (wrong rank, mismatched or zero dims, null data,
// negative or overlapping strides, shapes too large to address, bad valid
// lengths, outputs overlapping inputs). Each must give InvalidArgument with
// a message naming the argument, and leave every buffer, inputs and outputs,
// exactly as it was. docs/reliability.md describes these rows.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/additive.h"
#include "attnscore/concat.h"
#include "test_util.h"

namespace attnscore::test {
namespace {

constexpr int64_t B = 2, N = 3, M = 5;
constexpr int64_t kHuge = int64_t{1} << 40;

// Every buffer a call may touch, filled with a sentinel or data, and a
// snapshot to prove a refused call changed none of them.
struct Buffers {
  std::vector<float> q, k, v, x, out, weights;
  std::vector<int64_t> lens64;
  std::vector<int32_t> lens32;

  Buffers() {
    q = RandomFloats(256, 1);
    k = RandomFloats(256, 2);
    v = RandomFloats(256, 3);
    x = RandomFloats(256, 4);
    out.assign(256, kSentinel);
    weights.assign(256, kSentinel);
    lens64 = {3, 1, 4, 1, 5, 2};
    lens32 = {2, 0, 5, 1, 3, 4};
  }
  bool operator==(const Buffers& o) const {
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    return same(q, o.q) && same(k, o.k) && same(v, o.v) && same(x, o.x) && same(out, o.out) &&
           same(weights, o.weights) && same(lens64, o.lens64) && same(lens32, o.lens32);
  }
};

struct Case {
  std::string name;
  std::string message_part;  // names the argument
  std::function<Status(Buffers&)> call;
  std::function<void(Buffers&)> prepare = [](Buffers&) {};  // e.g. plant a bad length
};

// What the message must say is wrong, by the kind of case (its name): a case
// refused for another reason than the one it plants fails.
std::string ReasonFor(const std::string& name) {
  const struct {
    const char *in_name, *reason;
  } rules[] = {
      {"differ_in_count", "dims and strides differ in count"},
      {"_rank_", "must have rank 3"},
      {"_empty", "must have rank 3"},
      {"lens_null", "valid_lens is null"},
      {"_null", "is null"},
      {"_zero_", "every dim must be >= 1"},
      {"negative_stride", "has a negative stride"},
      {"share_memory", "make elements share memory"},
      {"lens_inside", "overlaps valid_lens"},
      {"overlaps", "overlaps"},
      {"strides_too_large", "that reach past what can be addressed"},
      {"too_large", "too large to address"},
      {"lens_negative", "lengths must be >= 0"},
      {"lens_int32_min", "is -2147483648; lengths must be >= 0"},
      {"lens_unknown_kind", "has an unknown kind"},
      {"lens_per_batch", "but the batch size is"},
      {"lens_per_query", "but (batch, queries) is"},
      {"_wrong_", "but must be"},
  };
  for (const auto& rule : rules) {
    if (name.find(rule.in_name) != std::string::npos) return rule.reason;
  }
  ADD_FAILURE() << "no reason known for case " << name;
  return name;
}

void ExpectRefused(const Case& c) {
  Buffers buffers;
  c.prepare(buffers);
  const Buffers before = buffers;
  const Status s = c.call(buffers);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_NE(s.message().find(c.message_part), std::string::npos)
      << "'" << s.message() << "' does not name " << c.message_part;
  const std::string reason = ReasonFor(c.name);
  EXPECT_NE(s.message().find(reason), std::string::npos)
      << "'" << s.message() << "' does not say " << reason;
  EXPECT_TRUE(buffers == before) << "a refused call changed a buffer";
}

// ---- the attention ops: one generator for dot, additive and concat ---------

// Feature sizes of an attention op's arguments, and the call itself.
struct AttentionOp {
  int64_t query_size, key_size, value_size, out_size;
  bool keys_per_query;  // concat: K is (B, N, Dk), one key per query
  std::function<Status(ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens, Tensor out,
                       Tensor weights)>
      call;
};

std::vector<Case> AttentionCases(const AttentionOp& op) {
  const int64_t dq = op.query_size, dk = op.key_size, dv = op.value_size, o = op.out_size;
  const int64_t key_rows = op.keys_per_query ? N : M;
  // The well-formed views, rebuilt for each call on that call's buffers.
  struct Views {
    ConstTensor q, k, v;
    Tensor out, weights;
    ValidLens lens;
  };
  auto good = [=](Buffers& b) {
    return Views{ConstTensor(b.q.data(), {B, N, dq}), ConstTensor(b.k.data(), {B, key_rows, dk}),
                 ConstTensor(b.v.data(), {B, M, dv}), Tensor(b.out.data(), {B, N, o}),
                 Tensor(b.weights.data(), {B, N, M}), ValidLens::PerBatch(b.lens64.data(), B)};
  };
  // A case: start from the good views and break one thing.
  auto make = [=](std::string name, std::string part, std::function<void(Views&, Buffers&)> edit,
                  std::function<void(Buffers&)> prepare = [](Buffers&) {}) {
    return Case{std::move(name), std::move(part),
                [=](Buffers& b) {
                  Views w = good(b);
                  edit(w, b);
                  return op.call(w.q, w.k, w.v, w.lens, w.out, w.weights);
                },
                prepare};
  };
  return {
      make("queries_rank_2", "queries", [=](Views& w, Buffers& b) { w.q = ConstTensor(b.q.data(), {B * N, dq}); }),
      make("queries_rank_4", "queries", [=](Views& w, Buffers& b) { w.q = ConstTensor(b.q.data(), {B, N, dq, 1}); }),
      make("keys_rank_2", "keys", [=](Views& w, Buffers& b) { w.k = ConstTensor(b.k.data(), {B * key_rows, dk}); }),
      make("values_rank_4", "values", [=](Views& w, Buffers& b) { w.v = ConstTensor(b.v.data(), {B, M, dv, 1}); }),
      make("out_rank_2", "out", [=](Views& w, Buffers& b) { w.out = Tensor(b.out.data(), {B * N, o}); }),
      make("weights_rank_2", "weights", [=](Views& w, Buffers& b) { w.weights = Tensor(b.weights.data(), {B * N, M}); }),
      make("queries_null", "queries", [=](Views& w, Buffers&) { w.q = ConstTensor(nullptr, {B, N, dq}); }),
      make("keys_null", "keys", [=](Views& w, Buffers&) { w.k = ConstTensor(nullptr, {B, key_rows, dk}); }),
      make("values_null", "values", [=](Views& w, Buffers&) { w.v = ConstTensor(nullptr, {B, M, dv}); }),
      make("out_null", "out", [=](Views& w, Buffers&) { w.out = Tensor(nullptr, {B, N, o}); }),
      make("weights_null_with_a_shape", "weights", [=](Views& w, Buffers&) { w.weights = Tensor(nullptr, {B, N, M}); }),
      make("queries_zero_batch", "queries", [=](Views& w, Buffers& b) { w.q = ConstTensor(b.q.data(), {0, N, dq}); }),
      make("keys_zero_rows", "keys", [=](Views& w, Buffers& b) { w.k = ConstTensor(b.k.data(), {B, 0, dk}); }),
      make("values_zero_features", "values", [=](Views& w, Buffers& b) { w.v = ConstTensor(b.v.data(), {B, M, 0}); }),
      make("keys_wrong_features", "keys", [=](Views& w, Buffers& b) { w.k = ConstTensor(b.k.data(), {B, key_rows, dk + 1}); }),
      make("keys_wrong_batch", "keys", [=](Views& w, Buffers& b) { w.k = ConstTensor(b.k.data(), {B + 1, key_rows, dk}); }),
      make("values_wrong_batch", "values", [=](Views& w, Buffers& b) { w.v = ConstTensor(b.v.data(), {B + 1, M, dv}); }),
      make("values_wrong_rows", "values", [=](Views& w, Buffers& b) { w.v = ConstTensor(b.v.data(), {B, M + 1, dv}); }),
      make("out_wrong_features", "out", [=](Views& w, Buffers& b) { w.out = Tensor(b.out.data(), {B, N, o + 1}); }),
      make("out_wrong_queries", "out", [=](Views& w, Buffers& b) { w.out = Tensor(b.out.data(), {B, N + 1, o}); }),
      make("weights_wrong_keys", "weights", [=](Views& w, Buffers& b) { w.weights = Tensor(b.weights.data(), {B, N, M + 1}); }),
      make("weights_wrong_batch", "weights", [=](Views& w, Buffers& b) { w.weights = Tensor(b.weights.data(), {B - 1, N, M}); }),
      make("queries_negative_stride", "queries", [=](Views& w, Buffers& b) {
        w.q = ConstTensor(b.q.data() + 64, {B, N, dq}, {N * dq, -dq, 1});
      }),
      make("values_negative_stride", "values", [=](Views& w, Buffers& b) {
        w.v = ConstTensor(b.v.data() + 64, {B, M, dv}, {M * dv, dv, -1});
      }),
      make("out_elements_share_memory", "out", [=](Views& w, Buffers& b) {
        w.out = Tensor(b.out.data(), {B, N, o}, {N * o, o, 0});
      }),
      make("weights_rows_share_memory", "weights", [=](Views& w, Buffers& b) {
        w.weights = Tensor(b.weights.data(), {B, N, M}, {N * M, 0, 1});
      }),
      make("out_overlaps_queries", "out overlaps queries", [=](Views& w, Buffers& b) {
        w.out = Tensor(b.q.data() + 1, {B, N, o});
      }),
      make("weights_overlaps_keys", "weights overlaps keys", [=](Views& w, Buffers& b) {
        w.weights = Tensor(b.k.data(), {B, N, M});
      }),
      make("weights_overlaps_out", "overlaps", [=](Views& w, Buffers& b) {
        w.weights = Tensor(b.out.data() + 3, {B, N, M});
      }),
      make("queries_too_large_to_address", "queries", [=](Views& w, Buffers& b) {
        w.q = ConstTensor(b.q.data(), {kHuge, kHuge, dq});
      }),
      make("keys_strides_too_large", "keys", [=](Views& w, Buffers& b) {
        w.k = ConstTensor(b.k.data(), {B, key_rows, dk}, {INT64_MAX / 2, dk, 1});
      }),
      make("values_dims_and_strides_differ_in_count", "values", [=](Views& w, Buffers& b) {
        w.v = ConstTensor(b.v.data(), {B, M, dv}, {M * dv, dv});
      }),
      make("lens_negative_int64", "valid_lens[1]",
           [=](Views& w, Buffers& b) { w.lens = ValidLens::PerBatch(b.lens64.data(), B); },
           [](Buffers& b) { b.lens64[1] = -1; }),
      make("lens_negative_int32_per_query", "valid_lens[1, 2]",
           [=](Views& w, Buffers& b) { w.lens = ValidLens::PerQuery(b.lens32.data(), B, N); },
           [](Buffers& b) { b.lens32[5] = -7; }),
      make("lens_per_batch_wrong_shape", "valid_lens", [=](Views& w, Buffers& b) {
        w.lens = ValidLens::PerBatch(b.lens64.data(), B + 1);
      }),
      make("lens_per_query_wrong_shape", "valid_lens", [=](Views& w, Buffers& b) {
        w.lens = ValidLens::PerQuery(b.lens32.data(), B, N - 1);
      }),
      make("lens_null", "valid_lens is null", [=](Views& w, Buffers&) {
        w.lens = ValidLens::PerBatch(static_cast<const int64_t*>(nullptr), B);
      }),
      make("lens_inside_out", "out overlaps valid_lens", [=](Views& w, Buffers& b) {
        w.lens = ValidLens::PerBatch(reinterpret_cast<const int32_t*>(b.out.data() + 2), B);
      }),
      make("lens_inside_weights", "weights overlaps valid_lens", [=](Views& w, Buffers& b) {
        w.lens = ValidLens::PerQuery(reinterpret_cast<const int64_t*>(b.weights.data() + 4), B, N);
      }),
      make("lens_unknown_kind", "valid_lens", [=](Views& w, Buffers& b) {
        w.lens = ValidLens::PerBatch(b.lens64.data(), B);
        w.lens.kind = static_cast<ValidLens::Kind>(7);
      }),
  };
}

// ---- the masked softmax -----------------------------------------------------

std::vector<Case> SoftmaxCases() {
  struct Views {
    ConstTensor x;
    Tensor y;
    ValidLens lens;
  };
  auto make = [](std::string name, std::string part, std::function<void(Views&, Buffers&)> edit,
                 std::function<void(Buffers&)> prepare = [](Buffers&) {}) {
    return Case{std::move(name), std::move(part),
                [=](Buffers& b) {
                  Views w{ConstTensor(b.x.data(), {B, N, M}), Tensor(b.out.data(), {B, N, M}),
                          ValidLens::PerQuery(b.lens32.data(), B, N)};
                  edit(w, b);
                  return DefaultEngine().MaskedSoftmax(w.x, w.lens, w.y);
                },
                prepare};
  };
  return {
      make("x_rank_1", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {B * N * M}); }),
      make("x_rank_2", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {B * N, M}); }),
      make("x_rank_4", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {B, N, M, 1}); }),
      make("y_rank_2", "y", [](Views& w, Buffers& b) { w.y = Tensor(b.out.data(), {B * N, M}); }),
      make("y_rank_4", "y", [](Views& w, Buffers& b) { w.y = Tensor(b.out.data(), {1, B, N, M}); }),
      make("x_null", "x is null", [](Views& w, Buffers&) { w.x = ConstTensor(nullptr, {B, N, M}); }),
      make("y_null", "y is null", [](Views& w, Buffers&) { w.y = Tensor(nullptr, {B, N, M}); }),
      make("y_empty", "y", [](Views& w, Buffers&) { w.y = Tensor(); }),
      make("x_zero_batch", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {0, N, M}); }),
      make("x_zero_queries", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {B, 0, M}); }),
      make("x_zero_keys", "x", [](Views& w, Buffers& b) { w.x = ConstTensor(b.x.data(), {B, N, 0}); }),
      make("y_wrong_batch", "y", [](Views& w, Buffers& b) { w.y = Tensor(b.out.data(), {B + 1, N, M}); }),
      make("y_wrong_queries", "y", [](Views& w, Buffers& b) { w.y = Tensor(b.out.data(), {B, N - 1, M}); }),
      make("y_wrong_keys", "y", [](Views& w, Buffers& b) { w.y = Tensor(b.out.data(), {B, N, M + 1}); }),
      make("x_negative_stride", "x", [](Views& w, Buffers& b) {
        w.x = ConstTensor(b.x.data() + 100, {B, N, M}, {-N * M, M, 1});
      }),
      make("y_negative_stride", "y", [](Views& w, Buffers& b) {
        w.y = Tensor(b.out.data() + 100, {B, N, M}, {N * M, M, -1});
      }),
      make("y_keys_share_memory", "y", [](Views& w, Buffers& b) {
        w.y = Tensor(b.out.data(), {B, N, M}, {N * M, M, 0});
      }),
      make("y_queries_share_memory", "y", [](Views& w, Buffers& b) {
        w.y = Tensor(b.out.data(), {B, N, M}, {N * M, 2, 1});
      }),
      make("y_overlaps_x_shifted", "overlaps", [](Views& w, Buffers& b) {
        w.x = ConstTensor(b.x.data(), {B, N, M});
        w.y = Tensor(b.x.data() + 1, {B, N, M});
      }),
      make("y_overlaps_x_other_strides", "overlaps", [](Views& w, Buffers& b) {
        w.y = Tensor(b.x.data(), {B, N, M}, {N * M + 1, M, 1});
      }),
      make("x_too_large_to_address", "x", [](Views& w, Buffers& b) {
        w.x = ConstTensor(b.x.data(), {kHuge, kHuge, M});
      }),
      make("x_strides_too_large", "x", [](Views& w, Buffers& b) {
        w.x = ConstTensor(b.x.data(), {B, N, M}, {INT64_MAX / 2, M, 1});
      }),
      make("x_dims_and_strides_differ_in_count", "x", [](Views& w, Buffers& b) {
        w.x = ConstTensor(b.x.data(), {B, N, M}, {N * M, M, 1, 1});
      }),
      make("y_dims_and_strides_differ_in_count", "y", [](Views& w, Buffers& b) {
        w.y = Tensor(b.out.data(), {B, N, M}, {N * M});
      }),
      make("lens_negative_int64_per_batch", "valid_lens[0]",
           [](Views& w, Buffers& b) { w.lens = ValidLens::PerBatch(b.lens64.data(), B); },
           [](Buffers& b) { b.lens64[0] = -3; }),
      make("lens_negative_int32_per_query", "valid_lens[0, 1]",
           [](Views& w, Buffers& b) { w.lens = ValidLens::PerQuery(b.lens32.data(), B, N); },
           [](Buffers& b) { b.lens32[1] = -1; }),
      make("lens_int32_min", "valid_lens[1, 0]",
           [](Views& w, Buffers& b) { w.lens = ValidLens::PerQuery(b.lens32.data(), B, N); },
           [](Buffers& b) { b.lens32[3] = INT32_MIN; }),
      make("lens_per_batch_too_long", "valid_lens", [](Views& w, Buffers& b) {
        w.lens = ValidLens::PerBatch(b.lens64.data(), B + 1);
      }),
      make("lens_per_query_wrong_queries", "valid_lens", [](Views& w, Buffers& b) {
        w.lens = ValidLens::PerQuery(b.lens32.data(), B, N + 1);
      }),
      make("lens_per_query_wrong_batch", "valid_lens", [](Views& w, Buffers& b) {
        w.lens = ValidLens::PerQuery(b.lens64.data(), B - 1, N);
      }),
      make("lens_null_per_query", "valid_lens is null", [](Views& w, Buffers&) {
        w.lens = ValidLens::PerQuery(static_cast<const int32_t*>(nullptr), B, N);
      }),
      make("lens_inside_y", "y overlaps valid_lens", [](Views& w, Buffers& b) {
        w.lens = ValidLens::PerQuery(reinterpret_cast<const int32_t*>(b.out.data() + 7), B, N);
      }),
      make("lens_unknown_kind", "valid_lens", [](Views& w, Buffers& b) {
        w.lens.kind = static_cast<ValidLens::Kind>(-1);
        w.lens.data = b.lens32.data();
      }),
  };
}

// ---- the families -----------------------------------------------------------

// Dot product: Q (B, N, 4), K (B, M, 4), V (B, M, 6).
std::vector<Case> DotCases() {
  return AttentionCases({4, 4, 6, 6, false,
                         [](ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens, Tensor out,
                            Tensor weights) {
                           return DefaultEngine().DotProductAttention(q, k, v, lens, out, weights);
                         }});
}

// Additive: H 3, Dq 4, Dk 2, Dv 6.
std::vector<Case> AdditiveCases() {
  static const std::shared_ptr<const AdditiveAttention> model = [] {
    const std::vector<float> w_q = RandomFloats(3 * 4, 7), w_k = RandomFloats(3 * 2, 8), w_v = RandomFloats(3, 9);
    std::unique_ptr<AdditiveAttention> created;
    EXPECT_TRUE(AdditiveAttention::Create(ConstTensor(w_q.data(), {3, 4}), ConstTensor(w_k.data(), {3, 2}),
                                          ConstTensor(w_v.data(), {1, 3}), &created)
                    .ok());
    return std::shared_ptr<const AdditiveAttention>(std::move(created));
  }();
  return AttentionCases({4, 2, 6, 6, false,
                         [](ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens, Tensor out,
                            Tensor weights) {
                           return model->Forward(DefaultEngine(), q, k, v, lens, out, weights);
                         }});
}

// Concat: Dq 4, Dk 3, M 5 value rows, Dv 6, O 2.
std::vector<Case> ConcatCases() {
  static const std::shared_ptr<const ConcatAttention> model = [] {
    const std::vector<float> attn_w = RandomFloats(M * 7, 10), attn_b = RandomFloats(M, 11),
                             combine_w = RandomFloats(2 * 10, 12), combine_b = RandomFloats(2, 13);
    std::unique_ptr<ConcatAttention> created;
    EXPECT_TRUE(ConcatAttention::Create(4, ConstTensor(attn_w.data(), {M, 7}), ConstTensor(attn_b.data(), {M}),
                                        ConstTensor(combine_w.data(), {2, 10}), ConstTensor(combine_b.data(), {2}),
                                        &created)
                    .ok());
    return std::shared_ptr<const ConcatAttention>(std::move(created));
  }();
  return AttentionCases({4, 3, 6, 2, true,
                         [](ConstTensor q, ConstTensor k, ConstTensor v, const ValidLens& lens, Tensor out,
                            Tensor weights) {
                           return model->Forward(DefaultEngine(), q, k, v, lens, out, weights);
                         }});
}

class ValidationMatrix : public ::testing::TestWithParam<std::string> {};

// "softmax/x_null" -> that family's case.
Case Find(const std::string& id) {
  const std::string family = id.substr(0, id.find('/')), name = id.substr(id.find('/') + 1);
  const std::vector<Case> cases = family == "softmax" ? SoftmaxCases()
                                  : family == "dot"   ? DotCases()
                                  : family == "additive" ? AdditiveCases()
                                                         : ConcatCases();
  for (const Case& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << id;
  return {};
}

std::vector<std::string> AllCaseIds() {
  std::vector<std::string> ids;
  for (const auto& [family, cases] :
       std::vector<std::pair<std::string, std::vector<Case>>>{{"softmax", SoftmaxCases()},
                                                              {"dot", DotCases()},
                                                              {"additive", AdditiveCases()},
                                                              {"concat", ConcatCases()}}) {
    for (const Case& c : cases) ids.push_back(family + "/" + c.name);
  }
  return ids;
}

TEST_P(ValidationMatrix, RefusedWithTheArgumentNamedAndNothingWritten) {
  const Case c = Find(GetParam());
  ASSERT_TRUE(c.call);
  ExpectRefused(c);
}

INSTANTIATE_TEST_SUITE_P(AllOps, ValidationMatrix, ::testing::ValuesIn(AllCaseIds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name) ch = ch == '/' ? '_' : ch;
                           return name;
                         });

TEST(ValidationMatrix, EveryFamilyHasAtLeastThirtyCases) {
  EXPECT_GE(SoftmaxCases().size(), 30u);
  EXPECT_GE(DotCases().size(), 30u);
  EXPECT_GE(AdditiveCases().size(), 30u);
  EXPECT_GE(ConcatCases().size(), 30u);
}

// ---- what is accepted, and how ----------------------------------------------

bool AllNan(const float* row, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    if (!std::isnan(row[j])) return false;
  }
  return true;
}

// Lengths past M, and NaN or Inf among valid or masked scores: accepted, with
// the results docs/semantics.md section 1.4 gives.
TEST(ValidationMatrix, AcceptedScoresAndLengthsGiveTheDocumentedResults) {
  constexpr int64_t kKeys = 6;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Row 0: NaN at a valid position; row 1: +Inf at a valid position; row 2:
  // NaN and -Inf and +Inf past its length 3; row 3: length 9 > M.
  std::vector<float> x = RandomFloats(4 * kKeys, 21);
  x[1] = nan;
  x[kKeys + 2] = inf;
  x[2 * kKeys + 3] = nan, x[2 * kKeys + 4] = -inf, x[2 * kKeys + 5] = inf;
  const int64_t lens[] = {kKeys, 4, 3, 9};
  std::vector<float> y(x.size(), kSentinel);
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(x.data(), {1, 4, kKeys}), ValidLens::PerQuery(lens, 1, 4),
                                 Tensor(y.data(), {1, 4, kKeys}))
                  .ok());
  EXPECT_TRUE(AllNan(y.data(), kKeys)) << "NaN in a valid position makes the row NaN";
  EXPECT_TRUE(AllNan(y.data() + kKeys, kKeys)) << "+Inf in a valid position makes the row NaN";
  // Masked positions are ignored: the same row with them zeroed.
  std::vector<float> clean(x.begin() + 2 * kKeys, x.begin() + 3 * kKeys);
  clean[3] = clean[4] = clean[5] = 0.0f;
  const std::vector<double> expected = ReferenceMaskedSoftmax(clean, 1, 1, kKeys, {3});
  EXPECT_LE(MaxAbsDiff(y.data() + 2 * kKeys, expected), kWeightTolerance);
  // L > M means all M keys.
  const std::vector<float> last(x.begin() + 3 * kKeys, x.end());
  EXPECT_LE(MaxAbsDiff(y.data() + 3 * kKeys, ReferenceMaskedSoftmax(last, 1, 1, kKeys, {})), kWeightTolerance);
}

// NaN in the keys and values past every valid length never reaches the
// output of the attention ops (they never read those rows).
TEST(ValidationMatrix, AcceptedNanPastTheValidLengthsNeverReachesTheOutput) {
  constexpr int64_t kBatch = 2, kQueries = 5, kKeys = 9, kDepth = 4, kValues = 3;
  std::vector<float> q = RandomFloats(kBatch * kQueries * kDepth, 31), k = RandomFloats(kBatch * kKeys * kDepth, 32),
                     v = RandomFloats(kBatch * kKeys * kValues, 33);
  const int64_t lens[] = {4, 7};
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = lens[b]; j < kKeys; ++j) {
      for (int64_t d = 0; d < kDepth; ++d) k[(b * kKeys + j) * kDepth + d] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t d = 0; d < kValues; ++d) v[(b * kKeys + j) * kValues + d] = std::numeric_limits<float>::infinity();
    }
  }
  std::vector<float> out(kBatch * kQueries * kValues, kSentinel), weights(kBatch * kQueries * kKeys, kSentinel);
  ASSERT_TRUE(DefaultEngine()
                  .DotProductAttention(ConstTensor(q.data(), {kBatch, kQueries, kDepth}),
                                       ConstTensor(k.data(), {kBatch, kKeys, kDepth}),
                                       ConstTensor(v.data(), {kBatch, kKeys, kValues}),
                                       ValidLens::PerBatch(lens, kBatch),
                                       Tensor(out.data(), {kBatch, kQueries, kValues}),
                                       Tensor(weights.data(), {kBatch, kQueries, kKeys}))
                  .ok());
  for (float o : out) EXPECT_TRUE(std::isfinite(o)) << o;
  for (float w : weights) EXPECT_TRUE(std::isfinite(w)) << w;
}

}  // namespace
}  // namespace attnscore::test
