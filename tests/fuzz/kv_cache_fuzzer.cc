// libFuzzer target: a KvCache (docs/semantics.md section 5.3), with or
// without a pool of blocks, through a run of appends to every sequence or to
// one, clears and attends that the input chooses, on 1 or 2 threads.
//
// The cache holds fp32, bf16 or int8 (KvCacheShape::precision); the shadow
// holds what it must: the values given, or each rounded to the nearest bf16
// (ties to even, written here from the format's definition); for int8 the
// values given, coded at each attend by the engine's own coder
// (kernels/int8.h, which tests/kv_cache_int8_test.cc checks against the
// docs' definition) in groups of positions as they stand. A shadow of each
// sequence's positions says what must happen. An append
// past a sequence's capacity or the pool's free blocks, to a sequence out of
// range, or a clear of one, must fail with kInvalidArgument and change
// nothing: lengths, blocks in use and what later attends give. A valid one
// must succeed. After every step each length equals the shadow's, and the
// blocks in use are Σ_b ceil(L_b / P) (0 without a pool). An attend must
// match the float64 reference below, written from section 5.3 (query i of
// sequence b sees keys 0 .. L_b − N + i, scaled by 1/√D, head h reading
// key-value head h / (Hq / Hkv)), within section 7's tolerances, and write
// zero weights past each sequence's own length; one whose sequences hold
// fewer than N positions must fail and write nothing. A bad pool (a block
// not whole pages, a number below 1) must be refused at Create. Anything
// else prints the case and aborts.
//
// Shapes stay small (B <= 3, Hkv <= 2, Hq <= 6, N <= 4, D and Dv 16 or 64,
// at most 3 blocks of positions a sequence) so that each input runs in
// about a millisecond.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attnscore/engine.h"
#include "attnscore/kv_cache.h"
#include "kernels/attention_row.h"
#include "kernels/int8.h"

namespace {

using attnscore::ConstTensor;
using attnscore::Engine;
using attnscore::EngineOptions;
using attnscore::KvCache;
using attnscore::KvCacheShape;
using attnscore::Precision;
using attnscore::Status;
using attnscore::StatusCode;
using attnscore::Tensor;

constexpr double kWeightTolerance = 1e-5;  // docs/semantics.md section 7.1
constexpr double kOutTolerance = 1e-5;     // times (1 + max|V|)
constexpr float kSentinel = -12345.0f;     // what a refused attend leaves

std::string g_case;  // the steps so far, printed when a check fails

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "kv_cache_fuzzer: %s\ncase: %s\n", what.c_str(), g_case.c_str());
  std::fflush(stderr);
  std::abort();
}

void ExpectRefused(const Status& status, const std::string& call) {
  if (status.ok() || status.code() != StatusCode::kInvalidArgument) {
    Fail(call + " should be refused with kInvalidArgument, got: " +
         (status.ok() ? std::string("ok") : status.message()));
  }
}

void ExpectOk(const Status& status, const std::string& call) {
  if (!status.ok()) Fail(call + " failed: " + status.message());
}

std::unique_ptr<Engine> MakeEngine(int threads) {
  EngineOptions options;
  options.threads = threads;
  std::unique_ptr<Engine> engine;
  if (!Engine::Create(options, &engine).ok()) std::abort();
  return engine;
}

// One engine per thread count, made once: an engine's set-up is not what
// is fuzzed.
const Engine& EngineFor(int threads) {
  static const std::unique_ptr<Engine> engines[2] = {MakeEngine(1), MakeEngine(2)};
  return *engines[threads - 1];
}

// What the cache should hold: each sequence's positions, keys (Hkv, D) and
// values (Hkv, Dv) each.
struct Shadow {
  KvCacheShape shape;
  std::vector<std::vector<float>> keys, values;  // per sequence, position-major

  int64_t length(int64_t b) const {
    return static_cast<int64_t>(keys[static_cast<size_t>(b)].size()) /
           (shape.kv_heads * shape.key_dim);
  }
  int64_t BlocksInUse() const {
    if (shape.block_positions == 0) return 0;
    int64_t blocks = 0;
    for (int64_t b = 0; b < shape.batch; ++b) {
      blocks += (length(b) + shape.block_positions - 1) / shape.block_positions;
    }
    return blocks;
  }
  // Whether T more positions for sequences [first, last) fit their
  // capacity and the pool.
  bool Fits(int64_t first, int64_t last, int64_t rows) const {
    int64_t needed = 0;
    for (int64_t b = first; b < last; ++b) {
      if (length(b) + rows > shape.capacity) return false;
      if (shape.block_positions > 0) {
        const int64_t p = shape.block_positions;
        needed += (length(b) + rows + p - 1) / p - (length(b) + p - 1) / p;
      }
    }
    return shape.block_positions == 0 || BlocksInUse() + needed <= shape.blocks;
  }
};

class Fuzz {
 public:
  Fuzz(const uint8_t* data, size_t size) : in_(data, size) {}

  void Run() {
    if (!MakeCache()) return;
    const int steps = in_.ConsumeIntegralInRange<int>(1, 12);
    for (int step = 0; step < steps; ++step) {
      switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
        case 0:
          AppendToEvery();
          break;
        case 1:
          AppendToOne();
          break;
        case 2:
          Clear();
          break;
        default:
          Attend();
          break;
      }
      CheckLengths();
    }
    Attend();
  }

 private:
  float Value() {
    return (static_cast<float>(in_.ConsumeIntegral<uint8_t>()) - 127.5f) / 127.5f * 3.0f;
  }
  std::vector<float> Values(int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = Value();
    return v;
  }

  bool MakeCache() {
    KvCacheShape& s = shadow_.shape;
    s.batch = in_.ConsumeIntegralInRange<int64_t>(1, 3);
    s.kv_heads = in_.ConsumeIntegralInRange<int64_t>(1, 2);
    group_ = in_.ConsumeIntegralInRange<int64_t>(1, 3);
    s.key_dim = in_.ConsumeBool() ? 16 : 64;
    s.value_dim = in_.ConsumeBool() ? 16 : 64;
    threads_ = in_.ConsumeBool() ? 2 : 1;
    const Precision precisions[] = {Precision::kFp32, Precision::kBf16, Precision::kInt8};
    s.precision = precisions[in_.ConsumeIntegralInRange<int>(0, 2)];
    // The fewest positions whose rows of D and of Dv elements are whole pages.
    const int64_t whole = KvCache::BlockPositionsMultiple(s.key_dim, s.value_dim, s.precision);
    if (in_.ConsumeBool()) {
      s.block_positions = whole * in_.ConsumeIntegralInRange<int64_t>(1, 2);
      s.blocks = in_.ConsumeIntegralInRange<int64_t>(1, 3 * s.batch);
      s.capacity = in_.ConsumeIntegralInRange<int64_t>(1, 3 * s.block_positions);
      // One pool in eight is bad, refused: its block is not whole pages (a
      // whole number of them plus a part), or a number is below 1.
      if (in_.ConsumeIntegralInRange<int>(0, 7) == 0) {
        KvCacheShape bad = s;
        switch (in_.ConsumeIntegralInRange<int>(0, 3)) {
          case 0:
            bad.block_positions += in_.ConsumeIntegralInRange<int64_t>(1, whole - 1);
            break;
          case 1:
            bad.block_positions = in_.ConsumeIntegralInRange<int64_t>(-2 * whole, -1);
            break;
          case 2:
            bad.blocks = in_.ConsumeIntegralInRange<int64_t>(-3, 0);
            break;
          default:
            bad.blocks = 0, bad.block_positions = whole;
            break;
        }
        std::unique_ptr<KvCache> refused;
        g_case += "create with block_positions " + std::to_string(bad.block_positions) +
                  " blocks " + std::to_string(bad.blocks) + "; ";
        ExpectRefused(KvCache::Create(bad, &refused), "Create");
        if (refused != nullptr) Fail("a refused Create made a cache");
        return false;
      }
    } else {
      s.capacity = in_.ConsumeIntegralInRange<int64_t>(1, 3 * whole);
    }
    g_case += "B " + std::to_string(s.batch) + " Hkv " + std::to_string(s.kv_heads) + " Hq " +
              std::to_string(s.kv_heads * group_) + " D " + std::to_string(s.key_dim) + " Dv " +
              std::to_string(s.value_dim) + " capacity " + std::to_string(s.capacity) +
              " block_positions " + std::to_string(s.block_positions) + " blocks " +
              std::to_string(s.blocks) + " threads " + std::to_string(threads_) + " " +
              PrecisionName(s.precision) + "; ";
    ExpectOk(KvCache::Create(s, &cache_), "Create");
    shadow_.keys.assign(static_cast<size_t>(s.batch), {});
    shadow_.values.assign(static_cast<size_t>(s.batch), {});
    return true;
  }

  // What the cache holds for `given`: the values, or each rounded to bf16.
  std::vector<float> Held(std::vector<float> given) const {
    if (shadow_.shape.precision != Precision::kBf16) return given;
    for (float& x : given) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof bits);
      const uint32_t low = bits & 0xFFFFu, kept = bits >> 16;
      const uint32_t word = kept + (low > 0x8000u || (low == 0x8000u && (kept & 1u) != 0));
      bits = word << 16;
      std::memcpy(&x, &bits, sizeof x);
    }
    return given;
  }

  // What an int8 cache's codes for sequence b's keys and values stand for
  // (the values held as given otherwise): keys per head in groups of
  // kCachedKeyGroup positions, values per position and head.
  std::vector<float> StoredKeys(int64_t b) const {
    std::vector<float> k = shadow_.keys[static_cast<size_t>(b)];
    const KvCacheShape& s = shadow_.shape;
    if (s.precision != Precision::kInt8) return k;
    const auto group = static_cast<int64_t>(attnscore::kernels::kCachedKeyGroup);
    const int64_t held = shadow_.length(b), row = s.kv_heads * s.key_dim;
    std::vector<uint8_t> codes(static_cast<size_t>(group * s.key_dim));
    std::vector<float> params(static_cast<size_t>(2 * s.key_dim));
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      for (int64_t first = 0; first < held; first += group) {
        const int64_t rows = std::min(group, held - first);
        float* keys = k.data() + first * row + h * s.key_dim;
        attnscore::kernels::CodeKeyGroup(keys, row, static_cast<size_t>(rows),
                                         static_cast<size_t>(s.key_dim), codes.data(),
                                         params.data());
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t d = 0; d < s.key_dim; ++d) {  // codes channel-major
            keys[t * row + d] =
                std::fma(params[static_cast<size_t>(s.key_dim + d)],
                         static_cast<float>(codes[static_cast<size_t>(d * group + t)]),
                         params[static_cast<size_t>(d)]);
          }
        }
      }
    }
    return k;
  }
  std::vector<float> StoredValues(int64_t b) const {
    std::vector<float> v = shadow_.values[static_cast<size_t>(b)];
    const KvCacheShape& s = shadow_.shape;
    if (s.precision != Precision::kInt8) return v;
    std::vector<int8_t> codes(static_cast<size_t>(s.value_dim));
    for (size_t first = 0; first < v.size(); first += static_cast<size_t>(s.value_dim)) {
      float scale = 0;
      attnscore::kernels::CodeValueRow(v.data() + first, 1, codes.size(), codes.data(), &scale);
      for (size_t c = 0; c < codes.size(); ++c) v[first + c] = scale * codes[c];
    }
    return v;
  }

  // Positions to append: a third past a block, at most.
  int64_t Rows() {
    const int64_t block = std::max<int64_t>(shadow_.shape.block_positions, 16);
    return in_.ConsumeIntegralInRange<int64_t>(1, block + block / 3);
  }

  void AppendToEvery() {
    const KvCacheShape& s = shadow_.shape;
    const int64_t rows = Rows();
    g_case += "append " + std::to_string(rows) + "; ";
    const std::vector<float> k = Values(s.batch * rows * s.kv_heads * s.key_dim);
    const std::vector<float> v = Values(s.batch * rows * s.kv_heads * s.value_dim);
    const std::vector<float> k_held = Held(k), v_held = Held(v);
    const Status status =
        cache_->Append(ConstTensor(k.data(), {s.batch, rows, s.kv_heads, s.key_dim}),
                       ConstTensor(v.data(), {s.batch, rows, s.kv_heads, s.value_dim}));
    if (!shadow_.Fits(0, s.batch, rows)) return ExpectRefused(status, "Append");
    ExpectOk(status, "Append");
    const size_t k_rows = static_cast<size_t>(rows * s.kv_heads * s.key_dim);
    const size_t v_rows = static_cast<size_t>(rows * s.kv_heads * s.value_dim);
    for (size_t b = 0; b < static_cast<size_t>(s.batch); ++b) {
      shadow_.keys[b].insert(shadow_.keys[b].end(), k_held.begin() + b * k_rows,
                             k_held.begin() + (b + 1) * k_rows);
      shadow_.values[b].insert(shadow_.values[b].end(), v_held.begin() + b * v_rows,
                               v_held.begin() + (b + 1) * v_rows);
    }
  }

  void AppendToOne() {
    const KvCacheShape& s = shadow_.shape;
    const int64_t b = in_.ConsumeIntegralInRange<int64_t>(-1, s.batch);  // -1 and B: out of range
    const int64_t rows = Rows();
    g_case += "append_to " + std::to_string(b) + " " + std::to_string(rows) + "; ";
    const std::vector<float> k = Values(rows * s.kv_heads * s.key_dim);
    const std::vector<float> v = Values(rows * s.kv_heads * s.value_dim);
    const Status status = cache_->AppendTo(b, ConstTensor(k.data(), {rows, s.kv_heads, s.key_dim}),
                                           ConstTensor(v.data(), {rows, s.kv_heads, s.value_dim}));
    if (b < 0 || b >= s.batch || !shadow_.Fits(b, b + 1, rows)) {
      return ExpectRefused(status, "AppendTo");
    }
    ExpectOk(status, "AppendTo");
    const std::vector<float> k_held = Held(k), v_held = Held(v);
    shadow_.keys[static_cast<size_t>(b)].insert(shadow_.keys[static_cast<size_t>(b)].end(),
                                                k_held.begin(), k_held.end());
    shadow_.values[static_cast<size_t>(b)].insert(shadow_.values[static_cast<size_t>(b)].end(),
                                                  v_held.begin(), v_held.end());
  }

  void Clear() {
    const int64_t b = in_.ConsumeIntegralInRange<int64_t>(-1, shadow_.shape.batch);
    g_case += "clear " + std::to_string(b) + "; ";
    const Status status = cache_->Clear(b);
    if (b < 0 || b >= shadow_.shape.batch) return ExpectRefused(status, "Clear");
    ExpectOk(status, "Clear");
    shadow_.keys[static_cast<size_t>(b)].clear();
    shadow_.values[static_cast<size_t>(b)].clear();
  }

  void CheckLengths() const {
    for (int64_t b = -1; b <= shadow_.shape.batch; ++b) {
      const int64_t want = b < 0 || b == shadow_.shape.batch ? 0 : shadow_.length(b);
      if (cache_->length(b) != want) {
        Fail("sequence " + std::to_string(b) + " holds " + std::to_string(cache_->length(b)) +
             " positions, not " + std::to_string(want));
      }
    }
    if (cache_->blocks_in_use() != shadow_.BlocksInUse()) {
      Fail("blocks in use " + std::to_string(cache_->blocks_in_use()) + ", not " +
           std::to_string(shadow_.BlocksInUse()));
    }
  }

  // N new queries per sequence, with or without the weights, against the
  // float64 reference.
  void Attend() {
    const KvCacheShape& s = shadow_.shape;
    const int64_t heads = s.kv_heads * group_, depth = s.key_dim, value_dim = s.value_dim;
    const int64_t queries = in_.ConsumeIntegralInRange<int64_t>(1, 4);
    const bool want_weights = in_.ConsumeBool();
    int64_t shortest = INT64_MAX, longest = 0;
    for (int64_t b = 0; b < s.batch; ++b) {
      shortest = std::min(shortest, shadow_.length(b));
      longest = std::max(longest, shadow_.length(b));
    }
    g_case += "attend " + std::to_string(queries) + (want_weights ? " with weights; " : "; ");
    const std::vector<float> q = Values(s.batch * queries * heads * depth);
    std::vector<float> out(static_cast<size_t>(s.batch * queries * heads * value_dim), kSentinel);
    const int64_t width = std::max<int64_t>(longest, 1);
    std::vector<float> weights(
        want_weights ? static_cast<size_t>(s.batch * heads * queries * width) : 0, kSentinel);
    const Status status = cache_->Attend(
        EngineFor(threads_), ConstTensor(q.data(), {s.batch, queries, heads, depth}),
        Tensor(out.data(), {s.batch, queries, heads, value_dim}),
        want_weights ? Tensor(weights.data(), {s.batch, heads, queries, width}) : Tensor());
    if (shortest < queries) {
      ExpectRefused(status, "Attend");
      for (float x : out) {
        if (x != kSentinel) Fail("a refused Attend wrote its output");
      }
      for (float x : weights) {
        if (x != kSentinel) Fail("a refused Attend wrote its weights");
      }
      return;
    }
    ExpectOk(status, "Attend");
    const double scale = 1.0 / std::sqrt(static_cast<double>(depth));
    double max_abs_v = 0;  // over the op's V: every sequence's values
    for (const std::vector<float>& v : shadow_.values) {
      for (float x : v) max_abs_v = std::max(max_abs_v, std::fabs(static_cast<double>(x)));
    }
    for (int64_t b = 0; b < s.batch; ++b) {
      const std::vector<float> k = StoredKeys(b), v = StoredValues(b);
      const int64_t held = shadow_.length(b);
      for (int64_t i = 0; i < queries; ++i) {
        const int64_t seen = held - queries + i + 1;  // keys 0 .. seen - 1
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t g = h / group_;
          const float* qr = q.data() + ((b * queries + i) * heads + h) * depth;
          std::vector<double> p(static_cast<size_t>(seen));
          double max = -INFINITY, sum = 0;
          for (int64_t j = 0; j < seen; ++j) {
            const float* kr = k.data() + (j * s.kv_heads + g) * depth;
            double dot = 0;
            for (int64_t d = 0; d < depth; ++d) dot += static_cast<double>(qr[d]) * kr[d];
            p[static_cast<size_t>(j)] = dot * scale;
            max = std::max(max, dot * scale);
          }
          for (double& x : p) sum += x = std::exp(x - max);
          for (double& x : p) x /= sum;
          const std::string where = "sequence " + std::to_string(b) + " query " +
                                    std::to_string(i) + " head " + std::to_string(h);
          for (int64_t c = 0; c < value_dim; ++c) {
            double want = 0;
            for (int64_t j = 0; j < seen; ++j) {
              want += p[static_cast<size_t>(j)] *
                      v[static_cast<size_t>((j * s.kv_heads + g) * value_dim + c)];
            }
            const float got =
                out[static_cast<size_t>(((b * queries + i) * heads + h) * value_dim + c)];
            if (!(std::fabs(got - want) <= kOutTolerance * (1 + max_abs_v))) {
              Fail(where + " column " + std::to_string(c) + ": out " + std::to_string(got) +
                   ", reference " + std::to_string(want));
            }
          }
          for (int64_t j = 0; want_weights && j < width; ++j) {
            const double want = j < seen ? p[static_cast<size_t>(j)] : 0.0;
            const float got =
                weights[static_cast<size_t>(((b * heads + h) * queries + i) * width + j)];
            if (j >= seen ? got != 0.0f : !(std::fabs(got - want) <= kWeightTolerance)) {
              Fail(where + " key " + std::to_string(j) + ": weight " + std::to_string(got) +
                   ", reference " + std::to_string(want));
            }
          }
        }
      }
    }
  }

  FuzzedDataProvider in_;
  Shadow shadow_;
  std::unique_ptr<KvCache> cache_;
  int64_t group_ = 1;  // query heads per key-value head
  int threads_ = 1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_case.clear();
  Fuzz(data, size).Run();
  return 0;
}
