#include "cli/run.h"

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/common.h"
#include "cli/outputs.h"
#include "npy/npy.h"

namespace attnscore::cli {
namespace {

// "(2, 3)", and "(4,)" for rank 1, as numpy prints a shape.
std::string ShapeOf(const npy::NpyArray& a) {
  std::string s = "(";
  for (size_t d = 0; d < a.shape.size(); ++d) {
    s += (d ? ", " : "") + std::to_string(a.shape[d]);
  }
  return s + (a.shape.size() == 1 ? ",)" : ")");
}

// Every op needs each dim >= 1; an empty one is named with its file.
Status CheckNoEmptyDim(const std::string& flag, const std::string& path, const npy::NpyArray& a) {
  for (size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] == 0) {
      return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(a) + " has dim " +
                                     std::to_string(d) + " of size 0; every dim must be >= 1");
    }
  }
  return Status::Ok();
}

// Reads the file named by `flag` into `*array`; it must be a float32 tensor
// of rank 3. Errors name the flag and the file.
Status ReadTensor(const Args& args, const std::string& flag, npy::NpyArray* array) {
  const std::string path = args.get(flag);
  ATTNSCORE_RETURN_IF_ERROR(npy::ReadNpy(path, array));
  if (array->dtype != npy::DType::kFloat32) {
    return Status::InvalidArgument(flag + " " + path + ": dtype is " +
                                   npy::DTypeName(array->dtype) + "; want float32");
  }
  if (array->shape.size() != 3) {
    return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(*array) + " has rank " +
                                   std::to_string(array->shape.size()) + "; want rank 3");
  }
  return CheckNoEmptyDim(flag, path, *array);
}

// A view of an array ReadTensor accepted; it borrows the array's bytes.
ConstTensor ViewOf(const npy::NpyArray& a) {
  return ConstTensor(a.data<float>(), {a.shape[0], a.shape[1], a.shape[2]});
}

// Reads --valid-lens if given: int32 or int64, (B,) or (B, N). `*lens` then
// borrows `*array`'s bytes; without the flag it is ValidLens::None().
Status ReadValidLens(const Args& args, npy::NpyArray* array, ValidLens* lens) {
  *lens = ValidLens::None();
  if (!args.has("--valid-lens")) return Status::Ok();
  const std::string path = args.get("--valid-lens");
  ATTNSCORE_RETURN_IF_ERROR(npy::ReadNpy(path, array));
  const bool is64 = array->dtype == npy::DType::kInt64;
  if (!is64 && array->dtype != npy::DType::kInt32) {
    return Status::InvalidArgument("--valid-lens " + path + ": dtype is " +
                                   npy::DTypeName(array->dtype) + "; want int32 or int64");
  }
  if (array->shape.size() == 1 || array->shape.size() == 2) {
    ATTNSCORE_RETURN_IF_ERROR(CheckNoEmptyDim("--valid-lens", path, *array));
  }
  if (array->shape.size() == 1) {
    *lens = is64 ? ValidLens::PerBatch(array->data<int64_t>(), array->shape[0])
                 : ValidLens::PerBatch(array->data<int32_t>(), array->shape[0]);
  } else if (array->shape.size() == 2) {
    *lens = is64 ? ValidLens::PerQuery(array->data<int64_t>(), array->shape[0], array->shape[1])
                 : ValidLens::PerQuery(array->data<int32_t>(), array->shape[0], array->shape[1]);
  } else {
    return Status::InvalidArgument("--valid-lens " + path + ": shape " + ShapeOf(*array) +
                                   " has rank " + std::to_string(array->shape.size()) +
                                   "; want (B,) or (B, N)");
  }
  return Status::Ok();
}

// Checks the output paths the run names (before anything is computed).
Status CheckOutputs(const Args& args, const std::vector<std::string>& flags) {
  std::vector<Output> outputs;
  for (const std::string& flag : flags) {
    if (args.has(flag)) outputs.push_back({flag, args.get(flag), {}, nullptr});
  }
  return CheckOutputPaths(outputs);
}

int RunSoftmax(const Args& args) {
  Status s = CheckFlags(args,
                        {"--x", "--valid-lens", "--out", "--weights-out", "--threads", "--isa",
                         "--precision", "--info"},
                        {"--x", "--out"}, "run softmax");
  std::unique_ptr<Engine> engine;
  npy::NpyArray x, lens_array;
  ValidLens lens;
  OutputShapes shapes;
  if (!s.ok() || !(s = CheckOutputs(args, {"--out", "--weights-out"})).ok() ||
      !(s = MakeEngine(args, "softmax", &engine)).ok() || !(s = ReadTensor(args, "--x", &x)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok() ||
      !(s = engine->CheckMaskedSoftmax(ViewOf(x), lens, &shapes)).ok()) {
    return Fail(s);
  }
  std::vector<float> y(static_cast<size_t>(x.size()));
  const ConstTensor xv = ViewOf(x);
  s = engine->MaskedSoftmax(xv, lens, Tensor(y.data(), {xv.dims[0], xv.dims[1], xv.dims[2]}));
  if (s.ok()) {
    // Y is the attention weights; --weights-out writes it again, so that a
    // script can treat every op alike.
    std::vector<Output> outputs = {{"--out", args.get("--out"), x.shape, y.data()}};
    if (args.has("--weights-out")) {
      outputs.push_back({"--weights-out", args.get("--weights-out"), x.shape, y.data()});
    }
    s = LandOutputs(outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

// Loads --model as a concat model whose query size is the last dim of Q;
// when the model cannot take that size, the error says so.
Status LoadConcat(const Args& args, const npy::NpyArray& q,
                  std::unique_ptr<ConcatAttention>* model) {
  const Status s = ConcatAttention::Load(args.get("--model"), q.shape[2], model);
  if (s.ok() || s.message().find("query_size") == std::string::npos) return s;
  return Status(s.code(), "--queries " + args.get("--queries") +
                              " has Dq = " + std::to_string(q.shape[2]) +
                              " features, which the model cannot take: " + s.message());
}

// run dot | additive | concat | bilinear: the same inputs and outputs; the
// models add --model.
int RunAttention(const Args& args, const std::string& op) {
  const bool additive = op == "additive", concat = op == "concat", bilinear = op == "bilinear";
  std::set<std::string> allowed = {"--queries",   "--keys",        "--values",  "--valid-lens",
                                   "--out",       "--weights-out", "--threads", "--isa",
                                   "--precision", "--info"};
  std::set<std::string> required = {"--queries", "--keys", "--values", "--out"};
  if (additive || concat || bilinear) allowed.insert("--model"), required.insert("--model");
  Status s = CheckFlags(args, allowed, required, "run " + op);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Engine> engine;
  std::unique_ptr<AdditiveAttention> additive_model;
  std::unique_ptr<ConcatAttention> concat_model;
  std::unique_ptr<BilinearAttention> bilinear_model;
  npy::NpyArray q, k, v, lens_array;
  ValidLens lens;
  if (!(s = CheckOutputs(args, {"--out", "--weights-out"})).ok() ||
      !(s = MakeEngine(args, op, &engine)).ok() || !(s = ReadTensor(args, "--queries", &q)).ok() ||
      (additive && !(s = AdditiveAttention::Load(args.get("--model"), &additive_model)).ok()) ||
      (concat && !(s = LoadConcat(args, q, &concat_model)).ok()) ||
      (bilinear && !(s = BilinearAttention::Load(args.get("--model"), &bilinear_model)).ok()) ||
      !(s = ReadTensor(args, "--keys", &k)).ok() || !(s = ReadTensor(args, "--values", &v)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok()) {
    return Fail(s);
  }
  // Every input is checked, by the engine's own checks, before any output
  // is allocated: bad input costs nothing, however large its outputs.
  OutputShapes shapes;
  s = additive ? additive_model->Check(ViewOf(q), ViewOf(k), ViewOf(v), lens, &shapes)
      : concat   ? concat_model->Check(ViewOf(q), ViewOf(k), ViewOf(v), lens, &shapes)
      : bilinear ? bilinear_model->Check(ViewOf(q), ViewOf(k), ViewOf(v), lens, &shapes)
                 : engine->CheckDotProductAttention(ViewOf(q), ViewOf(k), ViewOf(v), lens, &shapes);
  const std::vector<int64_t> out_shape(shapes.out.begin(), shapes.out.end());
  const std::vector<int64_t> weights_shape(shapes.attention_weights.begin(),
                                           shapes.attention_weights.end());
  const bool want_attention_weights = args.has("--weights-out");
  if (!s.ok() || !(s = CheckOutputSize("--out", out_shape)).ok() ||
      (want_attention_weights && !(s = CheckOutputSize("--weights-out", weights_shape)).ok())) {
    return Fail(s);
  }
  std::vector<float> out(static_cast<size_t>(shapes.out[0] * shapes.out[1] * shapes.out[2]));
  std::vector<float> attention_weights;
  Tensor attention_weights_view;  // empty: the op does not write them
  if (want_attention_weights) {
    attention_weights.resize(static_cast<size_t>(
        shapes.attention_weights[0] * shapes.attention_weights[1] * shapes.attention_weights[2]));
    attention_weights_view =
        Tensor(attention_weights.data(), {weights_shape[0], weights_shape[1], weights_shape[2]});
  }
  const Tensor out_view(out.data(), {out_shape[0], out_shape[1], out_shape[2]});
  s = additive ? additive_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                         attention_weights_view)
      : concat   ? concat_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                         attention_weights_view)
      : bilinear ? bilinear_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens,
                                           out_view, attention_weights_view)
                 : engine->DotProductAttention(ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                             attention_weights_view);
  if (s.ok()) {
    std::vector<Output> outputs = {{"--out", args.get("--out"), out_shape, out.data()}};
    if (want_attention_weights) {
      outputs.push_back(
          {"--weights-out", args.get("--weights-out"), weights_shape, attention_weights.data()});
    }
    s = LandOutputs(outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

// --causal top-left|bottom-right; Causal::kNone without the flag.
Status ParseCausal(const Args& args, Causal* causal) {
  *causal = Causal::kNone;
  if (!args.has("--causal")) return Status::Ok();
  const std::string mask = args.get("--causal");
  if (mask == "top-left") {
    *causal = Causal::kTopLeft;
  } else if (mask == "bottom-right") {
    *causal = Causal::kBottomRight;
  } else {
    return Status::InvalidArgument("--causal wants top-left or bottom-right, got '" + mask + "'");
  }
  return Status::Ok();
}

// run multihead: d2l's MultiHeadAttention from --model with --heads heads.
int RunMultiHead(const Args& args) {
  Status s = CheckFlags(args,
                        {"--model", "--heads", "--queries", "--keys", "--values", "--valid-lens",
                         "--causal", "--out", "--weights-out", "--threads", "--isa", "--precision",
                         "--info"},
                        {"--model", "--heads", "--queries", "--keys", "--values", "--out"},
                        "run multihead");
  if (!s.ok()) return Fail(s);
  int64_t heads = 0;
  Causal causal = Causal::kNone;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<MultiHeadAttention> model;
  npy::NpyArray q, k, v, lens_array;
  ValidLens lens;
  MultiHeadShapes shapes;
  if (!(s = ParseInt(args, "--heads", 1, 1, int64_t{1} << 20, &heads)).ok() ||
      !(s = ParseCausal(args, &causal)).ok() ||
      !(s = CheckOutputs(args, {"--out", "--weights-out"})).ok() ||
      !(s = MakeEngine(args, "multihead", &engine)).ok() ||
      !(s = MultiHeadAttention::Load(args.get("--model"), heads, &model)).ok() ||
      !(s = ReadTensor(args, "--queries", &q)).ok() || !(s = ReadTensor(args, "--keys", &k)).ok() ||
      !(s = ReadTensor(args, "--values", &v)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok() ||
      !(s = model->Check(ViewOf(q), ViewOf(k), ViewOf(v), lens, causal, &shapes)).ok()) {
    return Fail(s);
  }
  const std::vector<int64_t> out_shape(shapes.out.begin(), shapes.out.begin() + 3);  // (B, N, H)
  const std::vector<int64_t> weights_shape(shapes.attention_weights.begin(),
                                           shapes.attention_weights.end());
  const bool want_weights = args.has("--weights-out");
  if (!(s = CheckOutputSize("--out", out_shape)).ok() ||
      (want_weights && !(s = CheckOutputSize("--weights-out", weights_shape)).ok())) {
    return Fail(s);
  }
  std::vector<float> out(static_cast<size_t>(out_shape[0] * out_shape[1] * out_shape[2]));
  std::vector<float> weights;
  Tensor weights_view;  // empty: not written
  if (want_weights) {
    weights.resize(static_cast<size_t>(weights_shape[0] * weights_shape[1] * weights_shape[2] *
                                       weights_shape[3]));
    weights_view = Tensor(weights.data(),
                          {weights_shape[0], weights_shape[1], weights_shape[2], weights_shape[3]});
  }
  s = model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, causal,
                     Tensor(out.data(), {out_shape[0], out_shape[1], out_shape[2]}), weights_view);
  if (s.ok()) {
    std::vector<Output> outputs = {{"--out", args.get("--out"), out_shape, out.data()}};
    if (want_weights) {
      outputs.push_back({"--weights-out", args.get("--weights-out"), weights_shape, weights.data()});
    }
    s = LandOutputs(outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

}  // namespace

int RunCommand(const Args& args) {
  const std::string op = args.words.size() > 1 ? args.words[1] : "";
  if (op == "softmax") return RunSoftmax(args);
  if (op == "dot" || op == "additive" || op == "concat" || op == "bilinear") {
    return RunAttention(args, op);
  }
  if (op == "multihead") return RunMultiHead(args);
  return Fail(Status::InvalidArgument(
      "run wants an op: softmax, dot, additive, concat, multihead or bilinear, got '" + op + "'"));
}

}  // namespace attnscore::cli
