#include "cli/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/common.h"
#include "npy/npy.h"

namespace attnscore::cli {
namespace {

using Json = nlohmann::ordered_json;  // keeps the keys in insertion order

struct BenchShape {
  int64_t batch, queries, keys, depth, value_dim;
  int64_t key_dim, hidden;  // additive and concat; additive
  int64_t out_dim;          // concat
};

// Parameters as nn.Linear initialises them: uniform in ±1/sqrt(fan_in).
std::vector<float> LinearInit(std::mt19937* rng, int64_t out_features, int64_t in_features) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(in_features));
  std::uniform_real_distribution<float> uniform(-bound, bound);
  std::vector<float> w(static_cast<size_t>(out_features * in_features));
  for (float& x : w) x = uniform(*rng);
  return w;
}

// The valid lengths --valid-lens `mode` asks for: none (an empty `*lens`),
// full, random (per query), random-batch, one INT or a FILE.npy. `*lens`
// holds B values, or B * N when `*per_query`.
Status MakeBenchLens(const std::string& mode, const BenchShape& s, std::mt19937* rng,
                     std::vector<int64_t>* lens, bool* per_query) {
  std::uniform_int_distribution<int64_t> length(1, s.keys);
  *per_query = false;
  lens->clear();
  if (mode == "none") return Status::Ok();
  if (mode.size() > 4 && mode.compare(mode.size() - 4, 4, ".npy") == 0) {
    // Given lengths, e.g. the very ones another tool times the same shape with.
    npy::NpyArray array;
    ATTNSCORE_RETURN_IF_ERROR(npy::ReadNpy(mode, &array));
    const bool is64 = array.dtype == npy::DType::kInt64;
    const bool per_batch_shape = array.shape == std::vector<int64_t>{s.batch};
    const bool per_query_shape = array.shape == std::vector<int64_t>{s.batch, s.queries};
    if ((!is64 && array.dtype != npy::DType::kInt32) || (!per_batch_shape && !per_query_shape)) {
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
    int64_t fixed = 0;
    if (!ParseInteger("--valid-lens", mode, 0, std::numeric_limits<int64_t>::max(), &fixed).ok()) {
      return Status::InvalidArgument(
          "--valid-lens is '" + mode +
          "'; want none, full, random, random-batch, an INT >= 0 or a FILE.npy");
    }
    lens->assign(static_cast<size_t>(s.batch), fixed);
  }
  return Status::Ok();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `x` rounded to `decimals` places, so that the JSON number has at most
// that many (it is printed in its shortest form: 12.5, not 12.500).
double Rounded(double x, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

// `j` as JSON on one line with ", " between items and ": " after keys
// (nlohmann's compact dump has no spaces; tests and scripts look for
// `"key": `). Invalid UTF-8 in a string (a --valid-lens path) becomes U+FFFD.
std::string OneLine(const Json& j) {
  const auto dump = [](const Json& scalar) {
    return scalar.dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  std::string s;
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      s += (s.empty() ? "{" : ", ") + dump(Json(key)) + ": " + OneLine(value);
    }
    return s.empty() ? "{}" : s + "}";
  }
  if (j.is_array()) {
    for (const Json& value : j) s += (s.empty() ? "[" : ", ") + OneLine(value);
    return s.empty() ? "[]" : s + "]";
  }
  return dump(j);
}

// The distinct implementations oneDNN chose for the process's matmuls,
// sorted by name.
Json OnednnImplementations(const RuntimeInfo& info) {
  std::set<std::string> names;
  for (const MatmulInfo& matmul : info.matmuls) names.insert(matmul.implementation);
  Json list = Json::array();
  for (const std::string& name : names) list.push_back(name);
  return list;
}

// Parses the shape flags.
Status ParseBenchShape(const Args& args, BenchShape* shape) {
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--batch", 1, 1, kMaxDim, &shape->batch));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--queries", 1, 1, kMaxDim, &shape->queries));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--keys", 1, 1, kMaxDim, &shape->keys));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--query-dim", 64, 1, kMaxDim, &shape->depth));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--value-dim", 64, 1, kMaxDim, &shape->value_dim));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--key-dim", shape->depth, 1, kMaxDim, &shape->key_dim));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--hidden", 64, 1, kMaxDim, &shape->hidden));
  return ParseInt(args, "--out-dim", shape->value_dim, 1, kMaxDim, &shape->out_dim);
}

// The bytes of memory this machine has; 0 if it cannot tell.
double PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0;
}

// Checks the tensors the bench allocates for `op` on `s`: none may exceed
// kMaxOutputFloats, and together they must fit in the machine's memory.
Status CheckBenchSizes(const std::string& op, const BenchShape& s, bool weights) {
  const bool concat = op == "concat";
  const int64_t key_dim = op == "dot" ? s.depth : s.key_dim;
  const int64_t out_dim = concat ? s.out_dim : s.value_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> buffers;
  if (op == "softmax") {
    buffers = {{"scores", {s.batch, s.queries, s.keys}}, {"out", {s.batch, s.queries, s.keys}}};
  } else {
    buffers = {{"queries", {s.batch, s.queries, s.depth}},
               {"keys", {s.batch, concat ? s.queries : s.keys, key_dim}},
               {"values", {s.batch, s.keys, s.value_dim}},
               {"out", {s.batch, s.queries, out_dim}}};
    if (weights) buffers.push_back({"attention weights", {s.batch, s.queries, s.keys}});
    if (op == "additive") buffers.push_back({"parameters", {s.hidden, s.depth + key_dim + 1}});
    if (concat) {
      buffers.push_back(
          {"parameters", {s.keys + out_dim, s.depth + std::max(key_dim, s.value_dim) + 1}});
    }
  }
  double total_bytes = 0;
  for (const auto& [name, dims] : buffers) {
    ATTNSCORE_RETURN_IF_ERROR(CheckOutputSize("bench " + name, dims));
    double floats = 1;
    for (int64_t n : dims) floats *= static_cast<double>(n);
    total_bytes += 4 * floats;
  }
  const double memory = PhysicalMemoryBytes();
  if (memory > 0 && total_bytes > memory) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "bench %s would allocate %.1f GiB of tensors, more than this machine's %.1f GiB "
                  "of memory",
                  op.c_str(), total_bytes / (1 << 30), memory / (1 << 30));
    return Status::InvalidArgument(text);
  }
  return Status::Ok();
}

}  // namespace

int BenchCommand(const Args& args) {
  const std::string op = args.words.size() > 1 ? args.words[1] : "";
  if (op != "softmax" && op != "dot" && op != "additive" && op != "concat") {
    return Fail(Status::InvalidArgument(
        "bench wants an op: softmax, dot, additive or concat, got '" + op + "'"));
  }
  std::set<std::string> allowed = {"--batch", "--queries", "--keys", "--valid-lens", "--repeat",
                                   "--json",  "--threads", "--isa",  "--precision",  "--info"};
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
  if (!s.ok() || !(s = ParseBenchShape(args, &shape)).ok() ||
      !(s = ParseInt(args, "--repeat", 20, 1, 1000000, &repeat)).ok() ||
      !(s = CheckBenchSizes(op, shape, args.has("--weights"))).ok()) {
    return Fail(s);
  }
  std::unique_ptr<Engine> engine;
  if (!(s = MakeEngine(args, op, &engine)).ok()) return Fail(s);

  std::mt19937 rng(42);
  std::vector<int64_t> lens_data;
  bool per_query = false;
  const std::string mode = args.get("--valid-lens", "none");
  if (!(s = MakeBenchLens(mode, shape, &rng, &lens_data, &per_query)).ok()) return Fail(s);
  const ValidLens lens = lens_data.empty() ? ValidLens::None()
                         : per_query
                             ? ValidLens::PerQuery(lens_data.data(), shape.batch, shape.queries)
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
  const int64_t scores = B * N * M;
  std::vector<float> a, k, v, out, attention_weights;
  Tensor attention_weights_view;  // empty unless --weights
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
      attention_weights.resize(static_cast<size_t>(scores));
      attention_weights_view = Tensor(attention_weights.data(), {B, N, M});
    }
    if (op == "concat") {
      const std::vector<float> attn_w = LinearInit(&rng, M, D + Dk),
                               attn_b = LinearInit(&rng, 1, M),
                               combine_w = LinearInit(&rng, O, D + Dv),
                               combine_b = LinearInit(&rng, 1, O);
      s = ConcatAttention::Create(D, ConstTensor(attn_w.data(), {M, D + Dk}),
                                  ConstTensor(attn_b.data(), {M}),
                                  ConstTensor(combine_w.data(), {O, D + Dv}),
                                  ConstTensor(combine_b.data(), {O}), &concat_model);
      if (!s.ok()) return Fail(s);
      call = [&, D, Dk, Dv, O] {
        return concat_model->Forward(*engine, ConstTensor(a.data(), {B, N, D}),
                                     ConstTensor(k.data(), {B, N, Dk}),
                                     ConstTensor(v.data(), {B, M, Dv}), lens,
                                     Tensor(out.data(), {B, N, O}), attention_weights_view);
      };
      const double rows = static_cast<double>(B * N);
      flops = 2.0 * rows * static_cast<double>(M * (D + Dk) + O * (D + Dv)) +
              2.0 * valid_keys * static_cast<double>(Dv);
    } else if (op == "additive") {
      const std::vector<float> w_q = LinearInit(&rng, H, D), w_k = LinearInit(&rng, H, Dk),
                               w_v = LinearInit(&rng, 1, H);
      s = AdditiveAttention::Create(ConstTensor(w_q.data(), {H, D}),
                                    ConstTensor(w_k.data(), {H, Dk}),
                                    ConstTensor(w_v.data(), {1, H}), &model);
      if (!s.ok()) return Fail(s);
      call = [&, D, Dk, Dv] {
        return model->Forward(*engine, ConstTensor(a.data(), {B, N, D}),
                              ConstTensor(k.data(), {B, M, Dk}), ConstTensor(v.data(), {B, M, Dv}),
                              lens, Tensor(out.data(), {B, N, Dv}), attention_weights_view);
      };
      triples = valid_keys * static_cast<double>(H);
      flops = 2.0 * static_cast<double>(H) *
                  (static_cast<double>(B * N * D) + projected_keys * static_cast<double>(Dk)) +
              3.0 * triples + 2.0 * valid_keys * static_cast<double>(Dv);
    } else {
      call = [&, D, Dv] {  // D and Dv end with this block; the call outlives it
        return engine->DotProductAttention(ConstTensor(a.data(), {B, N, D}),
                                           ConstTensor(k.data(), {B, M, D}),
                                           ConstTensor(v.data(), {B, M, Dv}), lens,
                                           Tensor(out.data(), {B, N, Dv}), attention_weights_view);
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
  const double triples_per_ns = triples / (median * 1e3);
  const std::string isa = IsaName(engine->options().isa);
  const char* precision = PrecisionName(engine->options().precision);
  if (args.has("--json")) {
    // Keys in this order; docs/cli.md lists them. Times and GB/s have 3
    // decimals, GFLOP/s and triples/ns 6.
    const RuntimeInfo info = engine->Info();
    Json json = {{"op", op},
                 {"batch", B},
                 {"queries", N},
                 {"keys", M},
                 {"query_dim", shape.depth},
                 {"value_dim", shape.value_dim},
                 {"valid_lens", mode},
                 {"threads", engine->options().threads},
                 {"isa", isa},
                 {"precision", precision},
                 {"repeat", repeat},
                 {"median_us", Rounded(median, 3)},
                 {"min_us", Rounded(min, 3)},
                 {"gflops", op != "softmax" ? Json(Rounded(gflops, 6)) : Json(nullptr)},
                 {"gbytes_per_s", Rounded(gbytes, 3)},
                 {"highway_target", info.target_in_use},
                 {"onednn_implementations", OnednnImplementations(info)}};
    if (op == "additive") {
      json["hidden"] = shape.hidden;
      json["key_dim"] = shape.key_dim;
      json["triples_per_ns"] = Rounded(triples_per_ns, 6);
    } else if (op == "concat") {
      json["key_dim"] = shape.key_dim;
      json["out_dim"] = shape.out_dim;
    }
    std::printf("%s\n", OneLine(json).c_str());
  } else {
    std::printf("%s (%lld, %lld, %lld) valid-lens %s, %d thread(s), isa %s, %s\n", op.c_str(),
                static_cast<long long>(B), static_cast<long long>(N), static_cast<long long>(M),
                mode.c_str(), engine->options().threads, isa.c_str(), precision);
    std::printf("median %.2f us, min %.2f us over %lld runs; ", median, min,
                static_cast<long long>(repeat));
    if (op == "additive") std::printf("%.2f triples/ns, ", triples_per_ns);
    if (op != "softmax") std::printf("%.2f GFLOP/s, ", gflops);
    std::printf("%.2f GB/s\n", gbytes);
    if (args.has("--info")) PrintInfo(*engine);
  }
  return kExitOk;
}

}  // namespace attnscore::cli
