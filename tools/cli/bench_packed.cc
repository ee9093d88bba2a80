// The packed benches (docs/cli.md): bench multihead_attention_packed,
// Engine::MultiHeadAttentionPacked on S sequences of ragged lengths packed
// row after row, and bench kv_cache_step, KvCache::AttendPacked on a step
// where one sequence prefills and the others decode.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/bench_common.h"
#include "cli/common.h"
#include "cli/flags.h"

namespace attnscore::cli {
namespace {

// The sequences' lengths: sequence s has n_s queries, uniform in [1, N]
// (seed 42), and m_s keys: n_s + M - N where M >= N (a prefix of M - N keys
// before its queries, as a prefill after a cached prompt), else
// max(1, n_s · M / N).
void RaggedLengths(int64_t sequences, int64_t queries, int64_t keys, std::vector<int64_t>* cu_q,
                   std::vector<int64_t>* cu_k) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int64_t> length(1, queries);
  cu_q->assign(1, 0);
  cu_k->assign(1, 0);
  for (int64_t s = 0; s < sequences; ++s) {
    const int64_t n = length(rng);
    const int64_t m =
        keys >= queries ? n + keys - queries : std::max<int64_t>(1, n * keys / queries);
    cu_q->push_back(cu_q->back() + n);
    cu_k->push_back(cu_k->back() + m);
  }
}

// The (query, key) pairs the mask and window leave every head of the
// sequences (query i of n at p = i + m - n).
double VisiblePairs(const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k,
                    Causal causal, const Window& window) {
  double visible = 0;
  for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const int64_t n = cu_q[s + 1] - cu_q[s], m = cu_k[s + 1] - cu_k[s];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = i + m - n;
      int64_t end = m, first = 0;
      if (causal == Causal::kTopLeft) end = std::min(end, i + 1);
      if (causal == Causal::kBottomRight) end = std::min(end, p + 1);
      if (window.left >= 0) first = std::max<int64_t>(0, p - window.left);
      if (window.right >= 0) end = std::min(end, std::max<int64_t>(p + window.right + 1, 0));
      visible += static_cast<double>(std::max<int64_t>(end - first, 0));
    }
  }
  return visible;
}

// The score options both benches take: --softcap, --window-left and
// --window-right, --sinks Z (every head's logit), --alibi (BLOOM's slopes);
// the views over *sinks and *slopes.
Status ParseScoreFlags(const Args& args, int64_t heads, MultiHeadOptions* options,
                       std::vector<float>* sinks, std::vector<float>* slopes) {
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--window-left", -1, -1,
                                     std::numeric_limits<int64_t>::max(), &options->window.left));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--window-right", -1, -1,
                                     std::numeric_limits<int64_t>::max(), &options->window.right));
  double number = 0;
  if (args.has("--softcap")) {
    if (!ParseNumber(args.get("--softcap"), &number) || !std::isfinite(number) || number < 0 ||
        number > std::numeric_limits<float>::max()) {
      return Status::InvalidArgument("--softcap is '" + args.get("--softcap") +
                                     "'; want a finite number >= 0 (0: no cap)");
    }
    options->softcap = static_cast<float>(number);
  }
  if (args.has("--sinks")) {
    if (!ParseNumber(args.get("--sinks"), &number)) {
      return Status::InvalidArgument("--sinks is '" + args.get("--sinks") +
                                     "'; want a number (a logit)");
    }
    sinks->assign(static_cast<size_t>(heads), static_cast<float>(number));
    options->sinks = ConstTensor(sinks->data(), {heads});
  }
  if (args.has("--alibi")) {  // BLOOM's slopes, 2^(-8 (h + 1) / H)
    for (int64_t h = 0; h < heads; ++h) {
      slopes->push_back(
          std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(heads)));
    }
    options->alibi_slopes = ConstTensor(slopes->data(), {heads});
  }
  return Status::Ok();
}

// The shape flags both benches take: --batch, --queries, --keys (required),
// --query-dim, --heads, --kv-heads, --repeat.
struct PackedShape {
  int64_t batch = 0, queries = 0, keys = 0, depth = 0, heads = 0, kv_heads = 0, repeat = 0;
};
Status ParsePackedShape(const Args& args, PackedShape* shape) {
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--batch", 1, 1, kMaxDim, &shape->batch));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--queries", 1, 1, kMaxDim, &shape->queries));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--keys", 1, 1, kMaxDim, &shape->keys));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--query-dim", 64, 1, kMaxDim, &shape->depth));
  ATTNSCORE_RETURN_IF_ERROR(ParseInt(args, "--heads", 8, 1, kMaxDim, &shape->heads));
  ATTNSCORE_RETURN_IF_ERROR(
      ParseInt(args, "--kv-heads", shape->heads, 1, kMaxDim, &shape->kv_heads));
  return ParseInt(args, "--repeat", 20, 1, 1000000, &shape->repeat);
}

// A bench's JSON line: `fields`, then the run's threads, ISA, timing and
// rates (GB/s where bytes > 0) and what ran.
void PrintJson(Json fields, const Engine& engine, int64_t repeat, double median, double min,
               double flops, double bytes) {
  const RuntimeInfo info = engine.Info();
  fields["threads"] = engine.options().threads;
  fields["isa"] = IsaName(engine.options().isa);
  fields["repeat"] = repeat;
  fields["median_us"] = Rounded(median, 3);
  fields["min_us"] = Rounded(min, 3);
  fields["gflops"] = Rounded(flops / (median * 1e3), 6);
  if (bytes > 0) fields["gbytes_per_s"] = Rounded(bytes / (median * 1e3), 3);
  fields["highway_target"] = info.target_in_use;
  fields["onednn_implementations"] = OnednnImplementations(info);
  std::printf("%s\n", OneLine(fields).c_str());
}

std::vector<float> RandomVector(std::mt19937* rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(*rng);
  return v;
}

}  // namespace

int BenchPacked(const Args& args, const std::string& word) {
  Status s =
      CheckFlags(args,
                 {"--batch", "--queries", "--keys", "--query-dim", "--heads", "--kv-heads",
                  "--causal", "--softcap", "--window-left", "--window-right", "--sinks", "--alibi",
                  "--repeat", "--json", "--threads", "--isa", "--precision", "--info"},
                 {"--batch", "--queries", "--keys"}, "bench " + word);
  if (s.ok()) s = CheckInfoWithoutJson(args);
  PackedShape shape;
  MultiHeadOptions options;
  std::vector<float> sinks, slopes;
  if (!s.ok() || !(s = ParsePackedShape(args, &shape)).ok() ||
      !(s = ParseScoreFlags(args, shape.heads, &options, &sinks, &slopes)).ok()) {
    return Fail(s);
  }
  const int64_t sequences = shape.batch, queries = shape.queries, keys = shape.keys;
  const int64_t depth = shape.depth, heads = shape.heads, kv_heads = shape.kv_heads;
  const int64_t repeat = shape.repeat;
  const std::string causal_name = args.get("--causal", "none");
  if (causal_name == "top-left") {
    options.causal = Causal::kTopLeft;
  } else if (causal_name == "bottom-right") {
    options.causal = Causal::kBottomRight;
  } else if (causal_name != "none") {
    return Fail(Status::InvalidArgument("--causal wants none, top-left or bottom-right, got '" +
                                        causal_name + "'"));
  }
  std::vector<int64_t> cu_q, cu_k;
  RaggedLengths(sequences, queries, keys, &cu_q, &cu_k);
  const int64_t rows_q = cu_q.back(), rows_k = cu_k.back();
  if (!(s = CheckBenchBuffers("multihead_attention_packed", {{"queries", {rows_q, heads, depth}},
                                                             {"keys", {rows_k, kv_heads, depth}},
                                                             {"values", {rows_k, kv_heads, depth}},
                                                             {"out", {rows_q, heads, depth}}}))
           .ok()) {
    return Fail(s);
  }
  std::unique_ptr<Engine> engine;
  if (!(s = MakeEngine(args, "multihead_attention_packed", &engine)).ok()) return Fail(s);
  const SequenceOffsets offsets_q = SequenceOffsets::Of(cu_q.data(), sequences + 1);
  const SequenceOffsets offsets_k = SequenceOffsets::Of(cu_k.data(), sequences + 1);
  // The call's own checks, on one float standing in for each tensor.
  const float stand_in = 0.0f;
  std::array<int64_t, 3> out_shape{};
  if (!(s = engine->CheckMultiHeadAttentionPacked(
            ConstTensor(&stand_in, {rows_q, heads, depth}, {0, 0, 0}),
            ConstTensor(&stand_in, {rows_k, kv_heads, depth}, {0, 0, 0}),
            ConstTensor(&stand_in, {rows_k, kv_heads, depth}, {0, 0, 0}), offsets_q, offsets_k,
            options, &out_shape))
           .ok()) {
    return Fail(s);
  }
  std::mt19937 rng(7);
  const std::vector<float> q = RandomVector(&rng, rows_q * heads * depth);
  const std::vector<float> k = RandomVector(&rng, rows_k * kv_heads * depth);
  const std::vector<float> v = RandomVector(&rng, rows_k * kv_heads * depth);
  std::vector<float> out(static_cast<size_t>(rows_q * heads * depth));
  const auto call = [&] {
    return engine->MultiHeadAttentionPacked(ConstTensor(q.data(), {rows_q, heads, depth}),
                                            ConstTensor(k.data(), {rows_k, kv_heads, depth}),
                                            ConstTensor(v.data(), {rows_k, kv_heads, depth}),
                                            offsets_q, offsets_k, options,
                                            Tensor(out.data(), {rows_q, heads, depth}));
  };
  std::vector<double> times_us;
  if (!(s = TimeCalls(call, repeat, &times_us)).ok()) return Fail(s);
  const double median = Median(times_us);
  const double min = *std::min_element(times_us.begin(), times_us.end());
  // Two products of D per visible pair and head; Q, K, V read and out written once.
  const double flops = 2.0 * static_cast<double>(heads * 2 * depth) *
                       VisiblePairs(cu_q, cu_k, options.causal, options.window);
  const double bytes =
      4.0 * static_cast<double>(2 * rows_q * heads * depth + 2 * rows_k * kv_heads * depth);
  const std::string isa = IsaName(engine->options().isa);
  if (args.has("--json")) {
    PrintJson({{"op", "multihead_attention_packed"},
               {"sequences", sequences},
               {"queries", queries},
               {"keys", keys},
               {"packed_queries", rows_q},
               {"packed_keys", rows_k},
               {"query_dim", depth},
               {"heads", heads},
               {"kv_heads", kv_heads},
               {"causal", causal_name},
               {"softcap", options.softcap},
               {"window_left", options.window.left},
               {"window_right", options.window.right},
               {"sinks", sinks.empty() ? Json(nullptr) : Json(sinks[0])},
               {"alibi", !slopes.empty()}},
              *engine, repeat, median, min, flops, bytes);
    return kExitOk;
  }
  std::printf(
      "multihead_attention_packed %lld sequences (%lld queries, %lld keys packed) heads %lld "
      "kv-heads %lld D %lld causal %s, %d thread(s), isa %s\n",
      static_cast<long long>(sequences), static_cast<long long>(rows_q),
      static_cast<long long>(rows_k), static_cast<long long>(heads),
      static_cast<long long>(kv_heads), static_cast<long long>(depth), causal_name.c_str(),
      engine->options().threads, isa.c_str());
  std::printf("median %.2f us, min %.2f us over %lld runs; %.2f GFLOP/s, %.2f GB/s\n", median, min,
              static_cast<long long>(repeat), flops / (median * 1e3), bytes / (median * 1e3));
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

int BenchStep(const Args& args, const std::string& word) {
  Status s = CheckFlags(args,
                        {"--batch", "--queries", "--keys", "--query-dim", "--heads", "--kv-heads",
                         "--kv-precision", "--softcap", "--window-left", "--sinks", "--alibi",
                         "--repeat", "--json", "--threads", "--isa", "--precision", "--info"},
                        {"--batch", "--queries", "--keys"}, "bench " + word);
  if (s.ok()) s = CheckInfoWithoutJson(args);
  PackedShape dims;
  MultiHeadOptions options;
  std::vector<float> sinks, slopes;
  if (!s.ok() || !(s = ParsePackedShape(args, &dims)).ok() ||
      !(s = ParseScoreFlags(args, dims.heads, &options, &sinks, &slopes)).ok()) {
    return Fail(s);
  }
  const int64_t batch = dims.batch, queries = dims.queries, keys = dims.keys;
  const int64_t depth = dims.depth, heads = dims.heads, kv_heads = dims.kv_heads;
  const int64_t repeat = dims.repeat;
  const std::string precision_name = args.get("--kv-precision", "fp32");
  KvCacheShape shape;
  if (!ParsePrecision(precision_name, &shape.precision)) {
    return Fail(Status::InvalidArgument("--kv-precision wants fp32, bf16 or int8, got '" +
                                        precision_name + "'"));
  }
  if (queries > keys) {
    return Fail(Status::InvalidArgument("bench " + word + ": sequence 0's " +
                                        std::to_string(queries) + " queries must be among its " +
                                        std::to_string(keys) + " keys (--queries <= --keys)"));
  }
  // Every sequence holds M positions; sequence 0's N newest are its
  // prefill's queries, every other sequence decodes its newest one.
  std::vector<int64_t> counts(static_cast<size_t>(batch), keys),
      query_counts(static_cast<size_t>(batch), 1);
  query_counts[0] = queries;
  const int64_t rows_q = queries + batch - 1;
  if (!(s = CheckBenchBuffers("kv_cache_step", {{"queries", {rows_q, heads, depth}},
                                                {"cache", {2, batch, keys, kv_heads, depth}},
                                                {"out", {rows_q, heads, depth}}}))
           .ok()) {
    return Fail(s);
  }
  std::unique_ptr<Engine> engine;
  if (!(s = MakeEngine(args, "kv_cache_step", &engine)).ok()) return Fail(s);
  shape.batch = batch, shape.capacity = keys, shape.kv_heads = kv_heads;
  shape.key_dim = depth, shape.value_dim = depth;
  std::unique_ptr<KvCache> cache;
  std::mt19937 rng(7);
  const std::vector<float> k = RandomVector(&rng, batch * keys * kv_heads * depth);
  const std::vector<float> v = RandomVector(&rng, batch * keys * kv_heads * depth);
  const std::vector<float> q = RandomVector(&rng, rows_q * heads * depth);
  std::vector<float> out(static_cast<size_t>(rows_q * heads * depth));
  KvCacheAttendOptions attend;
  attend.softcap = options.softcap, attend.window = options.window;
  attend.sinks = options.sinks, attend.alibi_slopes = options.alibi_slopes;
  if (!(s = KvCache::Create(shape, &cache)).ok() ||
      !(s = cache->AppendPacked(ConstTensor(k.data(), {batch * keys, kv_heads, depth}),
                                ConstTensor(v.data(), {batch * keys, kv_heads, depth}),
                                TensorView<const int64_t>(counts.data(), {batch})))
           .ok()) {
    return Fail(s);
  }
  const auto call = [&] {
    return cache->AttendPacked(*engine, ConstTensor(q.data(), {rows_q, heads, depth}),
                               TensorView<const int64_t>(query_counts.data(), {batch}), attend,
                               Tensor(out.data(), {rows_q, heads, depth}));
  };
  std::vector<double> times_us;
  if (!(s = TimeCalls(call, repeat, &times_us)).ok()) return Fail(s);
  const double median = Median(times_us);
  const double min = *std::min_element(times_us.begin(), times_us.end());
  std::vector<int64_t> cu_q(1, 0), cu_k(1, 0);
  for (int64_t b = 0; b < batch; ++b) {
    cu_q.push_back(cu_q.back() + query_counts[static_cast<size_t>(b)]);
    cu_k.push_back(cu_k.back() + keys);
  }
  const double flops = 2.0 * static_cast<double>(heads * 2 * depth) *
                       VisiblePairs(cu_q, cu_k, Causal::kBottomRight, options.window);
  const std::string isa = IsaName(engine->options().isa);
  if (args.has("--json")) {
    PrintJson({{"op", "kv_cache_step"},
               {"batch", batch},
               {"queries", queries},
               {"keys", keys},
               {"query_dim", depth},
               {"heads", heads},
               {"kv_heads", kv_heads},
               {"kv_precision", precision_name},
               {"softcap", options.softcap},
               {"window_left", options.window.left},
               {"sinks", sinks.empty() ? Json(nullptr) : Json(sinks[0])},
               {"alibi", !slopes.empty()}},
              *engine, repeat, median, min, flops, 0.0);
    return kExitOk;
  }
  std::printf(
      "kv_cache_step %lld sequences of %lld keys, %s: sequence 0 prefills %lld, the others "
      "decode 1; heads %lld kv-heads %lld D %lld, %d thread(s), isa %s\n",
      static_cast<long long>(batch), static_cast<long long>(keys), precision_name.c_str(),
      static_cast<long long>(queries), static_cast<long long>(heads),
      static_cast<long long>(kv_heads), static_cast<long long>(depth), engine->options().threads,
      isa.c_str());
  std::printf("median %.2f us, min %.2f us over %lld runs; %.2f GFLOP/s\n", median, min,
              static_cast<long long>(repeat), flops / (median * 1e3));
  if (args.has("--info")) PrintInfo(*engine);
  return kExitOk;
}

}  // namespace attnscore::cli
