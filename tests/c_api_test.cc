// The C API against the C++ API: every op gives the C++ call's bits, every
// refusal the same message, statuses belong to their call (any thread), and
// nothing but a status comes back from bad handles, pointers or enums.
#include "attnscore/c_api.h"

#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace attnscore::test {
namespace {

// A dense C view of a C++ buffer of dims (d0, d1, d2).
attnscore_tensor_view CView(const std::vector<float>& data, int64_t d0, int64_t d1, int64_t d2) {
  return {data.data(), 3, {d0, d1, d2, 0}, {d1 * d2, d2, 1, 0}};
}
attnscore_tensor COut(std::vector<float>& data, int64_t d0, int64_t d1, int64_t d2) {
  return {data.data(), 3, {d0, d1, d2, 0}, {d1 * d2, d2, 1, 0}};
}

// The status's message, freed; "" for success.
std::string Message(attnscore_status* s) {
  std::string text = attnscore_status_message(s);
  attnscore_status_free(s);
  return text;
}

void ExpectShapes(const attnscore_output_shapes& shapes, const std::vector<int64_t>& out,
                  const std::vector<int64_t>& weights) {
  EXPECT_EQ(std::vector<int64_t>(shapes.out, shapes.out + 3), out);
  EXPECT_EQ(std::vector<int64_t>(shapes.attention_weights, shapes.attention_weights + 3), weights);
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    attnscore_engine_options options = attnscore_default_engine_options();
    ASSERT_EQ(attnscore_engine_create(&options, &engine_), nullptr);
  }
  void TearDown() override { attnscore_engine_destroy(engine_); }
  attnscore_engine* engine_ = nullptr;
};

TEST_F(CApi, DotProductAndSoftmaxGiveTheCppBits) {
  const int64_t b = 3, n = 5, m = 37, d = 16, dv = 8;
  const std::vector<float> q = RandomFloats(b * n * d, 1), k = RandomFloats(b * m * d, 2),
                           v = RandomFloats(b * m * dv, 3);
  const int32_t lens[] = {0, 5, 7, 37, 40, 1, 2, 3, 4, 9, 11, 36, 30, 20, 10};
  std::vector<float> out_c(b * n * dv), w_c(b * n * m), out_cpp(b * n * dv), w_cpp(b * n * m);
  const attnscore_tensor_view qv = CView(q, b, n, d), kv = CView(k, b, m, d), vv = CView(v, b, m, dv);
  const attnscore_tensor ov = COut(out_c, b, n, dv), wv = COut(w_c, b, n, m);
  const attnscore_valid_lens cl = {ATTNSCORE_LENS_PER_QUERY, ATTNSCORE_LENS_INT32, lens, {b, n}};
  ASSERT_EQ(Message(attnscore_dot_product_attention(engine_, &qv, &kv, &vv, &cl, &ov, &wv)), "");
  ASSERT_TRUE(DefaultEngine()
                  .DotProductAttention(ConstTensor(q.data(), {b, n, d}), ConstTensor(k.data(), {b, m, d}),
                                       ConstTensor(v.data(), {b, m, dv}), ValidLens::PerQuery(lens, b, n),
                                       Tensor(out_cpp.data(), {b, n, dv}), Tensor(w_cpp.data(), {b, n, m}))
                  .ok());
  EXPECT_EQ(std::memcmp(out_c.data(), out_cpp.data(), out_c.size() * 4), 0);
  EXPECT_EQ(std::memcmp(w_c.data(), w_cpp.data(), w_c.size() * 4), 0);

  std::vector<float> y_c(b * n * m), y_cpp(b * n * m);
  const attnscore_tensor yv = COut(y_c, b, n, m);
  const attnscore_tensor_view xv = CView(w_cpp, b, n, m);
  ASSERT_EQ(Message(attnscore_masked_softmax(engine_, &xv, &cl, &yv)), "");
  ASSERT_TRUE(DefaultEngine()
                  .MaskedSoftmax(ConstTensor(w_cpp.data(), {b, n, m}), ValidLens::PerQuery(lens, b, n),
                                 Tensor(y_cpp.data(), {b, n, m}))
                  .ok());
  EXPECT_EQ(std::memcmp(y_c.data(), y_cpp.data(), y_c.size() * 4), 0);
}

// A named float32 view of a C++ buffer, C order.
attnscore_named_tensor Named(const char* name, const float* data, std::vector<int64_t> dims) {
  attnscore_named_tensor t = {name, ATTNSCORE_FLOAT32, const_cast<float*>(data), 0, {}, {}};
  t.rank = static_cast<int32_t>(dims.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d)
    t.dims[d] = dims[d], t.strides[d] = stride, stride *= dims[d];
  return t;
}

// The golden's lengths as a named int tensor; false when it has none.
bool NamedLens(const GoldenAttention& g, attnscore_named_tensor* t) {
  if (g.lens.kind == ValidLens::Kind::kNone) return false;
  *t = {"valid_lens",
        g.lens.is_int64 ? ATTNSCORE_INT64 : ATTNSCORE_INT32,
        const_cast<void*>(g.lens.data),
        g.lens.kind == ValidLens::Kind::kPerQuery ? 2 : 1,
        {g.lens.dims[0], g.lens.dims[1]},
        {}};
  t->strides[0] = t->rank == 2 ? g.lens.dims[1] : 1;
  t->strides[1] = 1;
  return true;
}

// Every model of the catalogue through the one op handle: loaded from its
// golden file (parameters the file does not hold given as text), checked,
// run, and compared with what the PyTorch module returned.
TEST_F(CApi, ModelsLoadThroughTheCatalogueAndMatchTheirGoldenCases) {
  const struct {
    const char* golden;
    std::vector<attnscore_param> params;
    const char* fixed_dim;  // a size the model fixes, checked against the query's
  } cases[] = {{"additive_toy", {}, "Dq"},
               {"concat_tutorial", {{"query_size", "2"}}, "Dq"},
               {"bilinear_per_query", {}, "Dq"},
               {"multihead_causal_self", {{"num_heads", "4"}}, "Dq"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.golden);
    GoldenAttention g;
    LoadGoldenAttention(c.golden, &g);
    const std::string path =
        std::string(ATTNSCORE_GOLDEN_DIR) + "/" + c.golden + "/model.safetensors";
    attnscore_op* created = nullptr;
    std::vector<attnscore_param> params = c.params;
    if (std::string(c.golden) == "concat_tutorial") {
      static const std::string dq = std::to_string(g.queries.shape[2]);
      params[0].value = dq.c_str();
    }
    ASSERT_EQ(Message(attnscore_op_load(path.c_str(), params.data(), params.size(), &created)), "");
    const std::unique_ptr<attnscore_op, void (*)(attnscore_op*)> op(created, attnscore_op_destroy);
    EXPECT_EQ(attnscore_op_fixed_dim(op.get(), c.fixed_dim), g.queries.shape[2]);
    ASSERT_EQ(attnscore_op_output_count(op.get()), 2u);
    EXPECT_STREQ(attnscore_op_output_name(op.get(), 1), "attention_weights");
    std::vector<attnscore_named_tensor> inputs = {
        Named("queries", g.queries.data<float>(), g.queries.shape),
        Named("keys", g.keys.data<float>(), g.keys.shape),
        Named("values", g.values.data<float>(), g.values.shape)};
    attnscore_named_tensor lens;
    if (NamedLens(g, &lens)) inputs.push_back(lens);
    const bool causal = std::string(c.golden) == "multihead_causal_self";
    const attnscore_param call[] = {{"causal", "top-left"}};
    attnscore_shape shapes[2] = {};
    ASSERT_EQ(Message(attnscore_op_check(op.get(), engine_, inputs.data(), inputs.size(), call,
                                         causal ? 1 : 0, shapes, 2)),
              "");
    EXPECT_EQ(std::vector<int64_t>(shapes[0].dims, shapes[0].dims + shapes[0].rank), g.out.shape);
    EXPECT_EQ(std::vector<int64_t>(shapes[1].dims, shapes[1].dims + shapes[1].rank),
              g.weights.shape);
    std::vector<float> out(g.out.size()), w(g.weights.size());
    const attnscore_named_tensor outputs[] = {
        Named("output", out.data(), g.out.shape),
        Named("attention_weights", w.data(), g.weights.shape)};
    ASSERT_EQ(Message(attnscore_op_run(op.get(), engine_, inputs.data(), inputs.size(), call,
                                       causal ? 1 : 0, outputs, 2)),
              "");
    const float* want = g.out.data<float>();
    for (size_t e = 0; e < out.size(); ++e) {
      EXPECT_NEAR(out[e], want[e], 1e-4 * (1.0 + std::abs(want[e])));
    }
    EXPECT_LE(MaxAbsDiff(w.data(), std::vector<double>(g.weights.data<float>(),
                                                       g.weights.data<float>() + g.weights.size())),
              kWeightTolerance);
  }
}

// The op handle refuses as the typed calls do, and names the C call for
// what only C can get wrong.
TEST_F(CApi, TheOpHandleRefusesAsTheTypedCalls) {
  const std::vector<float> w(8 * 8, 0.1f);
  const attnscore_named_tensor weights[] = {
      Named("W_q.weight", w.data(), {8, 8}), Named("W_k.weight", w.data(), {8, 8}),
      Named("W_v.weight", w.data(), {8, 8}), Named("W_o.weight", w.data(), {8, 8})};
  const attnscore_param three[] = {{"num_heads", "3"}}, two[] = {{"num_heads", "2"}};
  attnscore_op* op = nullptr;
  EXPECT_EQ(
      Message(attnscore_op_create("multihead", three, 1, weights, 4, &op)),
      "MultiHeadAttention: num_heads is 3; it must be at least 1 and divide num_hiddens H = 8 "
      "(W_q.weight (8, 8))");
  EXPECT_EQ(op, nullptr);
  ASSERT_EQ(Message(attnscore_op_create("multihead", two, 1, weights, 4, &op)), "");
  const std::unique_ptr<attnscore_op, void (*)(attnscore_op*)> owner(op, attnscore_op_destroy);
  EXPECT_STREQ(attnscore_op_name(op), "multihead");
  EXPECT_STREQ(attnscore_op_model_param(op, "num_heads"), "2");
  EXPECT_EQ(attnscore_op_model_param(op, "query_size"), nullptr);
  EXPECT_EQ(attnscore_op_fixed_dim(op, "H"), 8);

  const int64_t b = 2, n = 3, m = 5;
  const int64_t lens[] = {5, 2};
  const std::vector<float> x(b * m * 8);
  const attnscore_named_tensor good[] = {
      Named("queries", x.data(), {b, n, 8}),
      Named("keys", x.data(), {b, m, 8}),
      Named("values", x.data(), {b, m, 8}),
      {"valid_lens", ATTNSCORE_INT64, const_cast<int64_t*>(lens), 1, {b}, {1}}};
  attnscore_shape shapes[2] = {};
  ASSERT_EQ(Message(attnscore_op_check(op, engine_, good, 4, nullptr, 0, shapes, 2)), "");
  EXPECT_EQ(std::vector<int64_t>(shapes[0].dims, shapes[0].dims + shapes[0].rank),
            std::vector<int64_t>({b, n, 8}));
  EXPECT_EQ(std::vector<int64_t>(shapes[1].dims, shapes[1].dims + shapes[1].rank),
            std::vector<int64_t>({b, 2, n, m}));

  // A short V: the module's own message, from check and run alike, nothing written.
  attnscore_named_tensor bad[4] = {good[0], good[1], Named("values", x.data(), {b, m - 1, 8}),
                                   good[3]};
  attnscore_shape untouched[2] = {{-1, {-1}}, {-1, {-1}}};
  const std::string refused =
      Message(attnscore_op_check(op, engine_, bad, 4, nullptr, 0, untouched, 2));
  EXPECT_NE(refused.find("MultiHeadAttention: values"), std::string::npos) << refused;
  EXPECT_EQ(untouched[0].rank, -1);
  std::vector<float> out(b * n * 8, -1.0f);
  const attnscore_named_tensor outputs[] = {Named("output", out.data(), {b, n, 8})};
  EXPECT_EQ(refused, Message(attnscore_op_run(op, engine_, bad, 4, nullptr, 0, outputs, 1)));
  for (float v : out) EXPECT_EQ(v, -1.0f);

  // What the catalogue binds: names, dtypes, parameters, the output.
  const attnscore_param diagonal[] = {{"causal", "diagonal"}};
  EXPECT_EQ(Message(attnscore_op_check(op, engine_, good, 4, diagonal, 1, shapes, 2)),
            "multihead: parameter causal is 'diagonal'; want none or top-left or bottom-right");
  bad[0].name = "query";
  EXPECT_EQ(Message(attnscore_op_check(op, engine_, bad, 4, nullptr, 0, shapes, 2)),
            "multihead: no input 'query'; its inputs are queries, keys, values, valid_lens");
  bad[0] = good[0];
  bad[3].dtype = ATTNSCORE_FLOAT32;
  EXPECT_EQ(Message(attnscore_op_check(op, engine_, bad, 4, nullptr, 0, shapes, 2)),
            "multihead: valid_lens is float32; want int32 or int64");
  bad[3].dtype = 7;
  EXPECT_EQ(Message(attnscore_op_check(op, engine_, bad, 4, nullptr, 0, shapes, 2)),
            "attnscore_op_check: inputs[3] has a dtype outside attnscore_dtype");
  EXPECT_EQ(Message(attnscore_op_run(op, engine_, good, 4, nullptr, 0, nullptr, 0)),
            "multihead: needs output 'output'");
  EXPECT_EQ(Message(attnscore_op_check(op, nullptr, good, 4, nullptr, 0, shapes, 2)),
            "attnscore_op_check: op and engine must not be null");
  EXPECT_EQ(Message(attnscore_op_create("transformer", nullptr, 0, nullptr, 0, &op))
                .find("Op::Create: no entry 'transformer'; the catalogue has masked_softmax"),
            0u);
  EXPECT_EQ(Message(attnscore_op_create("additive", nullptr, 1, nullptr, 0, &op)),
            "attnscore_op_create: params is null but param_count is 1");
}

// The catalogue's names, in order, and each entry made or loaded by name.
TEST_F(CApi, TheCatalogueListsEveryEntry) {
  std::vector<std::string> names;
  for (size_t i = 0; i < attnscore_catalogue_size(); ++i)
    names.push_back(attnscore_catalogue_name(i));
  EXPECT_EQ(attnscore_catalogue_name(names.size()), nullptr);
  std::vector<std::string> want;
  for (const OpSpec& spec : Catalogue()) want.push_back(spec.name);
  EXPECT_EQ(names, want);
  EXPECT_EQ(names.size(), 10u);
}

TEST_F(CApi, RefusalsCarryTheCppMessageAndWriteNothing) {
  const std::vector<float> q(4), k(40), v(36);
  std::vector<float> out(8, -1.0f);
  const attnscore_tensor_view qv = CView(q, 2, 1, 2), kv = CView(k, 2, 10, 2), vv = CView(v, 2, 9, 2);
  const attnscore_tensor ov = COut(out, 2, 1, 4);
  attnscore_status* s = attnscore_dot_product_attention(engine_, &qv, &kv, &vv, nullptr, &ov, nullptr);
  EXPECT_EQ(attnscore_status_get_code(s), ATTNSCORE_INVALID_ARGUMENT);
  EXPECT_STREQ(attnscore_status_code_name(attnscore_status_get_code(s)), "invalid argument");
  const Status cpp = DefaultEngine().DotProductAttention(
      ConstTensor(q.data(), {2, 1, 2}), ConstTensor(k.data(), {2, 10, 2}), ConstTensor(v.data(), {2, 9, 2}),
      ValidLens::None(), Tensor(out.data(), {2, 1, 4}));
  EXPECT_EQ(Message(s), cpp.message());
  for (float x : out) EXPECT_EQ(x, -1.0f);

  // Null handles and pointers, enums outside their range: a status, no crash.
  EXPECT_NE(Message(attnscore_dot_product_attention(nullptr, &qv, &kv, &vv, nullptr, &ov, nullptr))
                .find("engine is null"),
            std::string::npos);
  EXPECT_NE(Message(attnscore_dot_product_attention(engine_, nullptr, &kv, &vv, nullptr, &ov, nullptr))
                .find("must not be null"),
            std::string::npos);
  const attnscore_valid_lens bad_kind = {7, ATTNSCORE_LENS_INT32, q.data(), {2, 0}};
  EXPECT_NE(Message(attnscore_dot_product_attention(engine_, &qv, &kv, &vv, &bad_kind, &ov, nullptr))
                .find("outside its enum"),
            std::string::npos);
  attnscore_engine_options options = attnscore_default_engine_options();
  options.isa = 9;
  attnscore_engine* engine = nullptr;
  EXPECT_NE(Message(attnscore_engine_create(&options, &engine)).find("outside its enum"), std::string::npos);
  EXPECT_EQ(engine, nullptr);
  options = attnscore_default_engine_options();
  options.threads = 0;
  EXPECT_NE(Message(attnscore_engine_create(&options, &engine)).find("threads is 0"), std::string::npos);
  attnscore_op* model = nullptr;
  attnscore_status* missing =
      attnscore_op_load("/nonexistent/model.safetensors", nullptr, 0, &model);
  EXPECT_EQ(attnscore_status_get_code(missing), ATTNSCORE_IO_ERROR);
  attnscore_status_free(missing);
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(attnscore_op_fixed_dim(nullptr, "H"), 0);
  EXPECT_STREQ(attnscore_op_name(nullptr), "");
  EXPECT_EQ(attnscore_op_output_count(nullptr), 0u);
  attnscore_op_destroy(nullptr);
  attnscore_engine_destroy(nullptr);
  attnscore_status_free(nullptr);
  EXPECT_EQ(attnscore_status_get_code(nullptr), ATTNSCORE_OK);
  EXPECT_STREQ(attnscore_status_message(nullptr), "");
}

// The *_check twins: the output shapes of a good call, and for a bad one the
// op's own refusal (the message its forward call gives), shapes untouched.
TEST_F(CApi, ChecksReportShapesAndRefuseAsTheOps) {
  const std::vector<float> q(4), k(40), v(80), bad_v(36);
  const attnscore_tensor_view qv = CView(q, 2, 1, 2), kv = CView(k, 2, 10, 2),
                              vv = CView(v, 2, 10, 4), bad_vv = CView(bad_v, 2, 9, 2);
  const int64_t lens[] = {2, 6};
  const attnscore_valid_lens cl = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, lens, {2, 0}};
  attnscore_output_shapes shapes = {};
  ASSERT_EQ(Message(attnscore_check_dot_product_attention(engine_, &qv, &kv, &vv, &cl, &shapes)), "");
  ExpectShapes(shapes, {2, 1, 4}, {2, 1, 10});
  ASSERT_EQ(Message(attnscore_check_masked_softmax(engine_, &kv, &cl, &shapes)), "");
  ExpectShapes(shapes, {2, 10, 2}, {2, 10, 2});

  attnscore_output_shapes untouched = {{-1, -1, -1}, {-1, -1, -1}};
  std::vector<float> out(8, -1.0f);
  const attnscore_tensor ov = COut(out, 2, 1, 4);
  const std::string refused =
      Message(attnscore_check_dot_product_attention(engine_, &qv, &kv, &bad_vv, &cl, &untouched));
  EXPECT_FALSE(refused.empty());
  EXPECT_EQ(refused, Message(attnscore_dot_product_attention(engine_, &qv, &kv, &bad_vv, &cl, &ov, nullptr)));
  ExpectShapes(untouched, {-1, -1, -1}, {-1, -1, -1});
  const int64_t too_long[] = {2, 6, 1};
  const attnscore_valid_lens three = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, too_long, {3, 0}};
  EXPECT_NE(Message(attnscore_check_masked_softmax(engine_, &kv, &three, &untouched)).find("valid_lens"),
            std::string::npos);

  EXPECT_NE(Message(attnscore_check_dot_product_attention(engine_, &qv, &kv, &vv, &cl, nullptr))
                .find("must not be null"),
            std::string::npos);
  EXPECT_NE(Message(attnscore_check_masked_softmax(nullptr, &kv, &cl, &shapes)).find("is null"),
            std::string::npos);
  const attnscore_valid_lens bad_kind = {7, ATTNSCORE_LENS_INT32, lens, {2, 0}};
  EXPECT_NE(Message(attnscore_check_dot_product_attention(engine_, &qv, &kv, &vv, &bad_kind, &shapes))
                .find("outside its enum"),
            std::string::npos);
}

// Each thread's failed calls carry their own messages, readable there.
// A dense rank-4 C view.
attnscore_tensor_view CView4(const std::vector<float>& data, int64_t d0, int64_t d1, int64_t d2,
                             int64_t d3) {
  return {data.data(), 4, {d0, d1, d2, d3}, {d1 * d2 * d3, d2 * d3, d3, 1}};
}
attnscore_tensor COut4(std::vector<float>& data, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return {data.data(), 4, {d0, d1, d2, d3}, {d1 * d2 * d3, d2 * d3, d3, 1}};
}

TEST_F(CApi, MultiHeadAndTheKvCacheGiveTheCppBits) {
  const int64_t b = 2, n = 5, m = 9, hq = 4, hkv = 2, d = 8;
  const std::vector<float> q = RandomFloats(b * n * hq * d, 11), k = RandomFloats(b * m * hkv * d, 12),
                           v = RandomFloats(b * m * hkv * d, 13);
  const int64_t lens[] = {9, 4};
  const attnscore_valid_lens cl = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, lens, {b, 0}};
  const attnscore_tensor_view qv = CView4(q, b, n, hq, d), kv = CView4(k, b, m, hkv, d),
                              vv = CView4(v, b, m, hkv, d);
  std::vector<float> out_c(b * n * hq * d), w_c(b * hq * n * m), out_cpp(out_c.size()), w_cpp(w_c.size());
  const attnscore_tensor ov = COut4(out_c, b, n, hq, d), wv = COut4(w_c, b, hq, n, m);
  const attnscore_multihead_options options = {
      ATTNSCORE_CAUSAL_BOTTOM_RIGHT, 0.5f, 0.0f, 0, -1, -1, nullptr, nullptr, nullptr};
  ASSERT_EQ(Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &options, &ov, &wv)), "");
  MultiHeadOptions cpp;
  cpp.causal = Causal::kBottomRight;
  cpp.scale = 0.5f;
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttention(ConstTensor(q.data(), {b, n, hq, d}), ConstTensor(k.data(), {b, m, hkv, d}),
                                      ConstTensor(v.data(), {b, m, hkv, d}), ValidLens::PerBatch(lens, b), cpp,
                                      Tensor(out_cpp.data(), {b, n, hq, d}), Tensor(w_cpp.data(), {b, hq, n, m}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(w_c, w_cpp);
  // The soft cap reaches the op: the C++ call's bits with the same cap.
  const attnscore_multihead_options capped = {
      ATTNSCORE_CAUSAL_NONE, 2.0f, 0.75f, 0, -1, -1, nullptr, nullptr, nullptr};
  ASSERT_EQ(Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &capped, &ov, &wv)),
            "");
  cpp.causal = Causal::kNone;
  cpp.scale = 2.0f;
  cpp.softcap = 0.75f;
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttention(
                      ConstTensor(q.data(), {b, n, hq, d}), ConstTensor(k.data(), {b, m, hkv, d}),
                      ConstTensor(v.data(), {b, m, hkv, d}), ValidLens::PerBatch(lens, b), cpp,
                      Tensor(out_cpp.data(), {b, n, hq, d}), Tensor(w_cpp.data(), {b, hq, n, m}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(w_c, w_cpp);
  // A cache holding these keys and values attends with the same scale and
  // cap: the bits of the op with the cache's mask (bottom-right), no lengths.
  {
    attnscore_kv_cache* capped_cache = nullptr;
    ASSERT_EQ(Message(attnscore_kv_cache_create(b, m, hkv, d, d, &capped_cache)), "");
    ASSERT_EQ(Message(attnscore_kv_cache_append(capped_cache, &kv, &vv)), "");
    const attnscore_multihead_options bottom_right = {
        ATTNSCORE_CAUSAL_BOTTOM_RIGHT, 2.0f, 0.75f, 0, -1, -1, nullptr, nullptr, nullptr};
    ASSERT_EQ(Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, nullptr, &bottom_right,
                                                    &ov, &wv)),
              "");
    std::vector<float> cached(out_c.size()), cached_w(w_c.size());
    const attnscore_tensor co = COut4(cached, b, n, hq, d), cw = COut4(cached_w, b, hq, n, m);
    const attnscore_kv_cache_attend_options attend = {2.0f, 0.75f,   nullptr, 0,
                                                      -1,   nullptr, nullptr};
    ASSERT_EQ(Message(attnscore_kv_cache_attend_with_options(capped_cache, engine_, &qv, &attend,
                                                             &co, &cw)),
              "");
    EXPECT_EQ(cached, out_c);
    EXPECT_EQ(cached_w, w_c);
    const attnscore_kv_cache_attend_options bad = {0.0f, -1.0f, nullptr, 0, -1, nullptr, nullptr};
    EXPECT_EQ(
        Message(attnscore_kv_cache_attend_with_options(capped_cache, engine_, &qv, &bad, &co, &cw)),
        "KvCache: softcap is -1.000000; it must be finite and >= 0 (0: no cap)");
    attnscore_kv_cache_destroy(capped_cache);
  }
  const attnscore_multihead_options negative_cap = {
      ATTNSCORE_CAUSAL_NONE, 0.0f, -1.0f, 0, -1, -1, nullptr, nullptr, nullptr};
  EXPECT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &negative_cap, &ov, &wv)),
      "MultiHeadAttention: softcap is -1.000000; it must be finite and >= 0 (0: no cap)");
  const attnscore_multihead_options bogus = {5, 0.0f, 0.0f, 0, -1, -1, nullptr, nullptr, nullptr};
  EXPECT_EQ(Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &bogus, &ov, &wv)),
            "attnscore_multihead_attention: options->causal is outside attnscore_causal");
  // A window reaches the op (the C++ call's bits with it), only when
  // `windowed` says so; a bad side or flag is refused by name.
  attnscore_multihead_options windowed = ATTNSCORE_MULTIHEAD_OPTIONS_INIT;
  windowed.windowed = 1;
  windowed.window_left = 2;
  windowed.window_right = 0;
  ASSERT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &windowed, &ov, &wv)), "");
  cpp = MultiHeadOptions();
  cpp.window = {2, 0};
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttention(
                      ConstTensor(q.data(), {b, n, hq, d}), ConstTensor(k.data(), {b, m, hkv, d}),
                      ConstTensor(v.data(), {b, m, hkv, d}), ValidLens::PerBatch(lens, b), cpp,
                      Tensor(out_cpp.data(), {b, n, hq, d}), Tensor(w_cpp.data(), {b, hq, n, m}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(w_c, w_cpp);
  windowed.windowed = 0;  // the sides are then not read
  ASSERT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &windowed, &ov, &wv)), "");
  EXPECT_NE(out_c, out_cpp);
  windowed.windowed = 1;
  windowed.window_left = -3;
  EXPECT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &windowed, &ov, &wv)),
      "MultiHeadAttention: window is (-3, 0); each side must be >= 0, or -1 for unbounded");
  windowed.windowed = 2;
  EXPECT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &windowed, &ov, &wv)),
      "attnscore_multihead_attention: options->windowed is 2; want 0 or 1");
  // Sinks, one per query head: the C++ call's bits with them, for the op and
  // for a cache (bottom-right); a NaN sink is refused by name.
  const float sinks[] = {0.5f, -1.0f, 2.0f, 0.0f};
  attnscore_multihead_options sunk = ATTNSCORE_MULTIHEAD_OPTIONS_INIT;
  sunk.causal = ATTNSCORE_CAUSAL_BOTTOM_RIGHT;
  sunk.sinks = sinks;
  ASSERT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, nullptr, &sunk, &ov, &wv)), "");
  cpp = MultiHeadOptions();
  cpp.causal = Causal::kBottomRight;
  cpp.sinks = ConstTensor(sinks, {hq});
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttention(
                      ConstTensor(q.data(), {b, n, hq, d}), ConstTensor(k.data(), {b, m, hkv, d}),
                      ConstTensor(v.data(), {b, m, hkv, d}), ValidLens::None(), cpp,
                      Tensor(out_cpp.data(), {b, n, hq, d}), Tensor(w_cpp.data(), {b, hq, n, m}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(w_c, w_cpp);
  {
    attnscore_kv_cache* sunk_cache = nullptr;
    ASSERT_EQ(Message(attnscore_kv_cache_create(b, m, hkv, d, d, &sunk_cache)), "");
    ASSERT_EQ(Message(attnscore_kv_cache_append(sunk_cache, &kv, &vv)), "");
    std::vector<float> cached(out_c.size()), cached_w(w_c.size());
    const attnscore_tensor co = COut4(cached, b, n, hq, d), cw = COut4(cached_w, b, hq, n, m);
    const attnscore_kv_cache_attend_options attend = {0.0f, 0.0f, sinks, 0, -1, nullptr, nullptr};
    ASSERT_EQ(Message(attnscore_kv_cache_attend_with_options(sunk_cache, engine_, &qv, &attend, &co,
                                                             &cw)),
              "");
    EXPECT_EQ(cached, out_c);
    EXPECT_EQ(cached_w, w_c);
    attnscore_kv_cache_destroy(sunk_cache);
  }
  // ALiBi slopes and a bias view reach the op: the C++ call's bits.
  const float slopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
  std::vector<float> bias_values(static_cast<size_t>(hq * m));
  for (size_t x = 0; x < bias_values.size(); ++x) bias_values[x] = 0.1f * static_cast<float>(x % 7);
  const attnscore_tensor_view bias = {bias_values.data(), 4, {1, hq, 1, m}, {hq * m, m, m, 1}};
  attnscore_multihead_options terms = ATTNSCORE_MULTIHEAD_OPTIONS_INIT;
  terms.alibi_slopes = slopes;
  terms.bias = &bias;
  ASSERT_EQ(Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, &cl, &terms, &ov, &wv)),
            "");
  cpp = MultiHeadOptions();
  cpp.alibi_slopes = ConstTensor(slopes, {hq});
  cpp.bias = ConstTensor(bias_values.data(), {1, hq, 1, m});
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttention(
                      ConstTensor(q.data(), {b, n, hq, d}), ConstTensor(k.data(), {b, m, hkv, d}),
                      ConstTensor(v.data(), {b, m, hkv, d}), ValidLens::PerBatch(lens, b), cpp,
                      Tensor(out_cpp.data(), {b, n, hq, d}), Tensor(w_cpp.data(), {b, hq, n, m}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(w_c, w_cpp);
  const float nan_sinks[] = {0.5f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 0.0f};
  sunk.sinks = nan_sinks;
  EXPECT_EQ(
      Message(attnscore_multihead_attention(engine_, &qv, &kv, &vv, nullptr, &sunk, &ov, &wv)),
      "MultiHeadAttention: sinks[1] is NaN; a sink is a logit (-Inf: none)");

  // The cache: all of K and V appended, then the last query of each sequence.
  attnscore_kv_cache* cache = nullptr;
  ASSERT_EQ(Message(attnscore_kv_cache_create(b, 16, hkv, d, d, &cache)), "");
  ASSERT_EQ(Message(attnscore_kv_cache_append(cache, &kv, &vv)), "");
  EXPECT_EQ(attnscore_kv_cache_length(cache, 1), m);
  EXPECT_EQ(attnscore_kv_cache_length(cache, 2), 0);
  const attnscore_tensor_view one = {q.data(), 4, {b, 1, hq, d}, {n * hq * d, hq * d, d, 1}};
  std::vector<float> step_c(b * hq * d), step_cpp(step_c.size());
  const attnscore_tensor step_v = COut4(step_c, b, 1, hq, d);
  ASSERT_EQ(Message(attnscore_kv_cache_attend(cache, engine_, &one, &step_v, nullptr)), "");
  std::unique_ptr<KvCache> cpp_cache;
  KvCacheShape shape;
  shape.batch = b, shape.capacity = 16, shape.kv_heads = hkv, shape.key_dim = d, shape.value_dim = d;
  ASSERT_TRUE(KvCache::Create(shape, &cpp_cache).ok());
  ASSERT_TRUE(cpp_cache->Append(ConstTensor(k.data(), {b, m, hkv, d}), ConstTensor(v.data(), {b, m, hkv, d})).ok());
  ASSERT_TRUE(cpp_cache->Attend(DefaultEngine(), ConstTensor(q.data(), {b, 1, hq, d}, {n * hq * d, hq * d, d, 1}),
                                Tensor(step_cpp.data(), {b, 1, hq, d}))
                  .ok());
  EXPECT_EQ(step_c, step_cpp);
  const attnscore_tensor_view row = {k.data(), 3, {1, hkv, d, 0}, {hkv * d, d, 1, 0}};
  ASSERT_EQ(Message(attnscore_kv_cache_append_to(cache, 1, &row, &row)), "");
  EXPECT_EQ(attnscore_kv_cache_length(cache, 1), m + 1);
  ASSERT_EQ(Message(attnscore_kv_cache_clear(cache, 1)), "");
  EXPECT_EQ(attnscore_kv_cache_length(cache, 1), 0);
  EXPECT_EQ(Message(attnscore_kv_cache_clear(cache, 7)), "KvCache: sequence is 7; the cache has sequences 0..1");
  EXPECT_EQ(Message(attnscore_kv_cache_append(nullptr, &kv, &vv)),
            "attnscore_kv_cache_append: cache, keys and values must not be null");
  attnscore_kv_cache_destroy(cache);
  EXPECT_EQ(Message(attnscore_kv_cache_create(0, 16, hkv, d, d, &cache)),
            "KvCache::Create: batch is 0; it must be at least 1");
}

// A pooled cache: its sequences hold the pool's blocks their positions take,
// refuse an append past the free blocks as the C++ cache does, attend with
// the bits of a cache without a pool, and Clear hands the blocks back.
TEST_F(CApi, APooledKvCacheSharesItsBlocksAndAttendsAsOneWithout) {
  const int64_t b = 2, hkv = 2, hq = 4, d = 64;
  const int64_t block = sysconf(_SC_PAGESIZE) / (d * static_cast<int64_t>(sizeof(float)));
  EXPECT_EQ(attnscore_kv_cache_block_positions_multiple(d, d), block);
  EXPECT_EQ(attnscore_kv_cache_block_positions_multiple(d, 0), 0);
  const int64_t m = block + 4;  // 2 blocks a sequence
  const std::vector<float> q = RandomFloats(b * hq * d, 21), k = RandomFloats(b * m * hkv * d, 22),
                           v = RandomFloats(b * m * hkv * d, 23);
  attnscore_kv_cache* cache = nullptr;
  ASSERT_EQ(Message(attnscore_kv_cache_create_pooled(b, 4 * block, hkv, d, d, block, 3, &cache)),
            "");
  const attnscore_tensor_view kv = CView4(k, b, m, hkv, d), vv = CView4(v, b, m, hkv, d);
  EXPECT_EQ(Message(attnscore_kv_cache_append(cache, &kv, &vv)),
            "KvCache: the pool has 3 of its 3 blocks of " + std::to_string(block) +
                " positions free; appending " + std::to_string(m) +
                " positions to every sequence needs 4");
  EXPECT_EQ(attnscore_kv_cache_blocks_in_use(cache), 0);
  // Sequence 0 all m positions (2 blocks), sequence 1 its first 3 (1 block).
  const attnscore_tensor_view k0 = {k.data(), 3, {m, hkv, d, 0}, {hkv * d, d, 1, 0}},
                              v0 = {v.data(), 3, {m, hkv, d, 0}, {hkv * d, d, 1, 0}},
                              k1 = {k.data() + m * hkv * d, 3, {3, hkv, d, 0}, {hkv * d, d, 1, 0}},
                              v1 = {v.data() + m * hkv * d, 3, {3, hkv, d, 0}, {hkv * d, d, 1, 0}};
  ASSERT_EQ(Message(attnscore_kv_cache_append_to(cache, 0, &k0, &v0)), "");
  ASSERT_EQ(Message(attnscore_kv_cache_append_to(cache, 1, &k1, &v1)), "");
  EXPECT_EQ(attnscore_kv_cache_blocks_in_use(cache), 3);
  std::vector<float> out_c(b * hq * d), out_cpp(out_c.size());
  const attnscore_tensor_view qv = CView4(q, b, 1, hq, d);
  const attnscore_tensor ov = COut4(out_c, b, 1, hq, d);
  ASSERT_EQ(Message(attnscore_kv_cache_attend(cache, engine_, &qv, &ov, nullptr)), "");
  std::unique_ptr<KvCache> own;
  KvCacheShape shape;
  shape.batch = b, shape.capacity = 4 * block, shape.kv_heads = hkv, shape.key_dim = d,
  shape.value_dim = d;
  ASSERT_TRUE(KvCache::Create(shape, &own).ok());
  ASSERT_TRUE(
      own->AppendTo(0, ConstTensor(k.data(), {m, hkv, d}), ConstTensor(v.data(), {m, hkv, d}))
          .ok());
  ASSERT_TRUE(
      own->AppendTo(1, ConstTensor(k1.data, {3, hkv, d}), ConstTensor(v1.data, {3, hkv, d})).ok());
  ASSERT_TRUE(own->Attend(DefaultEngine(), ConstTensor(q.data(), {b, 1, hq, d}),
                          Tensor(out_cpp.data(), {b, 1, hq, d}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  ASSERT_EQ(Message(attnscore_kv_cache_clear(cache, 0)), "");
  EXPECT_EQ(attnscore_kv_cache_blocks_in_use(cache), 1);
  EXPECT_EQ(attnscore_kv_cache_blocks_in_use(nullptr), 0);
  attnscore_kv_cache_destroy(cache);

  EXPECT_EQ(Message(attnscore_kv_cache_create_pooled(b, 16, hkv, d, d, block, 3, nullptr)),
            "attnscore_kv_cache_create_pooled: cache is null");
  EXPECT_EQ(Message(attnscore_kv_cache_create_pooled(b, 16, hkv, d, d, block, 0, &cache)),
            "KvCache::Create: blocks is 0; a pool needs at least 1 (or both 0 for none)");
  // Each create call refuses under its own name, with a pool or without.
  EXPECT_EQ(Message(attnscore_kv_cache_create_pooled(b, 16, hkv, d, d, 0, 0, nullptr)),
            "attnscore_kv_cache_create_pooled: cache is null");
  EXPECT_EQ(Message(attnscore_kv_cache_create(b, 16, hkv, d, d, nullptr)),
            "attnscore_kv_cache_create: cache is null");
}

// bf16 and int8 caches through attnscore_kv_cache_create_shaped: the C++
// caches' bits and block multiples (bf16's twice fp32's), and the checks
// by name.
TEST_F(CApi, AShapedKvCacheGivesTheCppBitsInEachPrecision) {
  const int64_t b = 2, m = 40, hkv = 2, hq = 4, d = 16;
  const std::vector<float> k = RandomFloats(b * m * hkv * d, 21), v = RandomFloats(k.size(), 22),
                           q = RandomFloats(b * hq * d, 23);
  attnscore_kv_cache_shape shape = {b, 64, hkv, d, d, 0, 0, ATTNSCORE_BF16};
  attnscore_kv_cache* cache = nullptr;
  for (const auto& [c_precision, precision] :
       {std::pair{ATTNSCORE_BF16, Precision::kBf16}, std::pair{ATTNSCORE_INT8, Precision::kInt8}}) {
    shape.precision = c_precision;
    ASSERT_EQ(Message(attnscore_kv_cache_create_shaped(&shape, &cache)), "");
    const attnscore_tensor_view kv = CView4(k, b, m, hkv, d), vv = CView4(v, b, m, hkv, d),
                                qv = CView4(q, b, 1, hq, d);
    ASSERT_EQ(Message(attnscore_kv_cache_append(cache, &kv, &vv)), "");
    std::vector<float> out_c(b * hq * d), out_cpp(out_c.size());
    const attnscore_tensor ov = COut4(out_c, b, 1, hq, d);
    ASSERT_EQ(Message(attnscore_kv_cache_attend(cache, engine_, &qv, &ov, nullptr)), "");
    attnscore_kv_cache_destroy(cache);
    KvCacheShape cpp{b, 64, hkv, d, d};
    cpp.precision = precision;
    std::unique_ptr<KvCache> own;
    ASSERT_TRUE(KvCache::Create(cpp, &own).ok());
    ASSERT_TRUE(
        own->Append(ConstTensor(k.data(), {b, m, hkv, d}), ConstTensor(v.data(), {b, m, hkv, d}))
            .ok());
    ASSERT_TRUE(own->Attend(DefaultEngine(), ConstTensor(q.data(), {b, 1, hq, d}),
                            Tensor(out_cpp.data(), {b, 1, hq, d}))
                    .ok());
    EXPECT_EQ(out_c, out_cpp) << PrecisionName(precision);
    EXPECT_EQ(attnscore_kv_cache_block_positions_multiple_in(64, 64, c_precision),
              KvCache::BlockPositionsMultiple(64, 64, precision));
  }
  EXPECT_EQ(attnscore_kv_cache_block_positions_multiple_in(64, 64, ATTNSCORE_BF16),
            2 * attnscore_kv_cache_block_positions_multiple_in(64, 64, ATTNSCORE_FP32));
  EXPECT_EQ(attnscore_kv_cache_block_positions_multiple_in(64, 64, 9), 0);
  EXPECT_EQ(Message(attnscore_kv_cache_create_shaped(nullptr, &cache)),
            "attnscore_kv_cache_create_shaped: shape is null");
  shape.precision = 9;
  EXPECT_EQ(Message(attnscore_kv_cache_create_shaped(&shape, &cache)),
            "KvCache::Create: precision is 9, not a Precision (fp32, bf16 or int8)");
}

// A server step through C: packed appends and packed queries with every
// cache option, and a packed multi-head batch, each the C++ call's bits;
// null counts and a bad `windowed` refused by name.
TEST_F(CApi, PackedStepsAndBatchesGiveTheCppBits) {
  const int64_t b = 3, hkv = 2, hq = 4, d = 16, rows = 31;
  const std::vector<float> k = RandomFloats(rows * hkv * d, 31), v = RandomFloats(k.size(), 32),
                           q = RandomFloats(rows * hq * d, 33);
  const std::vector<float> slopes = {0.25f, 0.125f, 0.5f, 1.0f}, sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  const int64_t counts[] = {30, 1, 0};
  attnscore_kv_cache* cache = nullptr;
  ASSERT_EQ(Message(attnscore_kv_cache_create(b, 64, hkv, d, d, &cache)), "");
  const attnscore_tensor_view kv = CView(k, rows, hkv, d), vv = CView(v, rows, hkv, d),
                              qv = CView(q, rows, hq, d);
  ASSERT_EQ(Message(attnscore_kv_cache_append_packed(cache, &kv, &vv, counts)), "");
  attnscore_kv_cache_attend_options options = ATTNSCORE_KV_CACHE_ATTEND_OPTIONS_INIT;
  options.softcap = 2.5f, options.sinks = sinks.data(), options.alibi_slopes = slopes.data();
  options.windowed = 1, options.window_left = 8;
  std::vector<float> out_c(rows * hq * d), out_cpp(out_c.size());
  const attnscore_tensor ov = COut(out_c, rows, hq, d);
  ASSERT_EQ(Message(attnscore_kv_cache_attend_packed(cache, engine_, &qv, counts, &options, &ov)),
            "");
  std::unique_ptr<KvCache> own;
  ASSERT_TRUE(KvCache::Create(KvCacheShape{b, 64, hkv, d, d}, &own).ok());
  const TensorView<const int64_t> per(counts, {b});
  ASSERT_TRUE(own->AppendPacked(ConstTensor(k.data(), {rows, hkv, d}),
                                ConstTensor(v.data(), {rows, hkv, d}), per)
                  .ok());
  KvCacheAttendOptions cpp;
  cpp.softcap = 2.5f, cpp.window = {8, -1};
  cpp.sinks = ConstTensor(sinks.data(), {hq}), cpp.alibi_slopes = ConstTensor(slopes.data(), {hq});
  ASSERT_TRUE(own->AttendPacked(DefaultEngine(), ConstTensor(q.data(), {rows, hq, d}), per, cpp,
                                Tensor(out_cpp.data(), {rows, hq, d}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
  EXPECT_EQ(attnscore_kv_cache_length(cache, 0), 30);
  EXPECT_EQ(Message(attnscore_kv_cache_append_packed(cache, &kv, &vv, nullptr)),
            "attnscore_kv_cache_append_packed: cache, keys, values and counts must not be null");
  options.windowed = 2;
  EXPECT_EQ(Message(attnscore_kv_cache_attend_packed(cache, engine_, &qv, counts, &options, &ov)),
            "attnscore_kv_cache_attend_packed: options->windowed is 2; want 0 or 1");
  attnscore_kv_cache_destroy(cache);

  // Two sequences of 30 and 1 queries, against 30 and 1 of the same keys.
  const int64_t offsets[] = {0, 30, 31};
  attnscore_multihead_options mh = ATTNSCORE_MULTIHEAD_OPTIONS_INIT;
  mh.causal = ATTNSCORE_CAUSAL_BOTTOM_RIGHT, mh.sinks = sinks.data();
  ASSERT_EQ(Message(attnscore_multihead_attention_packed(engine_, &qv, &kv, &vv, offsets, offsets,
                                                         3, &mh, &ov)),
            "");
  MultiHeadOptions multihead;
  multihead.causal = Causal::kBottomRight, multihead.sinks = ConstTensor(sinks.data(), {hq});
  ASSERT_TRUE(DefaultEngine()
                  .MultiHeadAttentionPacked(
                      ConstTensor(q.data(), {rows, hq, d}), ConstTensor(k.data(), {rows, hkv, d}),
                      ConstTensor(v.data(), {rows, hkv, d}), SequenceOffsets::Of(offsets, 3),
                      SequenceOffsets::Of(offsets, 3), multihead,
                      Tensor(out_cpp.data(), {rows, hq, d}))
                  .ok());
  EXPECT_EQ(out_c, out_cpp);
}

// The multi-head *_check twins: the C++ checks' shapes for a good call; for
// a bad one the forward call's refusal, shapes untouched.
TEST_F(CApi, MultiHeadChecksReportShapesAndRefuseAsTheOps) {
  const int64_t b = 2, n = 3, m = 5, hq = 4, hkv = 2, d = 8, dv = 6;
  const std::vector<float> q(b * n * hq * d), k(b * m * hkv * d), v(b * m * hkv * dv);
  const attnscore_tensor_view qv = CView4(q, b, n, hq, d), kv = CView4(k, b, m, hkv, d),
                              vv = CView4(v, b, m, hkv, dv),
                              short_vv = CView4(v, b, m - 1, hkv, dv);
  const int64_t lens[] = {5, 2};
  const attnscore_valid_lens cl = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT64, lens, {b, 0}};
  const attnscore_multihead_options causal = {
      ATTNSCORE_CAUSAL_BOTTOM_RIGHT, 0.0f, 0.0f, 0, -1, -1, nullptr, nullptr, nullptr};
  attnscore_multihead_shapes shapes = {};
  ASSERT_EQ(
      Message(attnscore_check_multihead_attention(engine_, &qv, &kv, &vv, &cl, &causal, &shapes)),
      "");
  MultiHeadShapes cpp;
  MultiHeadOptions cpp_options;
  cpp_options.causal = Causal::kBottomRight;
  ASSERT_TRUE(DefaultEngine()
                  .CheckMultiHeadAttention(ConstTensor(q.data(), {b, n, hq, d}),
                                           ConstTensor(k.data(), {b, m, hkv, d}),
                                           ConstTensor(v.data(), {b, m, hkv, dv}),
                                           ValidLens::PerBatch(lens, b), cpp_options, &cpp)
                  .ok());
  EXPECT_EQ(std::vector<int64_t>(shapes.out, shapes.out + 4), std::vector<int64_t>({b, n, hq, dv}));
  EXPECT_EQ(std::vector<int64_t>(shapes.attention_weights, shapes.attention_weights + 4),
            std::vector<int64_t>({b, hq, n, m}));
  EXPECT_EQ(std::vector<int64_t>(shapes.out, shapes.out + 4),
            std::vector<int64_t>(cpp.out.begin(), cpp.out.end()));
  EXPECT_EQ(std::vector<int64_t>(shapes.attention_weights, shapes.attention_weights + 4),
            std::vector<int64_t>(cpp.attention_weights.begin(), cpp.attention_weights.end()));

  attnscore_multihead_shapes untouched = {{-1, -1, -1, -1}, {-1, -1, -1, -1}};
  std::vector<float> out(b * n * hq * dv);
  const attnscore_tensor ov = COut4(out, b, n, hq, dv);
  const std::string refused = Message(
      attnscore_check_multihead_attention(engine_, &qv, &kv, &short_vv, &cl, nullptr, &untouched));
  EXPECT_NE(refused.find("values"), std::string::npos) << refused;
  EXPECT_EQ(refused, Message(attnscore_multihead_attention(engine_, &qv, &kv, &short_vv, &cl,
                                                           nullptr, &ov, nullptr)));
  EXPECT_EQ(untouched.out[0], -1);
  EXPECT_EQ(untouched.attention_weights[3], -1);
  const attnscore_multihead_options bogus = {5, 0.0f, 0.0f, 0, -1, -1, nullptr, nullptr, nullptr};
  EXPECT_EQ(
      Message(attnscore_check_multihead_attention(engine_, &qv, &kv, &vv, &cl, &bogus, &shapes)),
      "attnscore_check_multihead_attention: options->causal is outside attnscore_causal");
  EXPECT_EQ(
      Message(attnscore_check_multihead_attention(engine_, &qv, &kv, &vv, &cl, nullptr, nullptr)),
      "attnscore_check_multihead_attention: queries, keys, values and shapes must not be null");
  // A null engine is named before a bad enum, as the op names it.
  EXPECT_EQ(
      Message(attnscore_check_multihead_attention(nullptr, &qv, &kv, &vv, &cl, &bogus, &shapes)),
      "attnscore_check_multihead_attention: the engine or model is null");
}

TEST_F(CApi, StatusesBelongToTheirCallOnEveryThread) {
  std::vector<std::thread> threads;
  std::vector<int> right(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> x(1);
      std::vector<float> y(1);
      const int32_t lens[] = {-(t + 1)};
      const attnscore_tensor_view xv = CView(x, 1, 1, 1);
      const attnscore_tensor yv = COut(y, 1, 1, 1);
      const attnscore_valid_lens cl = {ATTNSCORE_LENS_PER_BATCH, ATTNSCORE_LENS_INT32, lens, {1, 0}};
      for (int call = 0; call < 200; ++call) {
        const std::string text = Message(attnscore_masked_softmax(engine_, &xv, &cl, &yv));
        right[t] += text.find("is " + std::to_string(-(t + 1)) + ";") != std::string::npos;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(right[t], 200) << "thread " << t;
}

TEST_F(CApi, NamesOptionsDescribeAndVersion) {
  EXPECT_STREQ(attnscore_version(), Version());
  attnscore_isa isa;
  ASSERT_EQ(attnscore_parse_isa("avx2", &isa), 1);
  EXPECT_EQ(isa, ATTNSCORE_ISA_AVX2);
  EXPECT_STREQ(attnscore_isa_name(isa), "avx2");
  EXPECT_EQ(attnscore_parse_isa("avx1024", &isa), 0);
  EXPECT_EQ(attnscore_isa_name(-1), nullptr);
  attnscore_precision precision;
  ASSERT_EQ(attnscore_parse_precision("bf16", &precision), 1);
  EXPECT_STREQ(attnscore_precision_name(precision), "bf16");
  ASSERT_EQ(attnscore_parse_precision("int8", &precision), 1);
  EXPECT_EQ(precision, ATTNSCORE_INT8);
  EXPECT_STREQ(attnscore_precision_name(precision), "int8");
  EXPECT_EQ(attnscore_precision_name(3), nullptr);
  attnscore_engine_options options;
  ASSERT_EQ(attnscore_engine_options_of(engine_, &options), nullptr);
  EXPECT_EQ(options.threads, 1);
  // The engine's own text (each engine reports the workspace bytes it holds).
  size_t length = 0;
  ASSERT_EQ(attnscore_engine_describe(engine_, nullptr, 0, &length), nullptr);
  std::vector<char> whole(length + 1, 'x');
  size_t again = 0;
  ASSERT_EQ(attnscore_engine_describe(engine_, whole.data(), whole.size(), &again), nullptr);
  EXPECT_EQ(again, length);
  const std::string text(whole.data());
  EXPECT_EQ(text.size(), length);
  EXPECT_EQ(text.rfind("highway targets on this cpu: ", 0), 0u) << text;
  EXPECT_NE(text.find("\nthreads: 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nworkspace bytes held: "), std::string::npos) << text;
  char small[16];
  ASSERT_EQ(attnscore_engine_describe(engine_, small, sizeof small, nullptr), nullptr);
  EXPECT_EQ(std::string(small), text.substr(0, 15));
}

}  // namespace
}  // namespace attnscore::test
