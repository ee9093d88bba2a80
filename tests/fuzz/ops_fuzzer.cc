// libFuzzer target: the engine's public ops, Engine::MaskedSoftmax,
// Engine::DotProductAttention, and AdditiveAttention / ConcatAttention built
// in memory by Create, on shapes, strides, valid lengths, values, thread
// counts, precisions and Highway targets that the input chooses.
//
// A valid call must succeed, match the float64 reference below (written from
// docs/semantics.md sections 1-4) within section 7's tolerances, write
// nothing outside its output views and change no input. An invalid call (one
// argument broken: a dim, a rank, a null pointer, a negative stride, an
// output overlapping an input or another output or sharing memory with
// itself, a length negative or of the wrong shape, a non-finite model
// weight) must return kInvalidArgument and leave every buffer, inputs and
// outputs, bit for bit as it was (section 8.2). Anything else prints the
// case and aborts.
//
// Shapes stay small (B <= 4, N <= 8, M <= 64, features <= 32; a masked
// softmax may reach M = 300) so that each input runs in a few milliseconds;
// N >= 4 or strided views send the dot product down its oneDNN path, N <= 3
// with unit column strides down its row path.
//
// ATTNSCORE_OPS_FUZZ_STATS=1 prints each check's largest error, as a fraction
// of its tolerance, whenever it grows; ATTNSCORE_OPS_FUZZ_VERBOSE=1 prints
// every case (to see what a reproducer or a seed does).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/additive.h"
#include "attnscore/concat.h"
#include "attnscore/engine.h"
#include "hwy/targets.h"
#include "kernels/dispatch.h"

namespace {

using attnscore::AdditiveAttention;
using attnscore::ConcatAttention;
using attnscore::ConstTensor;
using attnscore::Engine;
using attnscore::EngineOptions;
using attnscore::Precision;
using attnscore::Status;
using attnscore::StatusCode;
using attnscore::Tensor;
using attnscore::ValidLens;

// Non-finite values at masked positions (docs/semantics.md sections 1.3,
// 1.4, 2.2, 3.3, 4.3). When on, every element that no query reads (scores past
// a row's valid length; rows of K and V past every length of their entry)
// holds NaN, ±Inf or 3e38, and one in eight of the elements that some queries
// read but others do not (a key or value row past one query's length but
// within another's) holds NaN or ±Inf (NaN only for additive attention,
// whose tanh turns ±Inf into ±1): the queries whose valid keys include it
// must come out NaN (or ±Inf) as the reference says, the others untouched.
// Off for now, so that only finite values reach the engine;
// ATTNSCORE_OPS_FUZZ_NONFINITE_MASKED=1 turns it on without a rebuild.
constexpr bool kNonFiniteAtMaskedPositions = false;
bool g_nonfinite_masked = kNonFiniteAtMaskedPositions;

// Elements of the input buffers outside the views (padding between rows and
// columns, before and after a view) hold NaN: no view contains them.
constexpr bool kNanOutsideViews = true;

// What failed calls must leave in the outputs, and valid ones outside the views.
constexpr float kSentinel = -12345.0f;

// docs/semantics.md section 7.
constexpr double kWeightTolerance = 1e-5;
constexpr double kOutTolerance = 1e-5;      // times (1 + max|V|)
constexpr double kBf16OutTolerance = 1e-2;  // times (1 + max|V|), section 7.3's first row
constexpr double kLinearTolerance = 1e-4;   // concat's output layer, relative to |terms|

std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

// The case being run, printed when a check fails.
std::string g_case;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "ops_fuzzer: %s\ncase: %s\n", what.c_str(), g_case.c_str());
  std::fflush(stderr);
  std::abort();
}

bool g_stats = false, g_verbose = false;

// Largest |error| / tolerance per check, printed as it grows (stats mode).
void Record(const char* check, double ratio) {
  if (!g_stats) return;
  static std::map<std::string, double> worst;
  double& w = worst[check];
  if (ratio > w * 1.05 && ratio > 0.01) {
    w = ratio;
    std::fprintf(stderr, "stats: %s: largest error %.3g of the tolerance\n  case: %s\n", check,
                 ratio, g_case.c_str());
  }
}

// bfloat16 rounding as docs/semantics.md section 2.3 states it: to nearest,
// ties to even (finite values here are far from bf16's range); NaN stays NaN.
float RoundBf16(float x) {
  if (std::isnan(x)) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// ---------------------------------------------------------------------------
// The input.

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data, size) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a: values for short inputs
    for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
    state_ = h;
  }
  template <typename T>
  T Range(T lo, T hi) {
    return p_.ConsumeIntegralInRange<T>(lo, hi);
  }
  bool Bool() { return p_.ConsumeBool(); }
  // Uniform in [-bound, bound]: from the input while it lasts, then from a
  // generator seeded by the whole input.
  float Value(float bound) {
    const uint16_t u = p_.remaining_bytes() >= 2 ? p_.ConsumeIntegral<uint16_t>()
                                                 : static_cast<uint16_t>(Next() >> 48);
    return (static_cast<float>(u) - 32767.5f) / 32767.5f * bound;
  }

 private:
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  FuzzedDataProvider p_;
  uint64_t state_;
};

// ---------------------------------------------------------------------------
// Views into buffers of their own: contiguous, padded, permuted (a
// transposed K is one), spread columns, any stride on a dim of size 1, and
// for inputs a stride shorter than the dims inside it (a zero stride
// broadcasts; others make rows overlap, as a sliding window does).
// docs/semantics.md: strides may be any non-negative values; only outputs
// must not map two elements to one address.

struct View {
  std::vector<float>* store = nullptr;
  int64_t offset = 0;
  int rank = 0;
  int64_t dims[3] = {1, 1, 1};
  int64_t strides[3] = {0, 0, 0};

  int64_t Index(int64_t a, int64_t b = 0, int64_t c = 0) const {
    return offset + a * strides[0] + b * strides[1] + c * strides[2];
  }
  float Get(int64_t a, int64_t b = 0, int64_t c = 0) const { return (*store)[Index(a, b, c)]; }
  float* data() const { return store->data() + offset; }
  Tensor tensor() const {
    Tensor t;
    t.data = data();
    t.rank = rank;
    for (int d = 0; d < rank; ++d) {
      t.dims[d] = dims[d];
      t.strides[d] = strides[d];
    }
    return t;
  }
  // Calls f(index into the store, a, b, c) for every element of the view.
  template <class F>
  void ForEach(F f) const {
    for (int64_t a = 0; a < dims[0]; ++a)
      for (int64_t b = 0; b < dims[1]; ++b)
        for (int64_t c = 0; c < dims[2]; ++c) f(Index(a, b, c), a, b, c);
  }
  std::string Describe() const {
    std::string s = "(";
    for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(dims[d]);
    s += ") strides (";
    for (int d = 0; d < rank; ++d) s += (d ? ", " : "") + std::to_string(strides[d]);
    return s + ") offset " + std::to_string(offset) + " of " + std::to_string(store->size());
  }
};

// Whether no two elements of `v` share an address, by the rule the engine
// applies: sorted by stride, each dim (of size > 1) steps past everything
// the smaller ones span. (A few interleaved layouts with distinct addresses,
// dims (3, 2) strides (2, 3), fail it; the fuzzer does not make them outputs.)
bool Writable(const View& v) {
  int order[3] = {0, 1, 2};
  std::sort(order, order + v.rank, [&](int a, int b) { return v.strides[a] < v.strides[b]; });
  int64_t span = 1;
  for (int k = 0; k < v.rank; ++k) {
    const int d = order[k];
    if (v.dims[d] == 1) continue;
    if (v.strides[d] < span) return false;
    span += v.strides[d] * (v.dims[d] - 1);
  }
  return true;
}

// Every buffer of one case, so that a failed call can be checked against a
// snapshot of all of them.
struct Arena {
  std::deque<std::vector<float>> buffers;
  std::vector<float>* New(size_t n) {
    buffers.emplace_back(n);
    return &buffers.back();
  }
};

// A view of `dims` (rank 1 to 3) in a new buffer, laid out as the input says.
View MakeView(Input& in, Arena& arena, int rank, std::initializer_list<int64_t> dims,
              bool is_input) {
  View v;
  v.rank = rank;
  int d = 0;
  for (int64_t n : dims) v.dims[d++] = n;
  int order[3] = {0, 1, 2};  // outermost first
  int64_t pads[3] = {0, 0, 0};
  int64_t inner = 1, offset = 0, tail = 0;
  bool odd_strides = false;
  const int kind = in.Range<int>(0, 9);
  if (kind >= 5) {  // 0-4: contiguous
    if (kind == 6 || kind == 8) {  // permuted: a transposed K, or batch entries interleaved
      for (int i = rank - 1; i > 0; --i) std::swap(order[i], order[in.Range<int>(0, i)]);
    }
    if (kind == 5 || kind == 8) {  // padded rows, an offset, a tail
      for (int i = 0; i < rank; ++i) pads[i] = in.Range<int64_t>(0, 3);
      offset = in.Range<int64_t>(0, 3);
      tail = in.Range<int64_t>(0, 2);
    }
    if (kind == 7 || kind == 8) inner = 2;  // spread columns
    if (kind == 9) {
      odd_strides = true;
      inner = in.Range<int64_t>(1, 3);
      offset = in.Range<int64_t>(0, 1);
    }
  }
  int64_t stride = inner;
  for (int i = rank - 1; i >= 0; --i) {
    const int dim = order[i];
    v.strides[dim] = stride;
    stride = stride * v.dims[dim] + pads[i];
  }
  if (odd_strides) {
    for (int i = 0; i < rank; ++i) {
      if (v.dims[i] == 1) v.strides[i] = in.Range<int64_t>(0, 40);  // never stepped on
    }
    if (is_input) {
      const int i = in.Range<int>(0, rank - 1);
      v.strides[i] = in.Bool() ? 0 : in.Range<int64_t>(0, v.strides[i]);
    }
  }
  int64_t last = 0;
  for (int i = 0; i < rank; ++i) last += (v.dims[i] - 1) * v.strides[i];
  v.offset = offset;
  v.store = arena.New(static_cast<size_t>(offset + last + 1 + tail));
  return v;
}

// Who reads an element of an input view.
enum Need : uint8_t { kReadByNone = 1, kReadBySome = 2, kReadByAll = 3 };

// Fills an input view: elements get finite values from `value`, except
// with g_nonfinite_masked, where `need(a, b, c)` decides (see
// kNonFiniteAtMaskedPositions); elements of the buffer outside the view are
// NaN (kNanOutsideViews). An element that several view positions share
// (zero strides) is filled once, as its most demanding position says.
template <class NeedOf, class Value>
void FillInput(Input& in, const View& v, NeedOf need, Value value, bool nan_only = false) {
  std::vector<float>& s = *v.store;
  std::vector<uint8_t> state(s.size(), 0);  // 0: outside the view, else a Need
  v.ForEach([&](int64_t i, int64_t a, int64_t b, int64_t c) {
    state[i] = std::max<uint8_t>(state[i], need(a, b, c));
  });
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < s.size(); ++i) {
    if (state[i] == 0) {
      s[i] = kNanOutsideViews ? kNan : 0.0f;
    } else if (g_nonfinite_masked && state[i] == kReadByNone) {
      const float poison[] = {kNan, kInf, -kInf, 3e38f};
      s[i] = nan_only ? kNan : poison[in.Range<int>(0, 3)];
    } else if (g_nonfinite_masked && state[i] == kReadBySome && in.Range<int>(0, 7) == 0) {
      const float poison[] = {kNan, kInf, -kInf};
      s[i] = nan_only ? kNan : poison[in.Range<int>(0, 2)];
    } else {
      s[i] = value();
    }
  }
}

Need All(int64_t, int64_t, int64_t) { return kReadByAll; }

void FillOutput(const View& v) { std::fill(v.store->begin(), v.store->end(), kSentinel); }

// ---------------------------------------------------------------------------
// Valid lengths.

struct Lens {
  ValidLens::Kind kind = ValidLens::Kind::kNone;
  bool is_int64 = false;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<int64_t> rows;  // row (b, i)'s length, clamped to [0, M]

  ValidLens view(int64_t batch, int64_t queries) const {
    switch (kind) {
      case ValidLens::Kind::kPerBatch:
        return is_int64 ? ValidLens::PerBatch(i64.data(), batch)
                        : ValidLens::PerBatch(i32.data(), batch);
      case ValidLens::Kind::kPerQuery:
        return is_int64 ? ValidLens::PerQuery(i64.data(), batch, queries)
                        : ValidLens::PerQuery(i32.data(), batch, queries);
      default:
        return ValidLens::None();
    }
  }
  int64_t Row(int64_t b, int64_t i, int64_t queries) const { return rows[b * queries + i]; }
  std::string Describe() const {
    if (kind == ValidLens::Kind::kNone) return "none";
    std::string s = std::string(kind == ValidLens::Kind::kPerBatch ? "per batch" : "per query") +
                    (is_int64 ? " int64 [" : " int32 [");
    const size_t n = is_int64 ? i64.size() : i32.size();
    for (size_t k = 0; k < n; ++k) {
      s += (k ? ", " : "") + std::to_string(is_int64 ? i64[k] : i32[k]);
    }
    return s + "]";
  }
};

Lens MakeLens(Input& in, int64_t batch, int64_t queries, int64_t keys) {
  Lens lens;
  lens.kind = static_cast<ValidLens::Kind>(in.Range<int>(0, 2));
  lens.is_int64 = in.Bool();
  const int64_t count = lens.kind == ValidLens::Kind::kPerBatch   ? batch
                        : lens.kind == ValidLens::Kind::kPerQuery ? batch * queries
                                                                  : 0;
  for (int64_t k = 0; k < count; ++k) {
    const int pick = in.Range<int>(0, 15);
    int64_t len;
    if (pick < 8) {
      len = in.Range<int64_t>(1, keys);
    } else if (pick < 10) {
      len = 0;  // uniform weights
    } else if (pick < 12) {
      len = keys;
    } else if (pick < 15) {
      len = keys + in.Range<int64_t>(1, 3);
    } else {
      len = lens.is_int64 ? std::numeric_limits<int64_t>::max()
                          : std::numeric_limits<int32_t>::max();
    }
    if (lens.is_int64) {
      lens.i64.push_back(len);
    } else {
      lens.i32.push_back(static_cast<int32_t>(len));
    }
  }
  lens.rows.resize(static_cast<size_t>(batch * queries));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      int64_t len = keys;
      if (lens.kind != ValidLens::Kind::kNone) {
        const size_t k = static_cast<size_t>(lens.kind == ValidLens::Kind::kPerBatch
                                                 ? b
                                                 : b * queries + i);
        len = lens.is_int64 ? lens.i64[k] : lens.i32[k];
      }
      lens.rows[static_cast<size_t>(b * queries + i)] = std::min(len, keys);
    }
  }
  return lens;
}

// Who reads row j of K and of V in entry b (docs/semantics.md section 2.2):
// query i reads keys j < L and value rows j < L, or every value row and no
// key when L = 0.
struct Reach {
  std::vector<Need> key, value;  // [b * M + j]
  int64_t longest(int64_t b, int64_t keys) const {  // the keys worth scoring in entry b
    int64_t n = 0;
    for (int64_t j = 0; j < keys; ++j) {
      if (key[static_cast<size_t>(b * keys + j)] != kReadByNone) n = j + 1;
    }
    return n;
  }
};
Reach ReachOf(const Lens& lens, int64_t batch, int64_t queries, int64_t keys) {
  Reach reach;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < keys; ++j) {
      int64_t as_key = 0, as_value = 0;
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t valid = lens.Row(b, i, queries);
        as_key += j < valid;
        as_value += valid == 0 || j < valid;
      }
      const auto need = [&](int64_t n) {
        return n == 0 ? kReadByNone : n == queries ? kReadByAll : kReadBySome;
      };
      reach.key.push_back(need(as_key));
      reach.value.push_back(need(as_value));
    }
  }
  return reach;
}

// ---------------------------------------------------------------------------
// The reference, in double.

// docs/semantics.md section 1.1-1.2 for one row of M scores with length L
// (already clamped to M): only the first L scores are read.
void ReferenceSoftmaxRow(const double* scores, int64_t valid, int64_t width, double* weights) {
  if (valid == 0) {
    for (int64_t j = 0; j < width; ++j) weights[j] = 1.0 / static_cast<double>(width);
    return;
  }
  double max = scores[0];
  for (int64_t j = 1; j < valid; ++j) max = std::max(max, scores[j]);
  double sum = 0;
  for (int64_t j = 0; j < valid; ++j) sum += std::exp(scores[j] - max);
  for (int64_t j = 0; j < width; ++j) {
    weights[j] = j < valid ? std::exp(scores[j] - max) / sum : 0.0;
  }
}

// Weights (B, N, M) from scores (B, N, M), row by row.
std::vector<double> ReferenceSoftmax(const std::vector<double>& scores, const Lens& lens,
                                     int64_t batch, int64_t queries, int64_t keys) {
  std::vector<double> weights(scores.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      const size_t row = static_cast<size_t>((b * queries + i) * keys);
      ReferenceSoftmaxRow(&scores[row], lens.Row(b, i, queries), keys, &weights[row]);
    }
  }
  return weights;
}

// The engine's weights (B, N, M) against the reference's: masked positions
// exactly 0, the others within the tolerance; a row that the reference makes
// NaN (a NaN or +Inf among its valid scores, or all of them -Inf) NaN
// throughout, masked positions included (section 1.4).
void CheckWeights(const char* check, const View& actual, const std::vector<double>& expected,
                  const Lens& lens, double tolerance) {
  const int64_t queries = actual.dims[1], keys = actual.dims[2];
  double worst = 0;
  actual.ForEach([&](int64_t index, int64_t b, int64_t i, int64_t j) {
    const float got = (*actual.store)[index];
    const size_t row = static_cast<size_t>((b * queries + i) * keys);
    const double want = expected[row + static_cast<size_t>(j)];
    const int64_t valid = lens.Row(b, i, queries);
    if (std::any_of(&expected[row], &expected[row] + keys, [](double w) { return std::isnan(w); })) {
      if (!std::isnan(got)) {
        Fail(Format("%s: weight [%lld, %lld, %lld] is %.9g; the reference's row is NaN "
                    "(valid length %lld)",
                    check, (long long)b, (long long)i, (long long)j, got, (long long)valid));
      }
      return;
    }
    if (valid > 0 && j >= valid) {
      if (got != 0.0f) {
        Fail(Format("%s: weight [%lld, %lld, %lld] is %.9g; past the valid length %lld it must "
                    "be exactly 0",
                    check, (long long)b, (long long)i, (long long)j, got, (long long)valid));
      }
      return;
    }
    const double error = std::fabs(static_cast<double>(got) - want);
    if (!(error <= tolerance)) {  // NaN fails too
      Fail(Format("%s: weight [%lld, %lld, %lld] is %.9g, the reference %.9g (error %.3g > %.3g; "
                  "valid length %lld)",
                  check, (long long)b, (long long)i, (long long)j, got, want, error, tolerance,
                  (long long)valid));
    }
    worst = std::max(worst, error);
  });
  Record(check, worst / tolerance);
}

// The engine's outputs against the reference's, each with its own tolerance.
void CheckOutputs(const char* check, const View& actual, const std::vector<double>& expected,
                  const std::vector<double>& tolerance) {
  const int64_t queries = actual.dims[1], features = actual.dims[2];
  double worst = 0;
  actual.ForEach([&](int64_t index, int64_t b, int64_t i, int64_t c) {
    const size_t k = static_cast<size_t>((b * queries + i) * features + c);
    const float got = (*actual.store)[index];
    if (!std::isfinite(expected[k])) {  // NaN where the reference has NaN, ±Inf where ±Inf
      if (std::isnan(expected[k]) ? std::isnan(got) : got == expected[k]) return;
      Fail(Format("%s: out [%lld, %lld, %lld] is %.9g, the reference %.9g", check, (long long)b,
                  (long long)i, (long long)c, got, expected[k]));
    }
    const double error = std::fabs(static_cast<double>(got) - expected[k]);
    if (!(error <= tolerance[k])) {
      Fail(Format("%s: out [%lld, %lld, %lld] is %.9g, the reference %.9g (error %.3g > %.3g)",
                  check, (long long)b, (long long)i, (long long)c, got, expected[k], error,
                  tolerance[k]));
    }
    worst = std::max(worst, error / tolerance[k]);
  });
  Record(check, worst);
}

// W V (B, N, Dv), with W (B, N, M) and V read through `value`. Positions
// past a row's valid length take no part (docs/semantics.md section 2.2: NaN
// and ±Inf there never reach the row); valid ones do even at weight 0 (a -Inf
// score), so that 0 · Inf is NaN, as in the reference module.
template <class Value>
std::vector<double> Mix(const std::vector<double>& weights, const Lens& lens, int64_t batch,
                        int64_t queries, int64_t keys, int64_t features, Value value) {
  std::vector<double> out(static_cast<size_t>(batch * queries * features), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t valid = lens.Row(b, i, queries);
      for (int64_t j = 0; j < (valid == 0 ? keys : valid); ++j) {
        const double w = weights[static_cast<size_t>((b * queries + i) * keys + j)];
        for (int64_t c = 0; c < features; ++c)
          out[static_cast<size_t>((b * queries + i) * features + c)] += w * value(b, j, c);
      }
    }
  return out;
}

// max |V| over its finite elements, for the outputs' tolerance.
double MaxAbs(const View& v, bool bf16) {
  double m = 0;
  v.ForEach([&](int64_t index, int64_t, int64_t, int64_t) {
    const float x = (*v.store)[index];
    if (std::isfinite(x)) m = std::max(m, static_cast<double>(std::fabs(bf16 ? RoundBf16(x) : x)));
  });
  return m;
}

// ---------------------------------------------------------------------------
// Engines: one per thread count and precision, created once.

std::unique_ptr<Engine> g_engines[2][2];  // [threads - 1][bf16]
std::vector<int64_t> g_targets;           // Highway targets the CPU and the ISA cap allow

void CreateEngines() {
  for (int threads = 1; threads <= 2; ++threads) {
    for (int bf16 = 0; bf16 <= 1; ++bf16) {
      EngineOptions options;
      options.threads = threads;
      options.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
      const Status s = Engine::Create(options, &g_engines[threads - 1][bf16]);
      if (!s.ok()) {
        std::fprintf(stderr, "ops_fuzzer: Engine::Create: %s\n", s.message().c_str());
        std::abort();
      }
    }
  }
  // After the first engine applied the process's cap ($ATTNSCORE_ISA).
  g_targets = hwy::SupportedAndGeneratedTargets();
  if (g_targets.empty()) std::abort();
}

// ---------------------------------------------------------------------------
// Invalid calls: every buffer of the case, before and after.

struct Snapshot {
  std::vector<std::vector<float>> buffers;
  explicit Snapshot(const Arena& arena) : buffers(arena.buffers.begin(), arena.buffers.end()) {}
  // Whether every buffer is bit for bit as it was; names the first that is not.
  void ExpectUnchanged(const Arena& arena, const char* what) const {
    size_t k = 0;
    for (const std::vector<float>& now : arena.buffers) {
      const std::vector<float>& was = buffers[k];
      if (std::memcmp(now.data(), was.data(), now.size() * sizeof(float)) != 0) {
        size_t i = 0;
        while (SameBits(now[i], was[i])) ++i;
        Fail(Format("%s: buffer %zu element %zu changed from %.9g to %.9g", what, k, i, was[i],
                    now[i]));
      }
      ++k;
    }
  }
};

// Elements of `v`'s buffer outside the view must be as `was` holds them.
void ExpectOutsideUnchanged(const View& v, const std::vector<float>& was, const char* name) {
  std::vector<uint8_t> in_view(v.store->size(), 0);
  v.ForEach([&](int64_t i, int64_t, int64_t, int64_t) { in_view[i] = 1; });
  for (size_t i = 0; i < in_view.size(); ++i) {
    if (!in_view[i] && !SameBits((*v.store)[i], was[i])) {
      Fail(Format("%s: element %zu of its buffer, outside the view %s, changed from %.9g to %.9g",
                  name, i, v.Describe().c_str(), was[i], (*v.store)[i]));
    }
  }
}

void ExpectRefused(const Status& s, const char* op, const std::string& broken) {
  if (s.ok()) Fail("a call with " + broken + " succeeded");
  if (s.code() != StatusCode::kInvalidArgument) {
    Fail("a call with " + broken + " returned " + attnscore::StatusCodeName(s.code()) +
         ", not invalid argument: " + s.message());
  }
  if (s.message().rfind(std::string(op) + ":", 0) != 0) {
    Fail("a call with " + broken + " was refused with a message that does not start with '" +
         op + ":': " + s.message());
  }
}

// One broken argument of an op call: the views as passed (a copy of the
// real ones, then broken) and the lengths.
struct Call {
  std::vector<std::pair<const char*, Tensor*>> inputs;   // read-only views
  std::vector<std::pair<const char*, Tensor*>> outputs;  // out first; weights when present
  ValidLens lens;
  // Set by Break: what it broke is an input or the lengths, in a way that
  // the op's Check method, which sees no outputs, must refuse as well.
  bool check_refuses = false;
};

// Breaks one argument of `call`; returns what was broken.
std::string Break(Input& in, Call& call, bool in_place_allowed) {
  std::vector<std::pair<const char*, Tensor*>> all = call.outputs;
  all.insert(all.end(), call.inputs.begin(), call.inputs.end());
  const int kind = in.Range<int>(0, 13);
  const size_t which = in.Range<size_t>(0, all.size() - 1);
  auto& [name, t] = all[which];
  const int d = in.Range<int>(0, t->rank - 1);
  // Null, rank, zero dims and negative strides of an input are its own faults.
  call.check_refuses = which >= call.outputs.size() && (kind == 1 || kind == 3 || kind == 4 ||
                                                        kind == 5);
  switch (kind) {
    case 0: {  // a dim that disagrees with the others
      const int64_t was = t->dims[d];
      t->dims[d] = was > 1 ? in.Range<int64_t>(1, was - 1) : was + in.Range<int64_t>(1, 3);
      return Format("%s dim %d %lld instead of %lld", name, d, (long long)t->dims[d],
                    (long long)was);
    }
    case 1:
      t->dims[d] = 0;
      return Format("%s dim %d 0", name, d);
    case 2:
      t->dims[d] = in.Bool() ? std::numeric_limits<int64_t>::max() / 3 : int64_t{1} << 40;
      return Format("%s dim %d %lld", name, d, (long long)t->dims[d]);
    case 3:
      if (in.Bool()) {
        t->rank = in.Bool() ? 2 : 4;
        t->dims[3] = 1;
        t->strides[3] = 1;
        return Format("%s of rank %d", name, t->rank);
      }
      t->rank = -1;  // dims and strides of different counts
      return Format("%s with dims and strides of different counts", name);
    case 4:
      t->data = nullptr;
      return Format("%s null", name);
    case 5:
      t->strides[d] = -in.Range<int64_t>(1, 4);
      return Format("%s stride %d negative", name, d);
    case 6:
    case 7: {  // an output over an input, or over the other output
      auto& [out_name, out] = call.outputs[in.Range<size_t>(0, call.outputs.size() - 1)];
      std::vector<std::pair<const char*, Tensor*>> others = call.inputs;
      for (auto& o : call.outputs) {
        if (o.second != out) others.push_back(o);
      }
      auto& [other_name, other] = others[in.Range<size_t>(0, others.size() - 1)];
      int64_t span = 0;
      for (int k = 0; k < other->rank; ++k) span += (other->dims[k] - 1) * other->strides[k];
      out->data = other->data + in.Range<int64_t>(0, span);
      // An exact in-place view is allowed where the op allows it; make it inexact.
      if (in_place_allowed && out->data == other->data) {
        if (span > 0) {
          out->data += 1;
        } else {
          out->strides[0] = other->strides[0] + 1;
        }
      }
      return Format("%s overlapping %s", out_name, other_name);
    }
    case 8: {  // output strides that map two elements to one address
      auto& [out_name, out] = call.outputs[in.Range<size_t>(0, call.outputs.size() - 1)];
      for (int k = 0; k < out->rank; ++k) {
        if (out->dims[k] >= 2) {
          out->strides[k] = 0;
          return Format("%s stride %d zero", out_name, k);
        }
      }
      out->data = nullptr;
      return Format("%s null", out_name);
    }
    default:
      break;
  }
  // The lengths.
  ValidLens& lens = call.lens;
  call.check_refuses = kind != 13;
  if (lens.kind == ValidLens::Kind::kNone) {
    call.check_refuses = true;
    static const int32_t one_length[1] = {1};
    lens = ValidLens::PerBatch(one_length, 1);  // the wrong batch size unless B is 1
    if (call.outputs[0].second->dims[0] == 1) {
      lens.dims[0] = 2;
    }
    return "valid_lens per batch of the wrong shape";
  }
  const int64_t count = lens.kind == ValidLens::Kind::kPerBatch ? lens.dims[0]
                                                                : lens.dims[0] * lens.dims[1];
  switch (kind) {
    case 9: {  // a negative length (the buffers are the case's own copies)
      const int64_t k = in.Range<int64_t>(0, count - 1);
      const int64_t value = in.Bool() ? -1 : -in.Range<int64_t>(2, 1 << 30);
      if (lens.is_int64) {
        const_cast<int64_t*>(static_cast<const int64_t*>(lens.data))[k] =
            in.Bool() ? std::numeric_limits<int64_t>::min() : value;
      } else {
        const_cast<int32_t*>(static_cast<const int32_t*>(lens.data))[k] =
            in.Bool() ? std::numeric_limits<int32_t>::min() : static_cast<int32_t>(value);
      }
      return Format("valid_lens[%lld] negative", (long long)k);
    }
    case 10:
      if (lens.kind == ValidLens::Kind::kPerBatch) {
        lens.dims[0] += in.Bool() ? 1 : -1;
      } else if (in.Bool()) {
        lens.dims[1] += in.Bool() ? 1 : -1;
      } else {
        lens.dims[0] += in.Bool() ? 1 : -1;
      }
      return "valid_lens of the wrong shape";
    case 11:
      lens.data = nullptr;
      return "valid_lens null";
    case 12:
      lens.kind = static_cast<ValidLens::Kind>(in.Range<int>(3, 100));
      return "valid_lens of an unknown kind";
    default: {  // lengths inside an output
      const size_t bytes = static_cast<size_t>(count) * (lens.is_int64 ? 8 : 4);
      for (auto& [out_name, out] : call.outputs) {
        int64_t span = 0;
        for (int k = 0; k < out->rank; ++k) span += (out->dims[k] - 1) * out->strides[k];
        // Aligned for the lengths' type, and readable: the output's sentinels,
        // read as lengths, are negative.
        const int64_t skip = lens.is_int64 && reinterpret_cast<uintptr_t>(out->data) % 8 ? 1 : 0;
        if (static_cast<size_t>(span + 1 - skip) * sizeof(float) >= bytes) {
          lens.data = out->data + skip;
          return Format("valid_lens inside %s", out_name);
        }
      }
      lens.data = nullptr;
      call.check_refuses = true;
      return "valid_lens null";
    }
  }
}

// Runs a broken call and checks its refusal: nothing anywhere changed. Then
// the op's Check method on the same inputs: a refusal of Check is one of the
// op's (it makes a subset of the op's checks), and Check must refuse what
// Break marked as its to see.
template <class Run, class CheckCall>
void CheckInvalid(Input& in, Arena& arena, Call& call, const char* op, bool in_place_allowed,
                  Run run, CheckCall check) {
  const std::string broken = Break(in, call, in_place_allowed);
  g_case += "; broken: " + broken;
  const Snapshot before(arena);
  const Status s = run(call);
  ExpectRefused(s, op, broken);
  before.ExpectUnchanged(arena, ("the refused call with " + broken).c_str());
  attnscore::OutputShapes shapes;
  const Status checked = check(call, &shapes);
  if (call.check_refuses && checked.ok()) Fail("the op's Check accepted " + broken);
  if (!checked.ok() && checked.code() != StatusCode::kInvalidArgument) {
    Fail(std::string("the op's Check returned ") + attnscore::StatusCodeName(checked.code()) +
         " for " + broken + ": " + checked.message());
  }
  before.ExpectUnchanged(arena, ("the op's Check with " + broken).c_str());
}

// A valid call's Check: OK, with the outputs' shapes.
void ExpectChecked(const Status& s, const attnscore::OutputShapes& shapes,
                   std::array<int64_t, 3> out, std::array<int64_t, 3> weights) {
  if (!s.ok()) Fail("the op's Check refused a valid call: " + s.message());
  if (shapes.out != out || shapes.attention_weights != weights) {
    Fail(Format("the op's Check gave shapes out (%lld, %lld, %lld), attention_weights (%lld, %lld, "
                "%lld); want (%lld, %lld, %lld), (%lld, %lld, %lld)",
                (long long)shapes.out[0], (long long)shapes.out[1], (long long)shapes.out[2],
                (long long)shapes.attention_weights[0], (long long)shapes.attention_weights[1],
                (long long)shapes.attention_weights[2], (long long)out[0], (long long)out[1],
                (long long)out[2], (long long)weights[0], (long long)weights[1],
                (long long)weights[2]));
  }
}

// Tensor copies of the views, for Call.
struct Tensors {
  std::deque<Tensor> t;
  Tensor* Of(const View& v) {
    t.push_back(v.tensor());
    return &t.back();
  }
};

const Engine& PickEngine(Input& in, bool allow_bf16, bool* bf16) {
  const int threads = in.Range<int>(1, 2);
  *bf16 = allow_bf16 && in.Bool();
  const int64_t target = g_targets[in.Range<size_t>(0, g_targets.size() - 1)];
  attnscore::kernels::SetDispatchTargets(target);
  g_case += Format("threads %d, %s, highway %s", threads, *bf16 ? "bf16" : "fp32",
                   hwy::TargetName(target));
  return *g_engines[threads - 1][*bf16 ? 1 : 0];
}

// ---------------------------------------------------------------------------
// The ops.

void FuzzMaskedSoftmax(Input& in, bool invalid) {
  bool bf16;
  const Engine& engine = PickEngine(in, false, &bf16);
  const bool wide = in.Range<int>(0, 7) == 0;
  const int64_t batch = in.Range<int64_t>(1, 4), queries = in.Range<int64_t>(1, wide ? 16 : 8),
                keys = in.Range<int64_t>(1, wide ? 300 : 64);
  Arena arena;
  const Lens lens = MakeLens(in, batch, queries, keys);
  const View x = MakeView(in, arena, 3, {batch, queries, keys}, true);
  // In place needs an x that is a valid output too (sections 1.6, 8.3).
  const bool in_place = !invalid && Writable(x) && in.Range<int>(0, 3) == 0;
  const View y = in_place ? x : MakeView(in, arena, 3, {batch, queries, keys}, false);
  g_case = Format("MaskedSoftmax x %s, y %s%s, lens %s; ", x.Describe().c_str(),
                  y.Describe().c_str(), in_place ? " (in place)" : "", lens.Describe().c_str()) +
           g_case;
  FillInput(in, x,
            [&](int64_t b, int64_t i, int64_t j) {
              const int64_t valid = lens.Row(b, i, queries);
              // Section 1.3: masked scores are never read.
              return valid == 0 || j < valid ? kReadByAll : kReadByNone;
            },
            [&] { return in.Value(8.0f); });
  if (!in_place) FillOutput(y);
  Lens lens_copy = lens;  // Break may write into the lengths
  const ValidLens valid_lens = lens_copy.view(batch, queries);

  if (invalid) {
    Tensors tensors;
    Call call;
    call.inputs = {{"x", tensors.Of(x)}};
    call.outputs = {{"y", tensors.Of(y)}};
    call.lens = valid_lens;
    CheckInvalid(
        in, arena, call, "MaskedSoftmax", /*in_place_allowed=*/true,
        [&](Call& c) {
          return engine.MaskedSoftmax(*c.inputs[0].second, c.lens, *c.outputs[0].second);
        },
        [&](Call& c, attnscore::OutputShapes* shapes) {
          return engine.CheckMaskedSoftmax(*c.inputs[0].second, c.lens, shapes);
        });
    return;
  }
  attnscore::OutputShapes shapes;
  ExpectChecked(engine.CheckMaskedSoftmax(x.tensor(), valid_lens, &shapes), shapes,
                {batch, queries, keys}, {batch, queries, keys});

  std::vector<double> scores(static_cast<size_t>(batch * queries * keys));
  x.ForEach([&](int64_t index, int64_t b, int64_t i, int64_t j) {
    scores[static_cast<size_t>((b * queries + i) * keys + j)] = (*x.store)[index];
  });
  const std::vector<double> expected = ReferenceSoftmax(scores, lens, batch, queries, keys);
  const std::vector<float> x_before = *x.store, y_before = *y.store;
  const Status s = engine.MaskedSoftmax(x.tensor(), valid_lens, y.tensor());
  if (!s.ok()) Fail("a valid call failed: " + s.message());
  CheckWeights("MaskedSoftmax", y, expected, lens, kWeightTolerance);
  ExpectOutsideUnchanged(y, y_before, "y");
  if (!in_place &&
      std::memcmp(x.store->data(), x_before.data(), x_before.size() * sizeof(float)) != 0) {
    Fail("x changed");
  }
}

// The inputs and outputs every attention op has: Q, K, V, out, optional weights.
struct Attention {
  int64_t batch = 1, queries = 1, keys = 1, key_rows = 1, out_features = 1;
  Lens lens;
  Reach reach;
  View q, k, v, out, weights;
  bool want_weights = false;
};

// The checks after a valid attention call: its weights, its outputs, nothing
// written outside the output views, no input changed.
struct AfterCall {
  std::vector<float> out_before, weights_before;
  std::vector<std::vector<float>> inputs_before;
  explicit AfterCall(const Attention& a) : out_before(*a.out.store) {
    if (a.want_weights) weights_before = *a.weights.store;
    for (const View* v : {&a.q, &a.k, &a.v}) inputs_before.push_back(*v->store);
  }
  void Check(const Attention& a) const {
    ExpectOutsideUnchanged(a.out, out_before, "out");
    if (a.want_weights) ExpectOutsideUnchanged(a.weights, weights_before, "attention_weights");
    const char* names[] = {"queries", "keys", "values"};
    int n = 0;
    for (const View* v : {&a.q, &a.k, &a.v}) {
      const std::vector<float>& was = inputs_before[static_cast<size_t>(n)];
      if (std::memcmp(v->store->data(), was.data(), was.size() * sizeof(float)) != 0) {
        Fail(std::string(names[n]) + " changed");
      }
      ++n;
    }
  }
};

std::string DescribeAttention(const char* op, const Attention& a) {
  return Format("%sq %s, k %s, v %s, out %s, ", op, a.q.Describe().c_str(),
                a.k.Describe().c_str(), a.v.Describe().c_str(), a.out.Describe().c_str()) +
         (a.want_weights ? "weights " + a.weights.Describe() : std::string("no weights")) +
         ", lens " + a.lens.Describe() + "; ";
}

// The views of an attention op: Q (B, N, q_features), K (B, key_rows,
// k_features), V (B, M, Dv), out (B, N, out_features), weights (B, N, M).
// `keys_masked`: K's rows are keys that the lengths mask (dot, additive);
// concat's K has a row per query instead.
void MakeAttention(Input& in, Arena& arena, Attention& a, int64_t q_features, int64_t k_features,
                   int64_t value_features, bool keys_masked) {
  a.lens = MakeLens(in, a.batch, a.queries, a.keys);
  a.reach = ReachOf(a.lens, a.batch, a.queries, a.keys);
  a.q = MakeView(in, arena, 3, {a.batch, a.queries, q_features}, true);
  a.k = MakeView(in, arena, 3, {a.batch, a.key_rows, k_features}, true);
  // V may be K itself, as inputs may share memory.
  const bool v_is_k = keys_masked && k_features == value_features && in.Range<int>(0, 7) == 0;
  a.v = v_is_k ? a.k : MakeView(in, arena, 3, {a.batch, a.keys, value_features}, true);
  a.out = MakeView(in, arena, 3, {a.batch, a.queries, a.out_features}, false);
  a.want_weights = in.Bool();
  if (a.want_weights) a.weights = MakeView(in, arena, 3, {a.batch, a.queries, a.keys}, false);
}

// `keys_masked`: K's rows are the keys the lengths mask (dot, additive), not
// one per query (concat). `nan_only`: masked positions get NaN, never ±Inf.
void FillAttentionInputs(Input& in, Attention& a, float qk_bound, float v_bound, bool keys_masked,
                         bool nan_only = false) {
  FillInput(in, a.q, All, [&] { return in.Value(qk_bound); });
  const auto key_need = [&](int64_t b, int64_t j, int64_t) {
    return keys_masked ? a.reach.key[static_cast<size_t>(b * a.keys + j)] : kReadByAll;
  };
  const auto value_need = [&](int64_t b, int64_t j, int64_t) {
    return a.reach.value[static_cast<size_t>(b * a.keys + j)];
  };
  if (a.v.store == a.k.store) {  // one buffer, read as keys and as values
    FillInput(in, a.k,
              [&](int64_t b, int64_t j, int64_t c) {
                return std::max(key_need(b, j, c), value_need(b, j, c));
              },
              [&] { return in.Value(std::min(qk_bound, v_bound)); }, nan_only);
  } else {
    FillInput(in, a.k, key_need, [&] { return in.Value(qk_bound); }, nan_only);
    FillInput(in, a.v, value_need, [&] { return in.Value(v_bound); }, nan_only);
  }
  FillOutput(a.out);
  if (a.want_weights) FillOutput(a.weights);
}

// A Call of the attention views, for Break.
Call CallOf(const Attention& a, Tensors& tensors, const ValidLens& lens) {
  Call call;
  call.inputs = {{"queries", tensors.Of(a.q)}, {"keys", tensors.Of(a.k)},
                 {"values", tensors.Of(a.v)}};
  call.outputs = {{"out", tensors.Of(a.out)}};
  if (a.want_weights) call.outputs.push_back({"attention_weights", tensors.Of(a.weights)});
  call.lens = lens;
  return call;
}

Tensor WeightsOf(const Call& c) { return c.outputs.size() > 1 ? *c.outputs[1].second : Tensor(); }

void FuzzDotProduct(Input& in, bool invalid) {
  bool bf16;
  const Engine& engine = PickEngine(in, true, &bf16);
  Attention a;
  a.batch = in.Range<int64_t>(1, 4);
  a.queries = in.Range<int64_t>(1, 8);
  a.keys = a.key_rows = in.Range<int64_t>(1, 64);
  const int64_t depth = in.Range<int64_t>(1, 32);
  a.out_features = in.Range<int64_t>(1, 32);
  Arena arena;
  MakeAttention(in, arena, a, depth, depth, a.out_features, /*keys_masked=*/true);
  // Scores of unit scale, as section 7's tolerances assume: |S| <= 32 / sqrt(D).
  const float qk_bound = std::min(2.0f, std::sqrt(32.0f / static_cast<float>(depth)));
  FillAttentionInputs(in, a, qk_bound, 8.0f, true);
  g_case = DescribeAttention("DotProductAttention ", a) + g_case;
  Lens lens_copy = a.lens;
  const ValidLens valid_lens = lens_copy.view(a.batch, a.queries);

  if (invalid) {
    Tensors tensors;
    Call call = CallOf(a, tensors, valid_lens);
    CheckInvalid(
        in, arena, call, "DotProductAttention", false,
        [&](Call& c) {
          return engine.DotProductAttention(*c.inputs[0].second, *c.inputs[1].second,
                                            *c.inputs[2].second, c.lens, *c.outputs[0].second,
                                            WeightsOf(c));
        },
        [&](Call& c, attnscore::OutputShapes* shapes) {
          return engine.CheckDotProductAttention(*c.inputs[0].second, *c.inputs[1].second,
                                                 *c.inputs[2].second, c.lens, shapes);
        });
    return;
  }
  attnscore::OutputShapes shapes;
  ExpectChecked(engine.CheckDotProductAttention(a.q.tensor(), a.k.tensor(), a.v.tensor(),
                                                valid_lens, &shapes),
                shapes, {a.batch, a.queries, a.out_features}, {a.batch, a.queries, a.keys});

  // bf16 rounds Q, K, V and W for the products, except on the row path
  // (docs/semantics.md section 2.3; the rule as ops/dot_product_paths.h has it).
  const bool row_path = a.queries <= 3 && a.q.strides[2] == 1 && a.k.strides[2] == 1 &&
                        a.v.strides[2] == 1 && a.out.strides[2] == 1;
  const bool rounded = bf16 && !row_path;
  auto read = [&](const View& t, int64_t b, int64_t r, int64_t c) -> double {
    const float x = t.Get(b, r, c);
    return rounded ? RoundBf16(x) : x;
  };
  std::vector<double> scores(static_cast<size_t>(a.batch * a.queries * a.keys), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(depth));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.queries; ++i)
      for (int64_t j = 0; j < a.reach.longest(b, a.keys); ++j) {
        double sum = 0;
        for (int64_t d = 0; d < depth; ++d) sum += read(a.q, b, i, d) * read(a.k, b, j, d);
        scores[static_cast<size_t>((b * a.queries + i) * a.keys + j)] = sum * scale;
      }
  const std::vector<double> weights =
      ReferenceSoftmax(scores, a.lens, a.batch, a.queries, a.keys);
  const double max_v = MaxAbs(a.v, rounded);

  const AfterCall after(a);
  const Status s = engine.DotProductAttention(a.q.tensor(), a.k.tensor(), a.v.tensor(), valid_lens,
                                              a.out.tensor(),
                                              a.want_weights ? a.weights.tensor() : Tensor());
  if (!s.ok()) Fail("a valid call failed: " + s.message());
  const char* path = rounded ? "dot bf16" : bf16 ? "dot bf16 row path" : "dot fp32";
  if (a.want_weights) CheckWeights(path, a.weights, weights, a.lens, kWeightTolerance);
  std::vector<double> out;
  double tolerance = kOutTolerance * (1 + max_v);
  if (rounded && a.want_weights) {
    // Section 7.3: the returned weights, rounded, times the rounded V.
    std::vector<double> returned(weights.size());
    a.weights.ForEach([&](int64_t index, int64_t b, int64_t i, int64_t j) {
      returned[static_cast<size_t>((b * a.queries + i) * a.keys + j)] =
          RoundBf16((*a.weights.store)[index]);
    });
    out = Mix(returned, a.lens, a.batch, a.queries, a.keys, a.out_features,
              [&](int64_t b, int64_t j, int64_t c) { return read(a.v, b, j, c); });
  } else {
    out = Mix(weights, a.lens, a.batch, a.queries, a.keys, a.out_features,
              [&](int64_t b, int64_t j, int64_t c) { return read(a.v, b, j, c); });
    if (rounded) tolerance = kBf16OutTolerance * (1 + max_v);  // W's rounding is not known
  }
  CheckOutputs(rounded && !a.want_weights ? "dot bf16 out, no weights" : path, a.out, out,
               std::vector<double>(out.size(), tolerance));
  after.Check(a);
}

// A model parameter (rank 1 or 2) in a view of its own, values within ±bound.
View MakeParam(Input& in, Arena& arena, std::initializer_list<int64_t> dims, float bound) {
  const View p = MakeView(in, arena, static_cast<int>(dims.size()), dims, true);
  FillInput(in, p, All, [&] { return in.Value(bound); });
  return p;
}

// Breaks one model parameter: a NaN or ±Inf in it (Create must refuse it
// and name it). Returns the parameter's view with the value planted.
void PlantNonFinite(Input& in, const View& p) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  const int64_t a = in.Range<int64_t>(0, p.dims[0] - 1), b = in.Range<int64_t>(0, p.dims[1] - 1);
  (*p.store)[p.Index(a, b)] = bad[in.Range<int>(0, 2)];
}

void FuzzAdditive(Input& in, bool invalid) {
  bool bf16;
  const Engine& engine = PickEngine(in, false, &bf16);
  Attention a;
  a.batch = in.Range<int64_t>(1, 4);
  a.queries = in.Range<int64_t>(1, 8);
  a.keys = a.key_rows = in.Range<int64_t>(1, 64);
  const int64_t q_size = in.Range<int64_t>(1, 32), k_size = in.Range<int64_t>(1, 32),
                hidden = in.Range<int64_t>(1, 32);
  a.out_features = in.Range<int64_t>(1, 32);
  // Projections up to ±11 (the fast tanh), or ±34 (Highway's tanh where both sides are large).
  const float input_bound = in.Bool() ? 6.0f : 2.0f;
  Arena arena;
  auto fan_in = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  const View w_q = MakeParam(in, arena, {hidden, q_size}, fan_in(q_size));
  const View w_k = MakeParam(in, arena, {hidden, k_size}, fan_in(k_size));
  const View w_v = MakeParam(in, arena, {1, hidden}, fan_in(hidden));
  g_case = Format("W_q %s, W_k %s, w_v %s, inputs within ±%g; ",
                  w_q.Describe().c_str(), w_k.Describe().c_str(), w_v.Describe().c_str(),
                  input_bound) + g_case;

  if (invalid && in.Range<int>(0, 3) == 0) {  // a model with a NaN or ±Inf weight
    const View* params[] = {&w_q, &w_k, &w_v};
    PlantNonFinite(in, *params[in.Range<int>(0, 2)]);
    std::unique_ptr<AdditiveAttention> model;
    const Snapshot before(arena);
    const Status s = AdditiveAttention::Create(w_q.tensor(), w_k.tensor(), w_v.tensor(), &model);
    ExpectRefused(s, "AdditiveAttention", "a non-finite weight");
    if (model) Fail("AdditiveAttention::Create refused a model but set it");
    before.ExpectUnchanged(arena, "AdditiveAttention::Create");
    return;
  }
  std::unique_ptr<AdditiveAttention> model;
  Status s = AdditiveAttention::Create(w_q.tensor(), w_k.tensor(), w_v.tensor(), &model);
  if (!s.ok()) Fail("AdditiveAttention::Create failed: " + s.message());

  MakeAttention(in, arena, a, q_size, k_size, a.out_features, /*keys_masked=*/true);
  FillAttentionInputs(in, a, input_bound, 8.0f, true, /*nan_only=*/true);
  g_case = DescribeAttention("AdditiveAttention ", a) + g_case;
  Lens lens_copy = a.lens;
  const ValidLens valid_lens = lens_copy.view(a.batch, a.queries);

  if (invalid) {
    Tensors tensors;
    Call call = CallOf(a, tensors, valid_lens);
    CheckInvalid(
        in, arena, call, "AdditiveAttention", false,
        [&](Call& c) {
          return model->Forward(engine, *c.inputs[0].second, *c.inputs[1].second,
                                *c.inputs[2].second, c.lens, *c.outputs[0].second, WeightsOf(c));
        },
        [&](Call& c, attnscore::OutputShapes* shapes) {
          return model->Check(*c.inputs[0].second, *c.inputs[1].second, *c.inputs[2].second,
                              c.lens, shapes);
        });
    return;
  }
  attnscore::OutputShapes shapes;
  ExpectChecked(model->Check(a.q.tensor(), a.k.tensor(), a.v.tensor(), valid_lens, &shapes),
                shapes, {a.batch, a.queries, a.out_features}, {a.batch, a.queries, a.keys});

  // docs/semantics.md section 3.2, literally.
  std::vector<double> scores(static_cast<size_t>(a.batch * a.queries * a.keys), 0.0);
  std::vector<double> qh(static_cast<size_t>(a.queries * hidden)),
      kh(static_cast<size_t>(a.keys * hidden));
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < a.queries; ++i)
      for (int64_t h = 0; h < hidden; ++h) {
        double sum = 0;
        for (int64_t d = 0; d < q_size; ++d) sum += double{w_q.Get(h, d)} * a.q.Get(b, i, d);
        qh[static_cast<size_t>(i * hidden + h)] = sum;
      }
    const int64_t longest = a.reach.longest(b, a.keys);
    for (int64_t j = 0; j < longest; ++j)
      for (int64_t h = 0; h < hidden; ++h) {
        double sum = 0;
        for (int64_t d = 0; d < k_size; ++d) sum += double{w_k.Get(h, d)} * a.k.Get(b, j, d);
        kh[static_cast<size_t>(j * hidden + h)] = sum;
      }
    for (int64_t i = 0; i < a.queries; ++i)
      for (int64_t j = 0; j < longest; ++j) {
        double sum = 0;
        for (int64_t h = 0; h < hidden; ++h) {
          sum += double{w_v.Get(0, h)} *
                 std::tanh(qh[static_cast<size_t>(i * hidden + h)] +
                           kh[static_cast<size_t>(j * hidden + h)]);
        }
        scores[static_cast<size_t>((b * a.queries + i) * a.keys + j)] = sum;
      }
  }
  const std::vector<double> weights =
      ReferenceSoftmax(scores, a.lens, a.batch, a.queries, a.keys);
  const std::vector<double> out =
      Mix(weights, a.lens, a.batch, a.queries, a.keys, a.out_features,
          [&](int64_t b, int64_t j, int64_t c) { return double{a.v.Get(b, j, c)}; });

  const AfterCall after(a);
  s = model->Forward(engine, a.q.tensor(), a.k.tensor(), a.v.tensor(), valid_lens, a.out.tensor(),
                     a.want_weights ? a.weights.tensor() : Tensor());
  if (!s.ok()) Fail("a valid call failed: " + s.message());
  if (a.want_weights) CheckWeights("additive", a.weights, weights, a.lens, kWeightTolerance);
  CheckOutputs("additive", a.out, out,
               std::vector<double>(out.size(), kOutTolerance * (1 + MaxAbs(a.v, false))));
  after.Check(a);
}

void FuzzConcat(Input& in, bool invalid) {
  bool bf16;
  const Engine& engine = PickEngine(in, false, &bf16);
  Attention a;
  a.batch = in.Range<int64_t>(1, 4);
  a.queries = a.key_rows = in.Range<int64_t>(1, 8);
  a.keys = in.Range<int64_t>(1, 64);  // V's rows, the model's M
  const int64_t q_size = in.Range<int64_t>(1, 16), k_size = in.Range<int64_t>(1, 16),
                v_size = in.Range<int64_t>(1, 32);
  a.out_features = in.Range<int64_t>(1, 32);
  Arena arena;
  const int64_t score_in = q_size + k_size, combine_in = q_size + v_size;
  const float score_bound = 1.0f / std::sqrt(static_cast<float>(score_in)),
              combine_bound = 1.0f / std::sqrt(static_cast<float>(combine_in));
  const View attn_w = MakeParam(in, arena, {a.keys, score_in}, score_bound);
  const View attn_b = MakeParam(in, arena, {a.keys}, score_bound);
  const View comb_w = MakeParam(in, arena, {a.out_features, combine_in}, combine_bound);
  const View comb_b = MakeParam(in, arena, {a.out_features}, combine_bound);
  g_case = Format("Dq %lld, attn.weight %s, attn.bias %s, attn_combine.weight %s, "
                  "attn_combine.bias %s; ",
                  (long long)q_size, attn_w.Describe().c_str(), attn_b.Describe().c_str(),
                  comb_w.Describe().c_str(), comb_b.Describe().c_str()) + g_case;

  if (invalid && in.Range<int>(0, 3) == 0) {  // a model with a NaN or ±Inf, or a wrong Dq
    const View* params[] = {&attn_w, &attn_b, &comb_w, &comb_b};
    int64_t query_size = q_size;
    if (in.Bool()) {
      PlantNonFinite(in, *params[in.Range<int>(0, 3)]);
    } else {
      query_size = in.Bool() ? -in.Range<int64_t>(0, 2)
                             : std::min(score_in, combine_in) + in.Range<int64_t>(0, 2);
    }
    std::unique_ptr<ConcatAttention> model;
    const Snapshot before(arena);
    const Status s = ConcatAttention::Create(query_size, attn_w.tensor(), attn_b.tensor(),
                                             comb_w.tensor(), comb_b.tensor(), &model);
    ExpectRefused(s, "ConcatAttention", "a non-finite weight or query size out of range");
    if (model) Fail("ConcatAttention::Create refused a model but set it");
    before.ExpectUnchanged(arena, "ConcatAttention::Create");
    return;
  }
  std::unique_ptr<ConcatAttention> model;
  Status s = ConcatAttention::Create(q_size, attn_w.tensor(), attn_b.tensor(), comb_w.tensor(),
                                     comb_b.tensor(), &model);
  if (!s.ok()) Fail("ConcatAttention::Create failed: " + s.message());

  MakeAttention(in, arena, a, q_size, k_size, v_size, /*keys_masked=*/false);
  FillAttentionInputs(in, a, 2.0f, 8.0f, false);
  g_case = DescribeAttention("ConcatAttention ", a) + g_case;
  Lens lens_copy = a.lens;
  const ValidLens valid_lens = lens_copy.view(a.batch, a.queries);

  if (invalid) {
    Tensors tensors;
    Call call = CallOf(a, tensors, valid_lens);
    CheckInvalid(
        in, arena, call, "ConcatAttention", false,
        [&](Call& c) {
          return model->Forward(engine, *c.inputs[0].second, *c.inputs[1].second,
                                *c.inputs[2].second, c.lens, *c.outputs[0].second, WeightsOf(c));
        },
        [&](Call& c, attnscore::OutputShapes* shapes) {
          return model->Check(*c.inputs[0].second, *c.inputs[1].second, *c.inputs[2].second,
                              c.lens, shapes);
        });
    return;
  }
  attnscore::OutputShapes shapes;
  ExpectChecked(model->Check(a.q.tensor(), a.k.tensor(), a.v.tensor(), valid_lens, &shapes),
                shapes, {a.batch, a.queries, a.out_features}, {a.batch, a.queries, a.keys});

  // docs/semantics.md section 4.2, literally; the output layer's tolerance as
  // section 7.1 states it (and tests/concat_test.cc computes it).
  std::vector<double> scores(static_cast<size_t>(a.batch * a.queries * a.keys));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.queries; ++i)
      for (int64_t m = 0; m < a.keys; ++m) {
        double sum = attn_b.Get(m);
        for (int64_t c = 0; c < q_size; ++c) sum += double{attn_w.Get(m, c)} * a.q.Get(b, i, c);
        for (int64_t c = 0; c < k_size; ++c)
          sum += double{attn_w.Get(m, q_size + c)} * a.k.Get(b, i, c);
        scores[static_cast<size_t>((b * a.queries + i) * a.keys + m)] = sum;
      }
  const std::vector<double> weights =
      ReferenceSoftmax(scores, a.lens, a.batch, a.queries, a.keys);
  const std::vector<double> applied =
      Mix(weights, a.lens, a.batch, a.queries, a.keys, v_size,
          [&](int64_t b, int64_t j, int64_t c) { return double{a.v.Get(b, j, c)}; });
  const double applied_tolerance = kOutTolerance * (1 + MaxAbs(a.v, false));
  std::vector<double> out(static_cast<size_t>(a.batch * a.queries * a.out_features));
  std::vector<double> tolerance(out.size());
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.queries; ++i)
      for (int64_t o = 0; o < a.out_features; ++o) {
        double sum = comb_b.Get(o), magnitude = std::fabs(comb_b.Get(o)), carried = 0;
        for (int64_t c = 0; c < combine_in; ++c) {
          const double w = comb_w.Get(o, c);
          const double x =
              c < q_size ? double{a.q.Get(b, i, c)}
                         : applied[static_cast<size_t>((b * a.queries + i) * v_size + c - q_size)];
          sum += w * x;
          magnitude += std::fabs(w * x);
          if (c >= q_size) carried += std::fabs(w) * applied_tolerance;
        }
        const size_t k = static_cast<size_t>((b * a.queries + i) * a.out_features + o);
        out[k] = sum;
        tolerance[k] = kLinearTolerance * magnitude + carried;
      }

  const AfterCall after(a);
  s = model->Forward(engine, a.q.tensor(), a.k.tensor(), a.v.tensor(), valid_lens, a.out.tensor(),
                     a.want_weights ? a.weights.tensor() : Tensor());
  if (!s.ok()) Fail("a valid call failed: " + s.message());
  if (a.want_weights) CheckWeights("concat", a.weights, weights, a.lens, kWeightTolerance);
  CheckOutputs("concat", a.out, out, tolerance);
  after.Check(a);
}

// Engine::Create with options it must refuse, leaving the pointer alone.
void FuzzEngineOptions(Input& in) {
  EngineOptions options;
  switch (in.Range<int>(0, 3)) {
    case 0: options.threads = -in.Range<int>(0, 1 << 20); break;
    case 1: options.threads = attnscore::kMaxThreads + in.Range<int>(1, 1 << 20); break;
    case 2: options.precision = static_cast<Precision>(in.Range<int>(2, 1000)); break;
    default: options.isa = static_cast<attnscore::Isa>(in.Range<int>(5, 1000)); break;
  }
  g_case = Format("Engine::Create threads %d precision %d isa %d", options.threads,
                  static_cast<int>(options.precision), static_cast<int>(options.isa));
  std::unique_ptr<Engine> engine;
  const Status s = Engine::Create(options, &engine);
  ExpectRefused(s, "Engine::Create", "bad options");
  if (engine) Fail("Engine::Create refused the options but set the engine");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto flag = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && *value != '\0' && *value != '0';
  };
  g_stats = flag("ATTNSCORE_OPS_FUZZ_STATS");
  g_nonfinite_masked |= flag("ATTNSCORE_OPS_FUZZ_NONFINITE_MASKED");
  g_verbose = flag("ATTNSCORE_OPS_FUZZ_VERBOSE");
  CreateEngines();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  g_case.clear();
  const int op = in.Range<int>(0, 3);
  // One call in six is broken; one in a hundred asks for a bad engine.
  const int mode = in.Range<int>(0, 99);
  const bool invalid = mode < 16;
  if (mode == 99) {
    FuzzEngineOptions(in);
  } else {
    switch (op) {
      case 0: FuzzMaskedSoftmax(in, invalid); break;
      case 1: FuzzDotProduct(in, invalid); break;
      case 2: FuzzAdditive(in, invalid); break;
      default: FuzzConcat(in, invalid); break;
    }
  }
  if (g_verbose) std::fprintf(stderr, "case: %s\n", g_case.c_str());
  return 0;
}
