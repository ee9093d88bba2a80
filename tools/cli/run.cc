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
    return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(*array) +
                                   " has rank " + std::to_string(array->shape.size()) +
                                   "; want rank 3");
  }
  return Status::Ok();
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

// One float32 output: the flag naming its file, its shape and its data.
struct Output {
  std::string flag;
  std::vector<int64_t> shape;
  const float* data;
};

// Writes every output, or none: each is written under a staging name
// (PATH.attnscore-partial) first and renamed to PATH only when all of them
// were written, so a failed run leaves no output behind and does not touch
// files already there.
Status WriteOutputs(const Args& args, const std::vector<Output>& outputs) {
  // Checked before anything is written: the renames at the end then have no
  // foreseeable reason to fail halfway.
  std::vector<std::filesystem::path> targets;
  for (const Output& o : outputs) {
    std::error_code error;
    const std::filesystem::path path = std::filesystem::weakly_canonical(args.get(o.flag), error);
    if (error || std::filesystem::is_directory(path)) {
      return Status::InvalidArgument(o.flag + " " + args.get(o.flag) +
                                     (error ? ": not a usable path" : ": is a directory"));
    }
    for (size_t n = 0; n < targets.size(); ++n) {
      if (targets[n] == path) {
        return Status::InvalidArgument(outputs[n].flag + " and " + o.flag +
                                       " name the same file " + args.get(o.flag));
      }
    }
    targets.push_back(path);
  }
  std::vector<std::string> staged;
  auto discard = [&] {
    for (const std::string& path : staged) unlink(path.c_str());
  };
  for (const Output& o : outputs) {
    const std::string path = args.get(o.flag) + ".attnscore-partial";
    Status s = npy::WriteNpy(path, npy::DType::kFloat32, o.shape, o.data);
    if (!s.ok()) {
      discard();
      return Status(s.code(), o.flag + ": " + s.message());
    }
    staged.push_back(path);
  }
  for (size_t n = 0; n < outputs.size(); ++n) {
    const std::string final_path = args.get(outputs[n].flag);
    if (std::rename(staged[n].c_str(), final_path.c_str()) != 0) {
      staged.erase(staged.begin(), staged.begin() + static_cast<ptrdiff_t>(n));
      discard();
      return Status::IoError(outputs[n].flag + ": cannot rename into " + final_path);
    }
  }
  return Status::Ok();
}

int RunSoftmax(const Args& args) {
  Status s = CheckFlags(args,
                        {"--x", "--valid-lens", "--out", "--weights-out", "--threads", "--isa", "--precision",
                         "--info"},
                        {"--x", "--out"}, "run softmax");
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Engine> engine;
  npy::NpyArray x, lens_array;
  ValidLens lens;
  if (!(s = MakeEngine(args, "softmax", &engine)).ok() || !(s = ReadTensor(args, "--x", &x)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok()) {
    return Fail(s);
  }
  std::vector<float> y(static_cast<size_t>(x.size()));
  const ConstTensor xv = ViewOf(x);
  s = engine->MaskedSoftmax(xv, lens, Tensor(y.data(), {xv.dims[0], xv.dims[1], xv.dims[2]}));
  if (s.ok()) {
    // Y is the attention weights; --weights-out writes it again, so that a
    // script can treat every op alike.
    std::vector<Output> outputs = {{"--out", x.shape, y.data()}};
    if (args.has("--weights-out")) outputs.push_back({"--weights-out", x.shape, y.data()});
    s = WriteOutputs(args, outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

// Loads --model as a concat model whose query size is the last dim of Q;
// when the model cannot take that size, the error says so.
Status LoadConcat(const Args& args, const npy::NpyArray& q, std::unique_ptr<ConcatAttention>* model) {
  const Status s = ConcatAttention::Load(args.get("--model"), q.shape[2], model);
  if (s.ok() || s.message().find("query_size") == std::string::npos) return s;
  return Status(s.code(), "--queries " + args.get("--queries") + " has Dq = " +
                              std::to_string(q.shape[2]) + " features, which the model cannot take: " +
                              s.message());
}

// run dot | additive | concat: the same inputs and outputs; additive and
// concat add --model.
int RunAttention(const Args& args, const std::string& op) {
  const bool additive = op == "additive", concat = op == "concat";
  std::set<std::string> allowed = {"--queries", "--keys", "--values", "--valid-lens", "--out",
                                   "--weights-out", "--threads", "--isa", "--precision", "--info"};
  std::set<std::string> required = {"--queries", "--keys", "--values", "--out"};
  if (additive || concat) allowed.insert("--model"), required.insert("--model");
  Status s = CheckFlags(args, allowed, required, "run " + op);
  if (!s.ok()) return Fail(s);
  std::unique_ptr<Engine> engine;
  std::unique_ptr<AdditiveAttention> additive_model;
  std::unique_ptr<ConcatAttention> concat_model;
  npy::NpyArray q, k, v, lens_array;
  ValidLens lens;
  if (!(s = MakeEngine(args, op, &engine)).ok() || !(s = ReadTensor(args, "--queries", &q)).ok() ||
      (additive && !(s = AdditiveAttention::Load(args.get("--model"), &additive_model)).ok()) ||
      (concat && !(s = LoadConcat(args, q, &concat_model)).ok()) ||
      !(s = ReadTensor(args, "--keys", &k)).ok() || !(s = ReadTensor(args, "--values", &v)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok()) {
    return Fail(s);
  }
  // Concat attends over V's rows; the others over the keys.
  const int64_t batch = q.shape[0], queries = q.shape[1], keys = concat ? v.shape[1] : k.shape[1];
  const int64_t out_dim = concat ? concat_model->output_size() : v.shape[2];
  const bool want_attention_weights = args.has("--weights-out");
  if (!(s = CheckOutputSize("--out", {batch, queries, out_dim})).ok() ||
      (want_attention_weights &&
       !(s = CheckOutputSize("--weights-out", {batch, queries, keys})).ok())) {
    return Fail(s);
  }
  std::vector<float> out(static_cast<size_t>(batch * queries * out_dim));
  std::vector<float> attention_weights;
  Tensor attention_weights_view;  // empty: the op does not write them
  if (want_attention_weights) {
    attention_weights.resize(static_cast<size_t>(batch * queries * keys));
    attention_weights_view = Tensor(attention_weights.data(), {batch, queries, keys});
  }
  const Tensor out_view(out.data(), {batch, queries, out_dim});
  s = additive ? additive_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                         attention_weights_view)
      : concat ? concat_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                       attention_weights_view)
               : engine->DotProductAttention(ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                             attention_weights_view);
  if (s.ok()) {
    std::vector<Output> outputs = {{"--out", {batch, queries, out_dim}, out.data()}};
    if (want_attention_weights) {
      outputs.push_back({"--weights-out", {batch, queries, keys}, attention_weights.data()});
    }
    s = WriteOutputs(args, outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

}  // namespace

int RunCommand(const Args& args) {
  const std::string op = args.words.size() > 1 ? args.words[1] : "";
  if (op == "softmax") return RunSoftmax(args);
  if (op == "dot" || op == "additive" || op == "concat") return RunAttention(args, op);
  return Fail(Status::InvalidArgument("run wants an op: softmax, dot, additive or concat, got '" +
                                      op + "'"));
}

}  // namespace attnscore::cli
