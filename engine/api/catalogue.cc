// The catalogue's entries: what each op and model takes, gives and holds.
// docs/semantics.md is the contract each entry's call keeps.
#include "attnscore/catalogue.h"

#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace attnscore {
namespace {

using Kind = ParamSpec::Kind;
using Type = ParamSpec::Type;

TensorSpec Floats(std::string name, std::vector<std::string> dims, std::string doc,
                  bool optional = false) {
  const int rank = static_cast<int>(dims.size());
  return {std::move(name), {DataType::kFloat32}, std::move(dims), rank, optional, std::move(doc)};
}

TensorSpec ValidLensSpec() {
  return {"valid_lens",
          {DataType::kInt32, DataType::kInt64},
          {"B", "N"},
          1,
          /*optional=*/true,
          "how many leading keys each query sees: one per batch entry (B,) or per query (B, N)"};
}

// The attention ops' and models' inputs: (B, N, query_dim), (B, key_rows, key_dim),
// (B, M, Dv), and valid lengths.
std::vector<TensorSpec> AttentionInputs(const char* query_dim, const char* key_rows,
                                        const char* key_dim) {
  return {Floats("queries", {"B", "N", query_dim}, "the queries"),
          Floats("keys", {"B", key_rows, key_dim}, "the keys"),
          Floats("values", {"B", "M", "Dv"}, "the values"), ValidLensSpec()};
}

TensorSpec WeightsOut(std::vector<std::string> dims) {
  return Floats("attention_weights", std::move(dims), "the softmax, zero past each valid length",
                /*optional=*/true);
}

// An entry taking `inputs` and giving its output, of `out` dims, and the
// attention weights, of `weights` dims.
OpSpec AttentionSpec(const char* name, const char* summary, std::vector<TensorSpec> inputs,
                     std::vector<std::string> out, std::vector<std::string> weights) {
  OpSpec op;
  op.name = name;
  op.summary = summary;
  op.inputs = std::move(inputs);
  op.outputs = {Floats("output", std::move(out), "the attention output"),
                WeightsOut(std::move(weights))};
  return op;
}

ParamSpec CausalParam() {
  return {"causal",
          Kind::kCall,
          Type::kChoice,
          {"none", "top-left", "bottom-right"},
          "none",
          "keys a query may see: top-left, query i sees keys 0..i; bottom-right, keys 0..M-N+i"};
}

ParamSpec ScaleParam() {
  return {"scale", Kind::kCall, Type::kFloat, {}, "0", "scores' factor; 0 is 1/sqrt(D)"};
}

ParamSpec SoftCapParam() {
  return {"softcap", Kind::kCall, Type::kFloat,
          {},        "0",         "soft cap c: each score s becomes c tanh(s / c); 0 is none"};
}

// Attention sinks (MultiHeadOptions::sinks).
TensorSpec SinksSpec() {
  return Floats("sinks", {"Hq"},
                "attention sinks: a logit per query head, in each softmax's denominator", true);
}

// A sliding window's two sides (MultiHeadOptions::window).
ParamSpec WindowParam(const char* name, const char* side) {
  return {name, Kind::kCall, Type::kInt,
          {},   "-1",        std::string("a sliding window's ") + side + "; -1 is unbounded"};
}

OpSpec MaskedSoftmaxSpec() {
  OpSpec op;
  op.name = "masked_softmax";
  op.summary = "softmax over the last axis, each row over its first L scores";
  op.inputs = {Floats("x", {"B", "N", "M"}, "the scores"), ValidLensSpec()};
  op.outputs = {Floats("output", {"B", "N", "M"}, "the softmax, zero past each valid length")};
  return op;
}

OpSpec DotProductSpec() {
  return AttentionSpec("dot_product_attention",
                       "softmax(Q K^T / sqrt(D), masked by valid lengths) V",
                       AttentionInputs("D", "M", "D"), {"B", "N", "Dv"}, {"B", "N", "M"});
}

OpSpec MultiHeadOpSpec() {
  OpSpec op = AttentionSpec(
      "multihead_attention",
      "the dot product per query head, K and V heads shared by Hq / Hkv query heads",
      {Floats("queries", {"B", "N", "Hq", "D"}, "the queries, token-major"),
       Floats("keys", {"B", "M", "Hkv", "D"}, "the keys; Hkv divides Hq"),
       Floats("values", {"B", "M", "Hkv", "Dv"}, "the values"), ValidLensSpec(), SinksSpec(),
       Floats("alibi_slopes", {"Hq"}, "ALiBi: head h's scores lose slope_h |p - j|", true),
       Floats("attention_bias", {"B", "Hq", "N", "M"},
              "added to the scores after the cap and ALiBi; -inf masks a key", true)},
      {"B", "N", "Hq", "Dv"}, {"B", "Hq", "N", "M"});
  op.params = {
      CausalParam(), ScaleParam(), SoftCapParam(),
      WindowParam("window_left", "left side: query i at p = i + M - N sees keys from p - left"),
      WindowParam("window_right", "right side: keys up to p + right")};
  return op;
}

OpSpec MultiHeadPackedSpec() {
  const auto offsets = [](const char* name, const char* rows) {
    return TensorSpec{name,
                      {DataType::kInt32, DataType::kInt64},
                      {"S+1"},
                      1,
                      /*optional=*/false,
                      std::string("where each sequence's ") + rows +
                          " begin, from 0, and the packed rows' count last"};
  };
  OpSpec op;
  op.name = "multihead_attention_packed";
  op.summary =
      "multihead_attention on S sequences of their own lengths, packed row after row "
      "(FlashAttention's cu_seqlens), each sequence its own call";
  op.inputs = {Floats("queries", {"Tq", "Hq", "D"}, "the sequences' queries, packed"),
               Floats("keys", {"Tk", "Hkv", "D"}, "their keys, packed; Hkv divides Hq"),
               Floats("values", {"Tk", "Hkv", "Dv"}, "their values, packed"),
               offsets("cu_seqlens_q", "queries"),
               offsets("cu_seqlens_k", "keys and values"),
               SinksSpec(),
               Floats("alibi_slopes", {"Hq"}, "ALiBi: head h's scores lose slope_h |p - j|", true)};
  op.outputs = {Floats("output", {"Tq", "Hq", "Dv"}, "the attention output, packed")};
  op.params = {
      CausalParam(), ScaleParam(), SoftCapParam(),
      WindowParam("window_left", "left side: query i at p = i + M - N sees keys from p - left"),
      WindowParam("window_right", "right side: keys up to p + right")};
  return op;
}

// A KV cache entry's parameters: its sizes (model), and the scores' (call).
std::vector<ParamSpec> CacheParams() {
  auto size = [](const char* name, const char* default_value, const char* doc) {
    return ParamSpec{name, Kind::kModel, Type::kInt, {}, default_value, doc};
  };
  return {
      size("batch", "1", "B sequences"),
      size("capacity", "", "positions each sequence may hold"),
      size("kv_heads", "1", "Hkv"),
      size("key_dim", "", "D"),
      size("value_dim", "", "Dv"),
      size("block_positions", "0", "a pool's block size in positions (0: no pool)"),
      size("blocks", "0", "the pool's blocks (0: no pool)"),
      ParamSpec{"kv_precision",
                Kind::kModel,
                Type::kChoice,
                {"fp32", "bf16", "int8"},
                "fp32",
                "how keys and values are held (bf16: rounded once, as appended; int8: "
                "codes with their scales)"},
      ScaleParam(),
      SoftCapParam(),
      WindowParam("window_left", "left side: query i at p = L - N + i sees keys from p - left")};
}

OpSpec KvCacheSpec() {
  OpSpec op = AttentionSpec(
      "kv_cache_attend",
      "appends each sequence's new keys and values, then its newest N queries attend to all it "
      "holds (causal, bottom-right)",
      {Floats("queries", {"B", "N", "Hq", "D"}, "each sequence's N newest positions"),
       Floats("keys", {"B", "T", "Hkv", "D"}, "keys to append first", true),
       Floats("values", {"B", "T", "Hkv", "Dv"}, "values to append first", true), SinksSpec(),
       Floats("alibi_slopes", {"Hq"}, "ALiBi: head h's scores lose slope_h |p - j|", true),
       Floats("attention_bias", {"B", "Hq", "N", "L"},
              "added to the scores after the cap and ALiBi; -inf masks a key", true)},
      {"B", "N", "Hq", "Dv"}, {"B", "Hq", "N", "L"});
  op.params = CacheParams();
  op.stateful = true;
  return op;
}

OpSpec KvCacheStepSpec() {
  const auto counts = [](const char* name, bool optional, const char* doc) {
    return TensorSpec{name, {DataType::kInt32, DataType::kInt64}, {"B"}, 1, optional, doc};
  };
  OpSpec op;
  op.name = "kv_cache_step";
  op.summary =
      "one server step: packed keys and values appended with a count per sequence, then packed "
      "queries, a count per sequence (0: idle), attend to all each holds (causal)";
  op.inputs = {
      Floats("queries", {"Tq", "Hq", "D"}, "each sequence's newest query_counts[b], packed"),
      counts("query_counts", false, "each sequence's queries this step (0: idle)"),
      Floats("keys", {"T", "Hkv", "D"}, "keys to append first, packed", true),
      Floats("values", {"T", "Hkv", "Dv"}, "values to append first, packed", true),
      counts("counts", true, "each sequence's appended rows"),
      SinksSpec(),
      Floats("alibi_slopes", {"Hq"}, "ALiBi: head h's scores lose slope_h |p - j|", true)};
  op.outputs = {Floats("output", {"Tq", "Hq", "Dv"}, "the attention output, packed")};
  op.params = CacheParams();
  op.stateful = true;
  return op;
}

OpSpec AdditiveSpec() {
  OpSpec op =
      AttentionSpec("additive", "d2l's AdditiveAttention: softmax(w_v . tanh(W_q q + W_k k)) V",
                    AttentionInputs("Dq", "M", "Dk"), {"B", "N", "Dv"}, {"B", "N", "M"});
  op.weights = {Floats("W_q.weight", {"H", "Dq"}, "queries' projection"),
                Floats("W_k.weight", {"H", "Dk"}, "keys' projection"),
                Floats("w_v.weight", {"1", "H"}, "the score's weights")};
  return op;
}

OpSpec ConcatSpec() {
  OpSpec op = AttentionSpec(
      "concat", "the seq2seq tutorial's Attn: softmax(Linear([q; k])) V, then Linear([q; W V])",
      AttentionInputs("Dq", "N", "Dk"), {"B", "N", "O"}, {"B", "N", "M"});
  op.weights = {Floats("attn.weight", {"M", "Dq+Dk"}, "the scores' layer"),
                Floats("attn.bias", {"M"}, "its bias"),
                Floats("attn_combine.weight", {"O", "Dq+Dv"}, "the combining layer"),
                Floats("attn_combine.bias", {"O"}, "its bias")};
  op.params = {{"query_size", Kind::kModel, Type::kInt, {}, "", "Dq, where q ends in [q; k]"}};
  return op;
}

OpSpec BilinearSpec() {
  OpSpec op =
      AttentionSpec("bilinear", "softmax(Q W K^T, masked) V, queries and keys of different sizes",
                    AttentionInputs("Dq", "M", "Dk"), {"B", "N", "Dv"}, {"B", "N", "M"});
  op.weights = {Floats("W.weight", {"Dq", "Dk"}, "the bilinear form")};
  return op;
}

OpSpec MultiHeadModelSpec() {
  OpSpec op =
      AttentionSpec("multihead", "d2l's MultiHeadAttention: W_o . heads(W_q q, W_k k, W_v v)",
                    AttentionInputs("Dq", "M", "Dk"), {"B", "N", "H"}, {"B", "heads", "N", "M"});
  op.weights = {Floats("W_q.weight", {"H", "Dq"}, "queries' projection"),
                Floats("W_k.weight", {"H", "Dk"}, "keys' projection"),
                Floats("W_v.weight", {"H", "Dv"}, "values' projection"),
                Floats("W_o.weight", {"H", "H"}, "the output's projection")};
  for (const char* bias : {"W_q.bias", "W_k.bias", "W_v.bias", "W_o.bias"}) {
    op.weights.push_back(Floats(bias, {"H"}, "a bias: all four or none", /*optional=*/true));
  }
  op.params = {{"num_heads", Kind::kModel, Type::kInt, {}, "", "heads; divides H"}, CausalParam()};
  return op;
}

template <class Spec>
const Spec* Named(const std::vector<Spec>& list, const std::string& name) {
  const auto found =
      std::find_if(list.begin(), list.end(), [&](const Spec& s) { return s.name == name; });
  return found == list.end() ? nullptr : &*found;
}

}  // namespace

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
}

const TensorSpec* OpSpec::input(const std::string& input_name) const {
  return Named(inputs, input_name);
}
const TensorSpec* OpSpec::output(const std::string& output_name) const {
  return Named(outputs, output_name);
}
const ParamSpec* OpSpec::param(const std::string& param_name) const {
  return Named(params, param_name);
}

const std::vector<OpSpec>& Catalogue() {
  static const std::vector<OpSpec> entries = {
      MaskedSoftmaxSpec(), DotProductSpec(),    MultiHeadOpSpec(), MultiHeadPackedSpec(),
      KvCacheSpec(),       KvCacheStepSpec(),   AdditiveSpec(),    ConcatSpec(),
      BilinearSpec(),      MultiHeadModelSpec()};
  return entries;
}

const OpSpec* FindOp(const std::string& name) { return Named(Catalogue(), name); }

NamedTensor::NamedTensor(std::string tensor_name, const ConstTensor& view)
    : name(std::move(tensor_name)), data(const_cast<float*>(view.data)), rank(view.rank) {
  for (int d = 0; d < kMaxRank; ++d) dims[d] = view.dims[d], strides[d] = view.strides[d];
}

NamedTensor::NamedTensor(std::string tensor_name, const Tensor& view)
    : NamedTensor(std::move(tensor_name), ConstTensor(view)) {}

namespace {
void SetCOrder(NamedTensor* t, const std::vector<int64_t>& shape) {
  t->rank = static_cast<int>(shape.size());
  const int rank = std::min(t->rank, kMaxRank);
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t->dims[d] = shape[static_cast<size_t>(d)];
    t->strides[d] = stride;
    stride *= t->dims[d];
  }
}
}  // namespace

NamedTensor::NamedTensor(std::string tensor_name, const float* floats,
                         const std::vector<int64_t>& shape)
    : name(std::move(tensor_name)), data(const_cast<float*>(floats)) {
  SetCOrder(this, shape);
}

NamedTensor::NamedTensor(std::string tensor_name, const int32_t* ints,
                         const std::vector<int64_t>& shape)
    : name(std::move(tensor_name)), dtype(DataType::kInt32), data(const_cast<int32_t*>(ints)) {
  SetCOrder(this, shape);
}

NamedTensor::NamedTensor(std::string tensor_name, const int64_t* ints,
                         const std::vector<int64_t>& shape)
    : name(std::move(tensor_name)), dtype(DataType::kInt64), data(const_cast<int64_t*>(ints)) {
  SetCOrder(this, shape);
}

}  // namespace attnscore
