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
#include "cli/bench_common.h"
#include "cli/common.h"
#include "cli/flags.h"
#include "npy/npy.h"

namespace attnscore::cli {
namespace {

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

// Checks the tensors the bench allocates for `op` on `s` (CheckBenchBuffers).
Status CheckBenchSizes(const std::string& op, const BenchShape& s, bool weights) {
  const bool concat = op == "concat";
  const int64_t key_dim = op == "dot" ? s.depth : s.key_dim;
  const int64_t out_dim = concat ? s.out_dim : s.value_dim;
  BenchBuffers buffers;
  if (op == "softmax") {
    buffers = {{"scores", {s.batch, s.queries, s.keys}}, {"out", {s.batch, s.queries, s.keys}}};
  } else {
    buffers = {{"queries", {s.batch, s.queries, s.depth}},
               {"keys", {s.batch, concat ? s.queries : s.keys, key_dim}},
               {"values", {s.batch, s.keys, s.value_dim}},
               {"out", {s.batch, s.queries, out_dim}}};
    if (weights) buffers.push_back({"attention weights", {s.batch, s.queries, s.keys}});
    if (op == "additive") buffers.push_back({"parameters", {s.hidden, s.depth + key_dim + 1}});
    if (op == "bilinear") buffers.push_back({"parameters", {s.depth, key_dim}});
    if (concat) {
      buffers.push_back(
          {"parameters", {s.keys + out_dim, s.depth + std::max(key_dim, s.value_dim) + 1}});
    }
  }
  return CheckBenchBuffers(op, buffers);
}

// bench multihead: Engine::MultiHeadAttention on token-major Q (B, N, H, D)
// and K, V (B, M, Hkv, D); --decode attends over a KvCache of M keys per
// sequence instead (with --pool, one whose sequences share a pool of just
// enough blocks; --kv-precision, the cache's); --module times d2l's MultiHeadAttention module with
// random weights (num_hiddens H·D, biases with --bias) instead of the op. --softcap C caps the
// scores of the op or the decode (MultiHeadOptions::softcap, KvCacheAttendOptions::softcap);
// --window-left L and --window-right R give the op a sliding window (MultiHeadOptions::window;
// the decode takes --window-left); --sinks Z gives every query head the sink logit Z; --alibi
// gives ALiBi with BLOOM's slopes; --random-bias adds a random (B, Hq, N, M) bias (the op
// and the decode, each of these).
int BenchMultiHead(const Args& args, const std::string& word, bool decode_entry) {
  Status s = CheckFlags(
      args, {"--batch",      "--queries",     "--keys",         "--query-dim", "--heads",
             "--kv-heads",   "--causal",      "--decode",       "--pool",      "--kv-precision",
             "--module",     "--bias",        "--valid-lens",   "--weights",   "--repeat",
             "--json",       "--threads",     "--isa",          "--precision", "--info",
             "--softcap",    "--window-left", "--window-right", "--sinks",     "--alibi",
             "--random-bias"},
      {"--batch", "--queries", "--keys"}, "bench " + word);
  if (s.ok()) s = CheckInfoWithoutJson(args);
  BenchShape shape{};
  int64_t heads = 0, kv_heads = 0, repeat = 0;
  std::string causal_name = args.get("--causal", "none");
  Causal causal = Causal::kNone;
  const bool decode = decode_entry || args.has("--decode"), module = args.has("--module");
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  if (!s.ok() || !(s = ParseBenchShape(args, &shape)).ok() ||
      !(s = ParseInt(args, "--heads", 8, 1, kMaxDim, &heads)).ok() ||
      !(s = ParseInt(args, "--kv-heads", heads, 1, kMaxDim, &kv_heads)).ok() ||
      !(s = ParseInt(args, "--repeat", 20, 1, 1000000, &repeat)).ok()) {
    return Fail(s);
  }
  if (causal_name == "top-left") {
    causal = Causal::kTopLeft;
  } else if (causal_name == "bottom-right") {
    causal = Causal::kBottomRight;
  } else if (causal_name != "none") {
    return Fail(Status::InvalidArgument("--causal wants none, top-left or bottom-right, got '" +
                                        causal_name + "'"));
  }
  if (module && (decode || args.has("--kv-heads"))) {
    return Fail(Status::InvalidArgument(
        "--module times d2l's MultiHeadAttention, which has neither --kv-heads nor --decode"));
  }
  if (decode && (args.has("--causal") || args.has("--valid-lens"))) {
    return Fail(Status::InvalidArgument(
        "--decode: each sequence's N queries attend to its M cached keys, causally; "
        "--causal and --valid-lens do not apply"));
  }
  if (args.has("--bias") && !module) {
    return Fail(Status::InvalidArgument("--bias is for --module"));
  }
  float softcap = 0.0f;
  if (args.has("--softcap")) {
    if (module) return Fail(Status::InvalidArgument("--softcap is for the op and --decode"));
    const std::string text = args.get("--softcap");
    double value = 0;
    if (!ParseNumber(text, &value) || !std::isfinite(value) || value < 0 ||
        value > std::numeric_limits<float>::max()) {
      return Fail(Status::InvalidArgument("--softcap is '" + text +
                                          "'; want a finite number >= 0 (0: no cap)"));
    }
    softcap = static_cast<float>(value);
  }
  Window window;
  if (args.has("--window-left") || args.has("--window-right")) {
    if (module) {
      return Fail(Status::InvalidArgument("--window-left and --window-right are for the op"));
    }
    if (decode && args.has("--window-right")) {
      return Fail(Status::InvalidArgument(
          "--window-right is for the op: a cache's queries see no key past their own"));
    }
    if (!(s = ParseInt(args, "--window-left", -1, -1, std::numeric_limits<int64_t>::max(),
                       &window.left))
             .ok() ||
        !(s = ParseInt(args, "--window-right", -1, -1, std::numeric_limits<int64_t>::max(),
                       &window.right))
             .ok()) {
      return Fail(s);
    }
  }
  // --sinks Z: every query head's sink logit Z (MultiHeadOptions::sinks).
  std::vector<float> sinks;
  if (args.has("--sinks")) {
    if (module) return Fail(Status::InvalidArgument("--sinks is for the op and --decode"));
    const std::string text = args.get("--sinks");
    double value = 0;
    if (!ParseNumber(text, &value)) {
      return Fail(Status::InvalidArgument("--sinks is '" + text + "'; want a number (a logit)"));
    }
    sinks.assign(static_cast<size_t>(heads), static_cast<float>(value));
  }
  const ConstTensor sinks_view = sinks.empty() ? ConstTensor() : ConstTensor(sinks.data(), {heads});
  // --alibi: ALiBi with BLOOM's slopes, 2^(-8 (h + 1) / H) for head h of H.
  std::vector<float> slopes;
  if (args.has("--alibi")) {
    if (module) return Fail(Status::InvalidArgument("--alibi is for the op and --decode"));
    for (int64_t h = 0; h < heads; ++h) {
      slopes.push_back(
          std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(heads)));
    }
  }
  const ConstTensor slopes_view =
      slopes.empty() ? ConstTensor() : ConstTensor(slopes.data(), {heads});
  const bool random_bias = args.has("--random-bias");
  if (random_bias && module) {
    return Fail(Status::InvalidArgument("--random-bias is for the op and --decode"));
  }
  const bool pool = args.has("--pool");
  if (pool && !decode) return Fail(Status::InvalidArgument("--pool is for --decode"));
  if (args.has("--kv-precision") && !decode) {
    return Fail(Status::InvalidArgument("--kv-precision is for --decode"));
  }
  const std::string kv_precision_name = args.get("--kv-precision", "fp32");
  Precision kv_precision = Precision::kFp32;
  if (!ParsePrecision(kv_precision_name, &kv_precision)) {
    return Fail(Status::InvalidArgument("--kv-precision wants fp32, bf16 or int8, got '" +
                                        kv_precision_name + "'"));
  }
  const int64_t B = shape.batch, N = shape.queries, M = shape.keys, D = shape.depth;
  const int64_t hidden = heads * D;
  if (decode && N > M) {
    return Fail(Status::InvalidArgument("--decode: the " + std::to_string(N) +
                                        " new queries must be among the " + std::to_string(M) +
                                        " cached keys (--queries <= --keys)"));
  }
  const bool weights = args.has("--weights");
  BenchBuffers buffers = {{"queries", {B, N, heads, D}},
                          {"keys", {B, M, kv_heads, D}},
                          {"values", {B, M, kv_heads, D}},
                          {"out", {B, N, heads, D}}};
  if (weights) buffers.push_back({"attention weights", {B, heads, N, M}});
  if (random_bias) buffers.push_back({"attention bias", {B, heads, N, M}});
  if (module) buffers.push_back({"parameters", {4, hidden, hidden}});
  // --pool: blocks of the fewest positions that are whole pages, just
  // enough of them; each sequence's positions rounded up to whole blocks.
  const int64_t block_positions = pool ? KvCache::BlockPositionsMultiple(D, D, kv_precision) : 0;
  const int64_t blocks_per_sequence = pool ? (M + block_positions - 1) / block_positions : 0;
  if (decode) {
    buffers.push_back(
        {"cache", {2, B, pool ? blocks_per_sequence * block_positions : M, kv_heads, D}});
  }
  if (!(s = CheckBenchBuffers("multihead", buffers)).ok()) return Fail(s);
  std::unique_ptr<Engine> engine;
  if (!(s = MakeEngine(args, "multihead", &engine)).ok()) return Fail(s);

  std::mt19937 rng(42);
  std::vector<int64_t> lens_data;
  bool per_query = false;
  const std::string mode = args.get("--valid-lens", "none");
  if (!(s = MakeBenchLens(mode, shape, &rng, &lens_data, &per_query)).ok()) return Fail(s);
  const ValidLens lens = lens_data.empty() ? ValidLens::None()
                         : per_query      ? ValidLens::PerQuery(lens_data.data(), B, N)
                                          : ValidLens::PerBatch(lens_data.data(), B);
  std::unique_ptr<MultiHeadAttention> model;
  if (module) {
    std::vector<std::vector<float>> parameters;
    MultiHeadWeights w;
    for (int layer = 0; layer < 8; ++layer) {
      parameters.push_back(layer < 4 ? LinearInit(&rng, hidden, hidden)
                                     : LinearInit(&rng, 1, hidden));
    }
    w.w_q = ConstTensor(parameters[0].data(), {hidden, hidden});
    w.w_k = ConstTensor(parameters[1].data(), {hidden, hidden});
    w.w_v = ConstTensor(parameters[2].data(), {hidden, hidden});
    w.w_o = ConstTensor(parameters[3].data(), {hidden, hidden});
    if (args.has("--bias")) {
      w.b_q = ConstTensor(parameters[4].data(), {hidden});
      w.b_k = ConstTensor(parameters[5].data(), {hidden});
      w.b_v = ConstTensor(parameters[6].data(), {hidden});
      w.b_o = ConstTensor(parameters[7].data(), {hidden});
    }
    if (!(s = MultiHeadAttention::Create(heads, w, &model)).ok()) return Fail(s);  // copies w
  }
  // The checks read views, not data: one float stands in for every tensor,
  // so that the call's own checks refuse bad input before any is allocated.
  // Decode's are the op's with the mask it applies.
  const float stand_in = 0.0f;
  const ConstTensor bias_stand_in =
      random_bias ? ConstTensor(&stand_in, {B, heads, N, M}, {0, 0, 0, 0}) : ConstTensor();
  MultiHeadShapes checked;
  if (module) {
    s = model->Check(ConstTensor(&stand_in, {B, N, hidden}), ConstTensor(&stand_in, {B, M, hidden}),
                     ConstTensor(&stand_in, {B, M, hidden}), lens, causal, &checked);
  } else {
    MultiHeadOptions options;
    options.causal = decode ? Causal::kBottomRight : causal;
    options.softcap = softcap;
    options.window = window;
    options.sinks = sinks_view;
    options.alibi_slopes = slopes_view;
    options.bias = bias_stand_in;
    s = engine->CheckMultiHeadAttention(
        ConstTensor(&stand_in, {B, N, heads, D}), ConstTensor(&stand_in, {B, M, kv_heads, D}),
        ConstTensor(&stand_in, {B, M, kv_heads, D}), lens, options, &checked);
  }
  if (!s.ok()) return Fail(s);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random_vector = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
  };
  // --module's inputs are (B, N, H·D) and (B, M, H·D): the same memory.
  const std::vector<float> q = random_vector(B * N * heads * D);
  const std::vector<float> k = random_vector(B * M * kv_heads * D);
  const std::vector<float> v = random_vector(B * M * kv_heads * D);
  const std::vector<float> bias =
      random_bias ? random_vector(B * heads * N * M) : std::vector<float>();
  const ConstTensor bias_view =
      random_bias ? ConstTensor(bias.data(), {B, heads, N, M}) : ConstTensor();
  std::vector<float> out(static_cast<size_t>(B * N * heads * D)), attention;
  if (weights) attention.resize(static_cast<size_t>(B * heads * N * M));
  const Tensor weights_view = weights ? Tensor(attention.data(), {B, heads, N, M}) : Tensor();
  std::unique_ptr<KvCache> cache;
  std::function<Status()> call;
  if (module) {
    call = [&] {
      return model->Forward(*engine, ConstTensor(q.data(), {B, N, hidden}),
                            ConstTensor(k.data(), {B, M, hidden}),
                            ConstTensor(v.data(), {B, M, hidden}), lens, causal,
                            Tensor(out.data(), {B, N, hidden}), weights_view);
    };
  } else if (decode) {
    KvCacheShape cache_shape;
    cache_shape.batch = B, cache_shape.capacity = M, cache_shape.kv_heads = kv_heads;
    cache_shape.key_dim = D, cache_shape.value_dim = D;
    cache_shape.block_positions = block_positions, cache_shape.blocks = B * blocks_per_sequence;
    cache_shape.precision = kv_precision;
    if (!(s = KvCache::Create(cache_shape, &cache)).ok() ||
        !(s = cache->Append(ConstTensor(k.data(), {B, M, kv_heads, D}),
                            ConstTensor(v.data(), {B, M, kv_heads, D})))
             .ok()) {
      return Fail(s);
    }
    KvCacheAttendOptions attend;
    attend.softcap = softcap;
    attend.window = window;
    attend.sinks = sinks_view;
    attend.alibi_slopes = slopes_view;
    attend.bias = bias_view;
    call = [&, attend] {
      return cache->Attend(*engine, ConstTensor(q.data(), {B, N, heads, D}), attend,
                           Tensor(out.data(), {B, N, heads, D}), weights_view);
    };
  } else {
    MultiHeadOptions options;
    options.causal = causal;
    options.softcap = softcap;
    options.window = window;
    options.sinks = sinks_view;
    options.alibi_slopes = slopes_view;
    options.bias = bias_view;
    call = [&, options] {
      return engine->MultiHeadAttention(
          ConstTensor(q.data(), {B, N, heads, D}), ConstTensor(k.data(), {B, M, kv_heads, D}),
          ConstTensor(v.data(), {B, M, kv_heads, D}), lens, options,
          Tensor(out.data(), {B, N, heads, D}), weights_view);
    };
  }
  // Keys each query sees (every head alike): its length cut by the mask
  // and the window (query i at p = i + M - N sees p - left..p + right).
  double visible = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < N; ++i) {
      int64_t l = lens_data.empty() ? M
                  : per_query       ? lens_data[static_cast<size_t>(b * N + i)]
                                    : lens_data[static_cast<size_t>(b)];
      l = std::min(l, M);
      if (causal == Causal::kTopLeft) l = std::min(l, i + 1);
      if (causal == Causal::kBottomRight || decode) l = std::min(l, M - N + i + 1);
      const int64_t p = i + M - N;
      int64_t first = 0;
      if (window.left >= 0 && p > window.left) first = p - window.left;
      if (window.right >= 0 && window.right < M + N)
        l = std::min(l, std::max<int64_t>(p + window.right + 1, 0));
      visible += static_cast<double>(std::max<int64_t>(l - first, 0));
    }
  }
  double flops = 2.0 * static_cast<double>(heads * 2 * D) * visible;
  if (module) flops += 2.0 * static_cast<double>(hidden * hidden) * static_cast<double>(B * (2 * N + 2 * M));
  // Bytes: Q, K, V read and out written once (K and V as the cache holds
  // them: int8 codes with a lo and a step per channel per 16 keys, and a
  // scale per value row).
  double kv_bytes = 4.0 * static_cast<double>(B * 2 * M * kv_heads * D);
  if (decode && kv_precision == Precision::kBf16) kv_bytes /= 2.0;
  if (decode && kv_precision == Precision::kInt8) {
    kv_bytes = static_cast<double>(B * M * kv_heads) * (2.0 * D + 8.0 * D / 16.0 + 4.0);
  }
  const double bytes = 4.0 * static_cast<double>(B * 2 * N * heads * D) + kv_bytes;

  std::vector<double> times_us;
  if (!(s = TimeCalls(call, repeat, &times_us)).ok()) return Fail(s);
  const double median = Median(times_us);
  const double min = *std::min_element(times_us.begin(), times_us.end());
  const std::string isa = IsaName(engine->options().isa);
  const char* precision = PrecisionName(engine->options().precision);
  std::string what = module ? "module" : pool ? "decode from a pool" : decode ? "decode" : "op";
  if (decode && kv_precision != Precision::kFp32) what += " of " + kv_precision_name;
  if (args.has("--json")) {
    const RuntimeInfo info = engine->Info();
    const Json json = {{"op", "multihead"},
                       {"mode", decode ? "decode" : what},
                       {"pool", pool},
                       {"block_positions", block_positions},
                       {"blocks", B * blocks_per_sequence},
                       {"kv_precision", decode ? kv_precision_name : "none"},
                       {"batch", B},
                       {"queries", N},
                       {"keys", M},
                       {"query_dim", D},
                       {"heads", heads},
                       {"kv_heads", kv_heads},
                       {"causal", causal_name},
                       {"softcap", softcap},
                       {"window_left", window.left},
                       {"window_right", window.right},
                       {"sinks", sinks.empty() ? Json(nullptr) : Json(sinks[0])},
                       {"alibi", !slopes.empty()},
                       {"random_bias", random_bias},
                       {"valid_lens", mode},
                       {"threads", engine->options().threads},
                       {"isa", isa},
                       {"precision", precision},
                       {"repeat", repeat},
                       {"median_us", Rounded(median, 3)},
                       {"min_us", Rounded(min, 3)},
                       {"gflops", Rounded(flops / (median * 1e3), 6)},
                       {"gbytes_per_s", Rounded(bytes / (median * 1e3), 3)},
                       {"highway_target", info.target_in_use},
                       {"onednn_implementations", OnednnImplementations(info)}};
    std::printf("%s\n", OneLine(json).c_str());
  } else {
    std::string cap = softcap > 0.0f ? " softcap " + std::to_string(softcap) : "";
    if (!sinks.empty()) cap += " sinks " + std::to_string(sinks[0]);
    if (!slopes.empty()) cap += " alibi";
    if (random_bias) cap += " random-bias";
    if (window.left >= 0 || window.right >= 0) {
      cap += " window (" + std::to_string(window.left) + ", " + std::to_string(window.right) + ")";
    }
    std::printf(
        "multihead %s (%lld, %lld, %lld) heads %lld kv-heads %lld D %lld causal %s%s "
        "valid-lens %s, %d thread(s), isa %s, %s\n",
        what.c_str(), static_cast<long long>(B), static_cast<long long>(N),
        static_cast<long long>(M), static_cast<long long>(heads), static_cast<long long>(kv_heads),
        static_cast<long long>(D), causal_name.c_str(), cap.c_str(), mode.c_str(),
        engine->options().threads, isa.c_str(), precision);
    std::printf("median %.2f us, min %.2f us over %lld runs; %.2f GFLOP/s, %.2f GB/s\n", median,
                min, static_cast<long long>(repeat), flops / (median * 1e3),
                bytes / (median * 1e3));
    if (args.has("--info")) PrintInfo(*engine);
  }
  return kExitOk;
}

}  // namespace

int BenchCommand(const Args& args) {
  const std::string word = args.words.size() > 1 ? args.words[1] : "";
  const OpSpec* spec = FindEntry(word);
  if (spec == nullptr) {
    return Fail(
        Status::InvalidArgument("bench wants an op: " + EntryNames() + ", got '" + word + "'"));
  }
  // The multi-head entries share one bench: the op (multihead_attention,
  // and `bench multihead` unless --module), the module (--module) and
  // decoding from a KvCache (kv_cache_attend, or --decode).
  if (spec->name == "multihead_attention_packed") return BenchPacked(args, word);
  if (spec->name == "kv_cache_step") return BenchStep(args, word);
  if (spec->name == "multihead_attention" || spec->name == "multihead" ||
      spec->name == "kv_cache_attend") {
    return BenchMultiHead(args, word, spec->name == "kv_cache_attend");
  }
  const std::string op = EntryWord(*spec);
  std::set<std::string> allowed = {"--batch", "--queries", "--keys", "--valid-lens", "--repeat",
                                   "--json",  "--threads", "--isa",  "--precision",  "--info"};
  if (op != "softmax") allowed.insert({"--query-dim", "--value-dim", "--weights"});
  if (op == "additive") allowed.insert({"--key-dim", "--hidden"});
  if (op == "bilinear") allowed.insert("--key-dim");
  if (op == "concat") allowed.insert({"--key-dim", "--out-dim"});
  Status s = CheckFlags(args, allowed, {"--batch", "--queries", "--keys"}, "bench " + word);
  if (s.ok()) s = CheckInfoWithoutJson(args);
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
  std::unique_ptr<BilinearAttention> bilinear_model;
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
    } else if (op == "bilinear") {
      const std::vector<float> w = LinearInit(&rng, D, Dk);
      s = BilinearAttention::Create(ConstTensor(w.data(), {D, Dk}), &bilinear_model);
      if (!s.ok()) return Fail(s);
      call = [&, D, Dk, Dv] {
        return bilinear_model->Forward(*engine, ConstTensor(a.data(), {B, N, D}),
                                       ConstTensor(k.data(), {B, M, Dk}),
                                       ConstTensor(v.data(), {B, M, Dv}), lens,
                                       Tensor(out.data(), {B, N, Dv}), attention_weights_view);
      };
      // The projection Q W, then the dot product over valid keys.
      flops = 2.0 * static_cast<double>(B * N * D * Dk) +
              2.0 * valid_keys * static_cast<double>(Dk + Dv);
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

  std::vector<double> times_us;
  if (!(s = TimeCalls(call, repeat, &times_us)).ok()) return Fail(s);
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
    } else if (op == "bilinear") {
      json["key_dim"] = shape.key_dim;
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
