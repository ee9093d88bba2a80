#include "cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>

#include "attnscore/attnscore.h"
#include "cli/args.h"
#include "io/npy.h"
#include "kernels/masked_softmax.h"
#include "matmul/matmul.h"

namespace attnscore::cli {

const char kUsage[] = R"(attnscore: attention scoring functions on the CPU

usage:
  attnscore info
  attnscore run softmax --x X.npy [--valid-lens L.npy] --out Y.npy
                        [--weights-out W.npy]
  attnscore run dot     --queries Q.npy --keys K.npy --values V.npy
                        [--valid-lens L.npy] --out O.npy [--weights-out W.npy]
  attnscore run additive --model M.safetensors --queries Q.npy --keys K.npy
                        --values V.npy [--valid-lens L.npy] --out O.npy
                        [--weights-out W.npy]
  attnscore run concat  --model M.safetensors --queries Q.npy --keys K.npy
                        --values V.npy [--valid-lens L.npy] --out O.npy
                        [--weights-out W.npy]
  attnscore bench softmax|dot|additive|concat --batch B --queries N --keys M
                        [--query-dim D] [--key-dim Dk] [--hidden H] [--value-dim Dv]
                        [--out-dim O]
                        [--valid-lens none|full|random|random-batch|INT|FILE.npy]
                        [--weights] [--repeat R] [--json]
common flags: --threads T (default 1), --isa scalar|sse4|avx2|avx512|best
              (default best, which yields to $ATTNSCORE_ISA when it is set),
              --precision fp32|bf16 (default fp32; bf16 rounds the dot
              product's matmul inputs to bfloat16, see below),
              --info (run and bench: after the run, print what info prints,
              with each oneDNN matmul made and the implementation it chose),
              --help

Tensors are float32 .npy files (C order): X (B, N, M); Q (B, N, D),
K (B, M, D), V (B, M, Dv). Valid lengths are int32 or int64, shape (B,) or
(B, N). Outputs are written atomically; on error none is left behind.
An additive model is a .safetensors state_dict of d2l's AdditiveAttention:
float32 W_q.weight (H, Dq), W_k.weight (H, Dk) and w_v.weight (1, H), as
tools/export_torch.py writes it; then Q is (B, N, Dq) and K (B, M, Dk).
A concat model is the state_dict of the seq2seq tutorial's Attn: float32
attn.weight (M, Dq + Dk), attn.bias (M), attn_combine.weight (O, Dq + Dv)
and attn_combine.bias (O); Dq is taken from Q (B, N, Dq); K is (B, N, Dk),
one key per query, V (B, M, Dv) and out (B, N, O). --weights-out writes
the attention weights (B, N, M), which tools/show_heatmaps.py draws (for
softmax they are Y itself, written again).

bench times the op on random data: median and min of R runs (default 20)
after 3 warm-up runs. --valid-lens: none (all keys), full (L = M given
explicitly), random (per query, uniform in [1, M]), random-batch (per batch
entry, uniform in [1, M]), one INT for every query, or the lengths in a
FILE.npy ((B,) or (B, N)). dot, additive and concat: --query-dim (default
64), --value-dim (64), --weights (also write the attention weights). dot: GFLOP/s
counts 2 L (D + Dv) per query over valid keys only, GB/s the bytes of Q, K, V
and out. additive: random weights initialised as nn.Linear does, --key-dim
(default: the query dim) and --hidden (64); "triples/ns" counts the valid
(query, key, hidden) triples, one tanh each; GFLOP/s counts the reference's
arithmetic except tanh: the projections 2 H (N Dq + Lmax Dk) per batch entry
(Lmax: its longest length), 3 per triple and 2 L Dv per query. softmax: GB/s
counts the valid scores read and every weight written; its JSON "gflops" is
null. concat: --keys is M (the value rows), --query-dim Dq (default 64),
--key-dim Dk (default Dq), --value-dim Dv, --out-dim O (default Dv); GFLOP/s
counts 2 M (Dq + Dk) + 2 L Dv + 2 O (Dq + Dv) per query. The JSON also
names the Highway target in use and oneDNN's implementations.

--precision bf16 runs dot's two matrix products in oneDNN's bf16 matmul
(fp32 accumulation): Q, K, V and the attention weights are rounded to
bfloat16 for them, while scores, softmax, --weights-out and the output stay
float32. Calls with at most 3 queries per batch entry take fp32 row kernels
in either mode; the other ops have no bf16 mode and refuse the flag. On a
CPU without bf16 arithmetic (no avx512_bf16 or AMX, or an ISA cap below
them) the products run as float32 matmuls on the same rounded values: the
same results up to the order of the sums, at about float32's speed.

info prints the CPU's Highway targets, the ones the ISA cap allows and the
one in use, oneDNN's version and effective ISA, the cap, the threads, the
precision and whether the bf16 matmuls are native.

exit status: 0 success, 2 bad input or usage, 1 internal failure.
)";

namespace {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

int Fail(const Status& status) {
  std::fprintf(stderr, "attnscore: error: %s\n", status.message().c_str());
  return status.code() == StatusCode::kInternal ? kExitInternal : kExitBadInput;
}

const std::set<std::string> kSwitches = {"--json", "--help", "--weights", "--info"};

// What `attnscore info` prints; after a run it also lists the oneDNN matmuls
// the run created and the implementation oneDNN chose for each.
void PrintInfo(const Engine& engine) {
  std::printf("attnscore 0.1.0\n%s", engine.Describe().c_str());
}

// `op`: the op the engine will run ("" for info). Only dot has a bf16 mode,
// so the others refuse --precision bf16 rather than ignore it.
Status MakeEngine(const Args& args, const std::string& op, std::unique_ptr<Engine>* engine) {
  EngineOptions options;
  int64_t threads;
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--threads", 1, 1, 1024, &threads));
  options.threads = static_cast<int>(threads);
  // Without --isa the engine takes $ATTNSCORE_ISA itself.
  const std::string isa = args.get("--isa", "best");
  if (!ParseIsa(isa, &options.isa)) {
    return Status::InvalidArgument("--isa is '" + isa +
                                   "'; want scalar, sse4, avx2, avx512 or best");
  }
  const std::string precision = args.get("--precision", "fp32");
  if (!ParsePrecision(precision, &options.precision)) {
    return Status::InvalidArgument("--precision is '" + precision + "'; want fp32 or bf16");
  }
  if (options.precision == Precision::kBf16 && !op.empty() && op != "dot") {
    return Status::InvalidArgument("--precision bf16: only dot has a bf16 mode; " + op +
                                   " runs in fp32");
  }
  return Engine::Create(options, engine);
}

// ---- run -------------------------------------------------------------------

std::string ShapeOf(const io::NpyArray& a) {
  std::string s = "(";
  for (size_t d = 0; d < a.shape.size(); ++d) {
    s += (d ? ", " : "") + std::to_string(a.shape[d]);
  }
  return s + (a.shape.size() == 1 ? ",)" : ")");
}

// Reads a float32 tensor of rank 3 named by `flag`.
Status ReadTensor(const Args& args, const std::string& flag, io::NpyArray* array) {
  const std::string path = args.get(flag);
  ATTNSCORE_RETURN_IF_ERROR(io::ReadNpy(path, array));
  if (array->dtype != io::DType::kFloat32) {
    return Status::InvalidArgument(flag + " " + path + ": dtype is " +
                                   io::DTypeName(array->dtype) + "; want float32");
  }
  if (array->shape.size() != 3) {
    return Status::InvalidArgument(flag + " " + path + ": shape " + ShapeOf(*array) +
                                   " has rank " + std::to_string(array->shape.size()) +
                                   "; want rank 3");
  }
  return Status::Ok();
}

ConstTensor ViewOf(const io::NpyArray& a) {
  return ConstTensor(a.data<float>(), {a.shape[0], a.shape[1], a.shape[2]});
}

// Reads --valid-lens if given (int32/int64, (B,) or (B, N)).
Status ReadValidLens(const Args& args, io::NpyArray* array, ValidLens* lens) {
  *lens = ValidLens::None();
  if (!args.has("--valid-lens")) return Status::Ok();
  const std::string path = args.get("--valid-lens");
  ATTNSCORE_RETURN_IF_ERROR(io::ReadNpy(path, array));
  const bool is64 = array->dtype == io::DType::kInt64;
  if (!is64 && array->dtype != io::DType::kInt32) {
    return Status::InvalidArgument("--valid-lens " + path + ": dtype is " +
                                   io::DTypeName(array->dtype) + "; want int32 or int64");
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

// Writes each (flag, shape, data) output. All are written under staging
// names first and renamed only when every one succeeded, so a failed run
// leaves no output file behind and does not touch files already there.
struct Output {
  std::string flag;
  std::vector<int64_t> shape;
  const float* data;
};

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
    Status s = io::WriteNpy(path, io::DType::kFloat32, o.shape, o.data);
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

// Outputs the CLI allocates are capped, so a tiny but hostile input cannot
// make it ask for tens of GiB (e.g. weights (B, N, M) from keys (1, 65536, 1)).
constexpr int64_t kMaxOutputFloats = int64_t{1} << 31;  // 8 GiB

Status CheckOutputSize(const std::string& what, const std::vector<int64_t>& shape) {
  int64_t floats = 1;
  for (int64_t n : shape) {
    if (__builtin_mul_overflow(floats, n, &floats) || floats > kMaxOutputFloats) {
      return Status::InvalidArgument(what + " would need more than 2^31 floats (8 GiB)");
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
  io::NpyArray x, lens_array;
  ValidLens lens;
  if (!(s = MakeEngine(args, "softmax", &engine)).ok() || !(s = ReadTensor(args, "--x", &x)).ok() ||
      !(s = ReadValidLens(args, &lens_array, &lens)).ok()) {
    return Fail(s);
  }
  std::vector<float> y(static_cast<size_t>(x.size()));
  const ConstTensor xv = ViewOf(x);
  s = engine->MaskedSoftmax(xv, lens, Tensor(y.data(), {xv.dims[0], xv.dims[1], xv.dims[2]}));
  if (s.ok()) {
    // Y is the weights; --weights-out lets a script treat every op alike.
    std::vector<Output> outputs = {{"--out", x.shape, y.data()}};
    if (args.has("--weights-out")) outputs.push_back({"--weights-out", x.shape, y.data()});
    s = WriteOutputs(args, outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

// A concat model's query size is the queries' last dim: say so when the
// model does not fit it.
Status LoadConcat(const Args& args, const io::NpyArray& q, std::unique_ptr<ConcatAttention>* model) {
  const Status s = ConcatAttention::Load(args.get("--model"), q.shape[2], model);
  if (s.ok() || s.message().find("query_size") == std::string::npos) return s;
  return Status(s.code(), "--queries " + args.get("--queries") + " has Dq = " +
                              std::to_string(q.shape[2]) + " features, which the model cannot take: " +
                              s.message());
}

// run dot | additive | concat: the same inputs and outputs; the models add
// --model. A concat model takes its query size from Q.
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
  io::NpyArray q, k, v, lens_array;
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
  if (!(s = CheckOutputSize("--out", {batch, queries, out_dim})).ok() ||
      (args.has("--weights-out") &&
       !(s = CheckOutputSize("--weights-out", {batch, queries, keys})).ok())) {
    return Fail(s);
  }
  std::vector<float> out(static_cast<size_t>(batch * queries * out_dim));
  std::vector<float> weights;
  Tensor weights_view;
  if (args.has("--weights-out")) {
    weights.resize(static_cast<size_t>(batch * queries * keys));
    weights_view = Tensor(weights.data(), {batch, queries, keys});
  }
  const Tensor out_view(out.data(), {batch, queries, out_dim});
  s = additive ? additive_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                         weights_view)
      : concat ? concat_model->Forward(*engine, ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                       weights_view)
               : engine->DotProductAttention(ViewOf(q), ViewOf(k), ViewOf(v), lens, out_view,
                                             weights_view);
  if (s.ok()) {
    std::vector<Output> outputs = {{"--out", {batch, queries, out_dim}, out.data()}};
    if (!weights.empty()) outputs.push_back({"--weights-out", {batch, queries, keys}, weights.data()});
    s = WriteOutputs(args, outputs);
  }
  if (!s.ok()) return Fail(s);
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

// ---- bench -----------------------------------------------------------------

// The distinct implementations oneDNN chose for this process's matmuls, as
// JSON strings: "\"brg:avx512_core\", \"gemm:jit\"".
std::string OnednnImplementations() {
  std::set<std::string> names;
  for (const matmul::PlanSummary& plan : matmul::CachedPlans()) names.insert(plan.implementation);
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "\"" : ", \"") + name + "\"";
  return list;
}

struct BenchShape {
  int64_t batch, queries, keys, depth, value_dim;
  int64_t key_dim, hidden;  // additive and concat; additive
  int64_t out_dim;          // concat
};

// Weights as nn.Linear initialises them: uniform in ±1/sqrt(fan_in).
std::vector<float> LinearInit(std::mt19937* rng, int64_t out_features, int64_t in_features) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  std::vector<float> w(static_cast<size_t>(out_features * in_features));
  for (float& x : w) x = uniform(*rng);
  return w;
}

// Valid lengths for --valid-lens: empty means none.
Status MakeBenchLens(const std::string& mode, const BenchShape& s, std::mt19937* rng,
                     std::vector<int64_t>* lens, bool* per_query) {
  std::uniform_int_distribution<int64_t> length(1, s.keys);
  *per_query = false;
  lens->clear();
  if (mode == "none") return Status::Ok();
  if (mode.size() > 4 && mode.compare(mode.size() - 4, 4, ".npy") == 0) {
    // Given lengths, e.g. the very ones another tool times the same shape with.
    io::NpyArray array;
    ATTNSCORE_RETURN_IF_ERROR(io::ReadNpy(mode, &array));
    const bool is64 = array.dtype == io::DType::kInt64;
    const bool per_batch_shape = array.shape == std::vector<int64_t>{s.batch};
    const bool per_query_shape = array.shape == std::vector<int64_t>{s.batch, s.queries};
    if ((!is64 && array.dtype != io::DType::kInt32) || (!per_batch_shape && !per_query_shape)) {
      return Status::InvalidArgument("--valid-lens " + mode + ": want int32 or int64 of shape (" +
                                     std::to_string(s.batch) + ",) or (" + std::to_string(s.batch) +
                                     ", " + std::to_string(s.queries) + ")");
    }
    for (int64_t n = 0; n < array.size(); ++n) {
      const int64_t value = is64 ? array.data<int64_t>()[n] : array.data<int32_t>()[n];
      if (value < 0) return Status::InvalidArgument("--valid-lens " + mode + ": negative length");
      lens->push_back(value);
    }
    *per_query = per_query_shape;
    return Status::Ok();
  }
  if (mode == "full") {
    lens->assign(static_cast<size_t>(s.batch), s.keys);
  } else if (mode == "random-batch") {
    for (int64_t b = 0; b < s.batch; ++b) lens->push_back(length(*rng));
  } else if (mode == "random") {
    *per_query = true;
    for (int64_t r = 0; r < s.batch * s.queries; ++r) lens->push_back(length(*rng));
  } else {
    char* end = nullptr;
    const long long fixed = std::strtoll(mode.c_str(), &end, 10);
    if (mode.empty() || *end != '\0' || fixed < 0) {
      return Status::InvalidArgument(
          "--valid-lens is '" + mode +
          "'; want none, full, random, random-batch, an INT >= 0 or a FILE.npy");
    }
    lens->assign(static_cast<size_t>(s.batch), static_cast<int64_t>(fixed));
  }
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int Bench(const Args& args) {
  const std::string op = args.words.size() > 1 ? args.words[1] : "";
  if (op != "softmax" && op != "dot" && op != "additive" && op != "concat") {
    return Fail(Status::InvalidArgument(
        "bench wants an op: softmax, dot, additive or concat, got '" + op + "'"));
  }
  std::set<std::string> allowed = {"--batch", "--queries", "--keys", "--valid-lens",
                                   "--repeat", "--json", "--threads", "--isa", "--precision", "--info"};
  if (op != "softmax") allowed.insert({"--query-dim", "--value-dim", "--weights"});
  if (op == "additive") allowed.insert({"--key-dim", "--hidden"});
  if (op == "concat") allowed.insert({"--key-dim", "--out-dim"});
  Status s = CheckFlags(args, allowed, {"--batch", "--queries", "--keys"}, "bench " + op);
  if (s.ok() && args.has("--json") && args.has("--info")) {
    s = Status::InvalidArgument(
        "--info and --json both print to stdout; the JSON already has highway_target and "
        "onednn_implementations");
  }
  BenchShape shape{};
  int64_t repeat = 0;
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  if (!s.ok() || !(s = ParseInt(args, "--batch", 1, 1, kMaxDim, &shape.batch)).ok() ||
      !(s = ParseInt(args, "--queries", 1, 1, kMaxDim, &shape.queries)).ok() ||
      !(s = ParseInt(args, "--keys", 1, 1, kMaxDim, &shape.keys)).ok() ||
      !(s = ParseInt(args, "--query-dim", 64, 1, kMaxDim, &shape.depth)).ok() ||
      !(s = ParseInt(args, "--value-dim", 64, 1, kMaxDim, &shape.value_dim)).ok() ||
      !(s = ParseInt(args, "--key-dim", shape.depth, 1, kMaxDim, &shape.key_dim)).ok() ||
      !(s = ParseInt(args, "--hidden", 64, 1, kMaxDim, &shape.hidden)).ok() ||
      !(s = ParseInt(args, "--out-dim", shape.value_dim, 1, kMaxDim, &shape.out_dim)).ok() ||
      !(s = ParseInt(args, "--repeat", 20, 1, 1000000, &repeat)).ok()) {
    return Fail(s);
  }
  const int64_t scores = shape.batch * shape.queries * shape.keys;
  for (const auto& [name, dims] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"scores", {shape.batch, shape.queries, shape.keys}},
           {"queries", {shape.batch, shape.queries, shape.depth}},
           {"keys", {shape.batch, shape.keys, std::max(shape.depth, shape.key_dim)}},
           {"additive weights", {shape.hidden, std::max(shape.depth, shape.key_dim)}},
           {"concat keys", {shape.batch, shape.queries, shape.key_dim}},
           {"concat weights", {std::max(shape.keys, shape.out_dim), shape.depth + std::max(shape.key_dim, shape.value_dim)}},
           {"values", {shape.batch, shape.keys, shape.value_dim}},
           {"out", {shape.batch, shape.queries, std::max(shape.value_dim, shape.out_dim)}}}) {
    if (!(s = CheckOutputSize("bench " + name, dims)).ok()) return Fail(s);
  }
  std::unique_ptr<Engine> engine;
  if (!(s = MakeEngine(args, op, &engine)).ok()) return Fail(s);

  std::mt19937 rng(42);
  std::vector<int64_t> lens_data;
  bool per_query = false;
  const std::string mode = args.get("--valid-lens", "none");
  if (!(s = MakeBenchLens(mode, shape, &rng, &lens_data, &per_query)).ok()) return Fail(s);
  const ValidLens lens = lens_data.empty() ? ValidLens::None()
                         : per_query ? ValidLens::PerQuery(lens_data.data(), shape.batch, shape.queries)
                                     : ValidLens::PerBatch(lens_data.data(), shape.batch);

  // Work over valid keys only: the keys a row reads and the FLOPs it needs;
  // projected keys: each entry's longest length.
  double valid_keys = 0, projected_keys = 0;
  for (int64_t b = 0; b < shape.batch; ++b) {
    int64_t longest = 0;
    for (int64_t i = 0; i < shape.queries; ++i) {
      const int64_t l = lens_data.empty() ? shape.keys
                        : per_query       ? lens_data[static_cast<size_t>(b * shape.queries + i)]
                                          : lens_data[static_cast<size_t>(b)];
      valid_keys += static_cast<double>(std::min(l, shape.keys));
      longest = std::max(longest, std::min(l, shape.keys));
    }
    projected_keys += static_cast<double>(longest);
  }

  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_vector = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  const int64_t B = shape.batch, N = shape.queries, M = shape.keys;
  std::vector<float> a, k, v, out, weights;
  Tensor weights_view;
  std::unique_ptr<AdditiveAttention> model;
  std::unique_ptr<ConcatAttention> concat_model;
  double triples = 0;
  std::function<Status()> call;
  double flops = 0, bytes = 0;
  if (op == "softmax") {
    a = random_vector(scores);
    out.resize(static_cast<size_t>(scores));
    call = [&] {
      return engine->MaskedSoftmax(ConstTensor(a.data(), {B, N, M}), lens,
                                   Tensor(out.data(), {B, N, M}));
    };
    bytes = 4.0 * (valid_keys + static_cast<double>(scores));  // read valid, write all
  } else {
    const int64_t D = shape.depth, Dv = shape.value_dim;
    const int64_t Dk = op == "dot" ? D : shape.key_dim, H = shape.hidden;
    a = random_vector(B * N * D);
    // Concat has one key per query, and O output features.
    const int64_t O = op == "concat" ? shape.out_dim : Dv;
    k = random_vector(B * (op == "concat" ? N : M) * Dk);
    v = random_vector(B * M * Dv);
    out.resize(static_cast<size_t>(B * N * O));
    if (args.has("--weights")) {
      weights.resize(static_cast<size_t>(scores));
      weights_view = Tensor(weights.data(), {B, N, M});
    }
    if (op == "concat") {
      const std::vector<float> attn_w = LinearInit(&rng, M, D + Dk), attn_b = LinearInit(&rng, 1, M),
                               combine_w = LinearInit(&rng, O, D + Dv), combine_b = LinearInit(&rng, 1, O);
      s = ConcatAttention::Create(D, ConstTensor(attn_w.data(), {M, D + Dk}), ConstTensor(attn_b.data(), {M}),
                                  ConstTensor(combine_w.data(), {O, D + Dv}),
                                  ConstTensor(combine_b.data(), {O}), &concat_model);
      if (!s.ok()) return Fail(s);
      call = [&, D, Dk, Dv, O] {
        return concat_model->Forward(*engine, ConstTensor(a.data(), {B, N, D}),
                                     ConstTensor(k.data(), {B, N, Dk}), ConstTensor(v.data(), {B, M, Dv}),
                                     lens, Tensor(out.data(), {B, N, O}), weights_view);
      };
      const double rows = static_cast<double>(B * N);
      flops = 2.0 * rows * static_cast<double>(M * (D + Dk) + O * (D + Dv)) +
              2.0 * valid_keys * static_cast<double>(Dv);
    } else if (op == "additive") {
      const std::vector<float> w_q = LinearInit(&rng, H, D), w_k = LinearInit(&rng, H, Dk),
                               w_v = LinearInit(&rng, 1, H);
      s = AdditiveAttention::Create(ConstTensor(w_q.data(), {H, D}), ConstTensor(w_k.data(), {H, Dk}),
                                    ConstTensor(w_v.data(), {1, H}), &model);
      if (!s.ok()) return Fail(s);
      call = [&, D, Dk, Dv] {
        return model->Forward(*engine, ConstTensor(a.data(), {B, N, D}),
                              ConstTensor(k.data(), {B, M, Dk}), ConstTensor(v.data(), {B, M, Dv}),
                              lens, Tensor(out.data(), {B, N, Dv}), weights_view);
      };
      triples = valid_keys * static_cast<double>(H);
      flops = 2.0 * static_cast<double>(H) * (static_cast<double>(B * N * D) + projected_keys * static_cast<double>(Dk)) +
              3.0 * triples + 2.0 * valid_keys * static_cast<double>(Dv);
    } else {
      call = [&, D, Dv] {  // D and Dv end with this block; the call outlives it
        return engine->DotProductAttention(ConstTensor(a.data(), {B, N, D}),
                                           ConstTensor(k.data(), {B, M, D}),
                                           ConstTensor(v.data(), {B, M, Dv}), lens,
                                           Tensor(out.data(), {B, N, Dv}), weights_view);
      };
      flops = 2.0 * valid_keys * static_cast<double>(D + Dv);
    }
    bytes = op == "concat"
                ? 4.0 * static_cast<double>(B * N * (D + Dk + shape.out_dim) + B * M * Dv)
                : 4.0 * static_cast<double>(B * N * (D + Dv) + B * M * (Dk + Dv));
  }

  for (int w = 0; w < 3; ++w) {
    if (!(s = call()).ok()) return Fail(s);
  }
  std::vector<double> times_us;
  for (int64_t r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    s = call();
    const auto stop = std::chrono::steady_clock::now();
    if (!s.ok()) return Fail(s);
    times_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  const double median = Median(times_us);
  const double min = *std::min_element(times_us.begin(), times_us.end());
  const double gflops = flops / (median * 1e3);
  const double gbytes = bytes / (median * 1e3);
  const std::string isa = IsaName(engine->options().isa);
  const char* precision = PrecisionName(engine->options().precision);
  if (args.has("--json")) {
    std::printf(
        "{\"op\": \"%s\", \"batch\": %lld, \"queries\": %lld, \"keys\": %lld, "
        "\"query_dim\": %lld, \"value_dim\": %lld, \"valid_lens\": \"%s\", "
        "\"threads\": %d, \"isa\": \"%s\", \"precision\": \"%s\", \"repeat\": %lld, \"median_us\": %.3f, "
        "\"min_us\": %.3f, \"gflops\": %s, \"gbytes_per_s\": %.3f, "
        "\"highway_target\": \"%s\", \"onednn_implementations\": [%s]%s}\n",
        op.c_str(), static_cast<long long>(B), static_cast<long long>(N),
        static_cast<long long>(M), static_cast<long long>(shape.depth),
        static_cast<long long>(shape.value_dim), mode.c_str(), engine->options().threads,
        isa.c_str(), precision, static_cast<long long>(repeat), median, min,
        op != "softmax" ? std::to_string(gflops).c_str() : "null", gbytes,
        kernels::MaskedSoftmaxTarget(), OnednnImplementations().c_str(),
        op == "additive" ? (", \"hidden\": " + std::to_string(shape.hidden) + ", \"key_dim\": " +
                            std::to_string(shape.key_dim) + ", \"triples_per_ns\": " +
                            std::to_string(triples / (median * 1e3)))
                               .c_str()
        : op == "concat" ? (", \"key_dim\": " + std::to_string(shape.key_dim) + ", \"out_dim\": " +
                            std::to_string(shape.out_dim))
                               .c_str()
                         : "");
  } else {
    std::printf("%s (%lld, %lld, %lld) valid-lens %s, %d thread(s), isa %s, %s\n", op.c_str(),
                static_cast<long long>(B), static_cast<long long>(N), static_cast<long long>(M),
                mode.c_str(), engine->options().threads, isa.c_str(), precision);
    std::printf("median %.2f us, min %.2f us over %lld runs; ", median, min,
                static_cast<long long>(repeat));
    if (op == "additive") std::printf("%.2f triples/ns, ", triples / (median * 1e3));
    if (op != "softmax") std::printf("%.2f GFLOP/s, ", gflops);
    std::printf("%.2f GB/s\n", gbytes);
    if (args.has("--info")) PrintInfo(*engine);
  }
  return kExitOk;
}

int Info(const Args& args) {
  Status s = CheckFlags(args, {"--threads", "--isa", "--precision"}, {}, "info");
  std::unique_ptr<Engine> engine;
  if (!s.ok() || !(s = MakeEngine(args, "", &engine)).ok()) return Fail(s);
  PrintInfo(*engine);
  return kExitOk;
}

}  // namespace

int RunCli(const std::vector<std::string>& argv) {
  Args args;
  Status s = ParseArgs(argv, kSwitches, &args);
  if (!s.ok()) return Fail(s);
  if (args.has("--help") || args.words.empty() || args.words[0] == "help") {
    std::fputs(kUsage, args.words.empty() && !args.has("--help") ? stderr : stdout);
    return args.words.empty() && !args.has("--help") ? kExitBadInput : kExitOk;
  }
  const std::string& command = args.words[0];
  const std::string sub = args.words.size() > 1 ? args.words[1] : "";
  const size_t wanted = command == "info" ? 1 : 2;
  if (args.words.size() > wanted) {
    return Fail(Status::InvalidArgument("unexpected argument '" + args.words[wanted] + "'"));
  }
  if (command == "info") return Info(args);
  if (command == "bench") return Bench(args);
  if (command == "run" && sub == "softmax") return RunSoftmax(args);
  if (command == "run" && (sub == "dot" || sub == "additive" || sub == "concat")) {
    return RunAttention(args, sub);
  }
  if (command == "run") {
    return Fail(Status::InvalidArgument("run wants an op: softmax, dot, additive or concat, got '" +
                                        sub + "'"));
  }
  return Fail(Status::InvalidArgument("unknown command '" + command + "' (see attnscore --help)"));
}

}  // namespace attnscore::cli
