// What the multi-head tests share: a call's shape, random token-major
// inputs, and the op written literally from docs/semantics.md section 5.1
// in float64, with the options it has.
#ifndef ATTNSCORE_TESTS_MULTIHEAD_CASES_H_
#define ATTNSCORE_TESTS_MULTIHEAD_CASES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/attnscore.h"
#include "test_util.h"

namespace attnscore::test {

struct Shape {
  int64_t batch, queries, keys, heads, kv_heads, depth, value_dim;
  size_t q() const { return static_cast<size_t>(batch * queries * heads * depth); }
  size_t k() const { return static_cast<size_t>(batch * keys * kv_heads * depth); }
  size_t v() const { return static_cast<size_t>(batch * keys * kv_heads * value_dim); }
  size_t out() const { return static_cast<size_t>(batch * queries * heads * value_dim); }
  size_t weights() const { return static_cast<size_t>(batch * heads * queries * keys); }
  std::string Name() const {
    return "B=" + std::to_string(batch) + " N=" + std::to_string(queries) +
           " M=" + std::to_string(keys) + " Hq=" + std::to_string(heads) +
           " Hkv=" + std::to_string(kv_heads) + " D=" + std::to_string(depth) +
           " Dv=" + std::to_string(value_dim);
  }
};

// Dense token-major inputs: Q (B, N, Hq, D), K (B, M, Hkv, D), V (B, M, Hkv, Dv).
struct Inputs {
  std::vector<float> q, k, v;
  Inputs(const Shape& s, uint32_t seed)
      : q(RandomFloats(s.q(), seed)),
        k(RandomFloats(s.k(), seed + 1)),
        v(RandomFloats(s.v(), seed + 2, 3.0f)) {}
};

inline ConstTensor QueriesOf(const Shape& s, const std::vector<float>& q) {
  return ConstTensor(q.data(), {s.batch, s.queries, s.heads, s.depth});
}
inline ConstTensor KeysOf(const Shape& s, const std::vector<float>& k) {
  return ConstTensor(k.data(), {s.batch, s.keys, s.kv_heads, s.depth});
}
inline ConstTensor ValuesOf(const Shape& s, const std::vector<float>& v) {
  return ConstTensor(v.data(), {s.batch, s.keys, s.kv_heads, s.value_dim});
}

// The options the reference knows.
struct Form {
  Causal causal = Causal::kNone;
  double scale = 0;  // 0: 1/sqrt(D)
  double softcap = 0;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  std::vector<float> sinks = {};                // (Hq,) or empty
  std::vector<float> alibi_slopes = {};         // (Hq,) or empty
  std::vector<float> bias = {};                 // (B, Hq, N, M) or empty
  std::vector<uint8_t> mask = {};               // (B, Hq, N, M), 0 masking; or empty
};

// The definition, literally, in double: for head h and its key-value head
// h / (Hq / Hkv), s = scale · q·k, then c · tanh(s / c) for a cap c > 0;
// positions j >= L (the query's length cut by the causal bound) set to
// -1e6; a softmax over all M, then W V. With a window (left, right), query
// i at p = i + M - N keeps only keys p - left <= j <= p + right (-1:
// unbounded) of those, the others weight 0; a query of length L > 0 left no
// key gets weights 0 and output 0. After the cap, ALiBi subtracts slope_h ·
// |p - j|, the bias adds its value and the mask's 0 makes the score -Inf; a
// query of length L > 0 weighs keys past L exactly 0, and one whose
// visible scores are all -Inf is NaN (softmax of nothing). With sinks, head
// h's z_h adds e^{z_h} to each softmax's denominator (such a query: weights
// 0, output 0; a length-0 query keeps its uniform weights).
// `lens` empty, (B) or (B, N) as per_query says. Returns out (B, N, Hq, Dv) and sets *weights (B,
// Hq, N, M).
inline std::vector<double> Reference(const Shape& s, const Inputs& in,
                                     const std::vector<int64_t>& lens, bool per_query,
                                     const Form& form, std::vector<double>* weights) {
  std::vector<double> out(s.out());
  weights->assign(s.weights(), 0.0);
  const int64_t group = s.heads / s.kv_heads;
  const double scale = form.scale != 0 ? form.scale : 1.0 / std::sqrt(double(s.depth));
  std::vector<double> row(static_cast<size_t>(s.keys));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.queries; ++i) {
        int64_t valid =
            lens.empty() ? s.keys : lens[static_cast<size_t>(per_query ? b * s.queries + i : b)];
        if (form.causal == Causal::kTopLeft) valid = std::min(valid, i + 1);
        if (form.causal == Causal::kBottomRight)
          valid = std::min(valid, s.keys - s.queries + i + 1);
        double top = -1e300;
        bool seen = false;
        for (int64_t j = 0; j < s.keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < s.depth; ++d) {
            dot +=
                static_cast<double>(
                    in.q[static_cast<size_t>(((b * s.queries + i) * s.heads + h) * s.depth + d)]) *
                in.k[static_cast<size_t>(((b * s.keys + j) * s.kv_heads + g) * s.depth + d)];
          }
          double score = dot * scale;
          if (form.softcap > 0) score = form.softcap * std::tanh(score / form.softcap);
          const int64_t p = i + s.keys - s.queries;
          const size_t at = static_cast<size_t>(((b * s.heads + h) * s.queries + i) * s.keys + j);
          if (!form.alibi_slopes.empty()) {
            score -= form.alibi_slopes[static_cast<size_t>(h)] * std::abs(double(p - j));
          }
          if (!form.bias.empty()) score += form.bias[at];
          if (!form.mask.empty() && form.mask[at] == 0) score = -INFINITY;
          row[static_cast<size_t>(j)] = j < valid ? score : valid > 0 ? -INFINITY : -1e6;
          const bool outside = (form.window_left >= 0 && j < p - form.window_left) ||
                               (form.window_right >= 0 && j > p + form.window_right);
          if (valid > 0 && outside) row[static_cast<size_t>(j)] = -INFINITY;
          top = std::max(top, row[static_cast<size_t>(j)]);
          seen |= valid == 0 || (j < valid && !outside);
        }
        double* w = weights->data() + ((b * s.heads + h) * s.queries + i) * s.keys;
        double* o = out.data() + ((b * s.queries + i) * s.heads + h) * s.value_dim;
        if (!seen) {  // the window left it no key
          std::fill(w, w + s.keys, 0.0);
          std::fill(o, o + s.value_dim, 0.0);
          continue;
        }
        if (top == -INFINITY) {  // every visible score -Inf
          std::fill(w, w + s.keys, form.sinks.empty() ? NAN : 0.0);
          std::fill(o, o + s.value_dim, form.sinks.empty() ? NAN : 0.0);
          continue;
        }
        double sum = 0;
        for (double& x : row) sum += (x = std::exp(x - top));
        if (!form.sinks.empty() && valid > 0) {
          sum += std::exp(static_cast<double>(form.sinks[static_cast<size_t>(h)]) - top);
        }
        for (int64_t j = 0; j < s.keys; ++j) w[j] = row[static_cast<size_t>(j)] / sum;
        for (int64_t c = 0; c < s.value_dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.keys; ++j) {
            acc += w[j] *
                   in.v[static_cast<size_t>(((b * s.keys + j) * s.kv_heads + g) * s.value_dim + c)];
          }
          out[static_cast<size_t>(((b * s.queries + i) * s.heads + h) * s.value_dim + c)] = acc;
        }
      }
    }
  }
  return out;
}

// The same with a mask and a factor alone.
inline std::vector<double> Reference(const Shape& s, const Inputs& in,
                                     const std::vector<int64_t>& lens, bool per_query,
                                     Causal causal, double scale, std::vector<double>* weights) {
  return Reference(s, in, lens, per_query, Form{causal, scale, 0}, weights);
}

struct Result {
  std::vector<float> out, weights;
};

// The op's options for `form` on shape s: every option the reference knows,
// the views over form's own vectors (form must outlive the options).
inline MultiHeadOptions OptionsOf(const Shape& s, const Form& form) {
  MultiHeadOptions options;
  options.causal = form.causal;
  options.scale = static_cast<float>(form.scale);
  options.softcap = static_cast<float>(form.softcap);
  options.window = {form.window_left, form.window_right};
  if (!form.sinks.empty()) options.sinks = ConstTensor(form.sinks.data(), {s.heads});
  if (!form.alibi_slopes.empty()) {
    options.alibi_slopes = ConstTensor(form.alibi_slopes.data(), {s.heads});
  }
  if (!form.bias.empty()) {
    options.bias = ConstTensor(form.bias.data(), {s.batch, s.heads, s.queries, s.keys});
  }
  if (!form.mask.empty()) {
    options.mask =
        TensorView<const uint8_t>(form.mask.data(), {s.batch, s.heads, s.queries, s.keys});
  }
  return options;
}

// The op on the inputs (out and, when wanted, the weights), expected to succeed.
inline Result RunMultiHead(const Engine& engine, const Shape& s, const Inputs& in,
                           const ValidLens& lens, const MultiHeadOptions& options,
                           bool want_weights = true) {
  Result r{std::vector<float>(s.out(), kSentinel), std::vector<float>(s.weights(), kSentinel)};
  const Status status = engine.MultiHeadAttention(
      QueriesOf(s, in.q), KeysOf(s, in.k), ValuesOf(s, in.v), lens, options,
      Tensor(r.out.data(), {s.batch, s.queries, s.heads, s.value_dim}),
      want_weights ? Tensor(r.weights.data(), {s.batch, s.heads, s.queries, s.keys}) : Tensor());
  EXPECT_TRUE(status.ok()) << status.message();
  return r;
}

// A KvCache of `precision` holding all of the inputs' K and V (null if it
// could not be made).
inline std::unique_ptr<KvCache> FilledCache(const Shape& s, const Inputs& in, Precision precision) {
  KvCacheShape shape;
  shape.batch = s.batch, shape.capacity = s.keys, shape.kv_heads = s.kv_heads;
  shape.key_dim = s.depth, shape.value_dim = s.value_dim, shape.precision = precision;
  std::unique_ptr<KvCache> cache;
  EXPECT_TRUE(KvCache::Create(shape, &cache).ok());
  if (cache) {
    EXPECT_TRUE(cache->Append(KeysOf(s, in.k), ValuesOf(s, in.v)).ok());
  }
  return cache;
}

// The op on the same Q, K and V laid out heads-first, (B, H, N, F), passed
// as the (B, N, H, F) views the op takes (strides (H·N·F, F, N·F, 1)):
// its token-major output, or sentinels where the call failed.
inline std::vector<float> RunHeadsFirst(const Engine& engine, const Shape& s, const Inputs& in,
                                        const MultiHeadOptions& options) {
  const auto heads_first = [](const std::vector<float>& x, int64_t n_count, int64_t h_count,
                              int64_t f_count) {
    std::vector<float> y(x.size());
    const int64_t entry = n_count * h_count * f_count;
    for (size_t at = 0; at < x.size(); ++at) {
      const auto i = static_cast<int64_t>(at);
      const int64_t b = i / entry, n = i / (h_count * f_count) % n_count;
      const int64_t h = i / f_count % h_count, f = i % f_count;
      y[static_cast<size_t>(b * entry + (h * n_count + n) * f_count + f)] = x[at];
    }
    return y;
  };
  const auto view = [&](const std::vector<float>& x, int64_t n, int64_t h, int64_t f) {
    return ConstTensor(x.data(), {s.batch, n, h, f}, {h * n * f, f, n * f, 1});
  };
  const std::vector<float> q = heads_first(in.q, s.queries, s.heads, s.depth);
  const std::vector<float> k = heads_first(in.k, s.keys, s.kv_heads, s.depth);
  const std::vector<float> v = heads_first(in.v, s.keys, s.kv_heads, s.value_dim);
  std::vector<float> out(s.out(), kSentinel);
  const Status status = engine.MultiHeadAttention(
      view(q, s.queries, s.heads, s.depth), view(k, s.keys, s.kv_heads, s.depth),
      view(v, s.keys, s.kv_heads, s.value_dim), ValidLens::None(), options,
      Tensor(out.data(), {s.batch, s.queries, s.heads, s.value_dim}));
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// The op with `form` against Reference, outputs and weights, and its output
// again without the weights output (the gemm path's weights then in scratch).
inline void ExpectMatchesReference(const Engine& engine, const Shape& s, const Inputs& in,
                                   const std::vector<int64_t>& lens, bool per_query,
                                   const Form& form) {
  const ValidLens valid = LensOf(lens, per_query, s.batch, s.queries);
  std::vector<double> weights;
  const std::vector<double> out = Reference(s, in, lens, per_query, form, &weights);
  const Result r = RunMultiHead(engine, s, in, valid, OptionsOf(s, form));
  EXPECT_LE(MaxAbsDiff(r.weights.data(), weights), kWeightTolerance);
  EXPECT_LE(MaxAbsDiff(r.out.data(), out), OutTolerance(in.v));
  const Result alone = RunMultiHead(engine, s, in, valid, OptionsOf(s, form), false);
  EXPECT_LE(MaxAbsDiff(alone.out.data(), out), OutTolerance(in.v));
}

inline const char* CausalName(Causal c) {
  return c == Causal::kNone ? "none" : c == Causal::kTopLeft ? "top-left" : "bottom-right";
}

// For each shape (seeds from `seed` up by 10), its random inputs, each kind
// of lengths (none, per entry, per query) and each causal mask:
// check(s, in, lens, per_query, causal), under a trace that names them.
template <class Check>
void ForEachShapeLengthKindAndMask(const std::vector<Shape>& shapes, uint32_t seed, Check check) {
  for (const Shape& s : shapes) {
    const Inputs in(s, seed);
    for (int kind = 0; kind < 3; ++kind) {
      const bool per_query = kind == 2;
      const std::vector<int64_t> lens =
          kind == 0 ? std::vector<int64_t>()
                    : TestLengths(s.batch, s.queries, s.keys, per_query, seed);
      for (Causal causal : {Causal::kNone, Causal::kTopLeft, Causal::kBottomRight}) {
        SCOPED_TRACE(s.Name() + " lens kind " + std::to_string(kind) + " causal " +
                     CausalName(causal));
        check(s, in, lens, per_query, causal);
      }
    }
    seed += 10;
  }
}

}  // namespace attnscore::test

#endif  // ATTNSCORE_TESTS_MULTIHEAD_CASES_H_
