// KvCache: each sequence's keys and values kept heads-first, (Hkv, capacity,
// D) per sequence, so that a head's cached keys are one contiguous block
// (read in one stream by decoding), and attention over them by the
// multi-head op on a strided view of the whole cache: floats, or bfloat16
// words (rounded once, as they are appended) that the op's decode form
// reads as they are.
#include "attnscore/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "api/engine_access.h"
#include "api/kv_cache_bytes.h"
#include "base/aligned_floats.h"
#include "base/call_scope.h"
#include "base/checks.h"
#include "kernels/bf16.h"
#include "ops/multihead.h"

namespace attnscore {
namespace {

constexpr const char* kOp = "KvCache";
using internal::CheckTensor;
using internal::kAnyDim;

// A count the checks work out in double, as a reader wants it: an integer,
// or past 2^53 (where a double stops counting one by one) three digits and
// an exponent.
std::string CountText(double count) {
  char text[32];
  std::snprintf(text, sizeof text, count < 9007199254740992.0 ? "%.0f" : "%.3g", count);
  return text;
}

// The pool's two numbers, once Create has found every dim at least 1 and
// B · capacity · Hkv · (D + Dv) at most 2^40: both 0 (no pool), or at
// least 1 each, a block of one head's keys or values whole pages, and with
// capacity rounded up to whole blocks still at most 2^40 floats.
Status CheckPoolShape(const KvCacheShape& shape) {
  const std::string call = "KvCache::Create: ";
  if (shape.block_positions == 0 && shape.blocks == 0) return Status::Ok();
  for (const auto& [name, size] :
       {std::pair{"block_positions", shape.block_positions}, std::pair{"blocks", shape.blocks}}) {
    if (size < 1) {
      return Status::InvalidArgument(call + name + " is " + std::to_string(size) +
                                     "; a pool needs at least 1 (or both 0 for none)");
    }
  }
  const int64_t multiple =
      KvCache::BlockPositionsMultiple(shape.key_dim, shape.value_dim, shape.precision);
  if (shape.block_positions % multiple != 0) {
    return Status::InvalidArgument(
        call + "block_positions is " + std::to_string(shape.block_positions) + "; a block of a " +
        "head's keys (D = " + std::to_string(shape.key_dim) + ") and of its values (Dv = " +
        std::to_string(shape.value_dim) + "), in " + PrecisionName(shape.precision) +
        ", must be whole " + std::to_string(internal::AlignedFloats::PageBytes()) +
        "-byte pages, so block_positions must be a multiple of " + std::to_string(multiple));
  }
  const double blocks_per_sequence =
      std::ceil(static_cast<double>(shape.capacity) / static_cast<double>(shape.block_positions));
  const double floats = static_cast<double>(shape.batch) * blocks_per_sequence *
                        static_cast<double>(shape.block_positions) *
                        static_cast<double>(shape.kv_heads) *
                        (static_cast<double>(shape.key_dim) + static_cast<double>(shape.value_dim));
  if (floats > 1099511627776.0) {
    return Status::InvalidArgument(call +
                                   "B · capacity rounded up to whole blocks · Hkv · (D + Dv) is " +
                                   CountText(floats) + " floats, more than 2^40");
  }
  return Status::Ok();
}

}  // namespace

struct KvCache::Storage {
  KvCacheShape shape;
  // Positions kept per head of a sequence: its capacity, rounded up to
  // whole blocks where there is a pool, so that every block is whole pages.
  int64_t positions = 0;
  // Bytes of one stored element: 4 (fp32) or 2 (bf16 words).
  int64_t element_bytes = 4;
  // (B, Hkv, positions, D) and (B, Hkv, positions, Dv) elements, on cache
  // lines and huge pages: with D a multiple of 16, no vector load of a row
  // splits a line (rows 16 bytes off a line made decoding's kernels a fifth
  // slower in cache). With a pool, reserved: pages take memory as positions
  // are written and give it back when their sequence is cleared.
  internal::AlignedFloats keys, values;
  std::vector<int64_t> lengths;  // (B)
  int64_t blocks_in_use = 0;     // Σ_b BlocksFor(lengths[b])

  bool pooled() const { return shape.block_positions > 0; }
  // The pool's blocks a sequence of `length` positions holds.
  int64_t BlocksFor(int64_t length) const {
    return pooled() ? (length + shape.block_positions - 1) / shape.block_positions : 0;
  }

  // The offset, in elements, of position t of head h of sequence b in an
  // array of `features` elements a position.
  int64_t Offset(int64_t b, int64_t h, int64_t t, int64_t features) const {
    return ((b * shape.kv_heads + h) * positions + t) * features;
  }
  // Where that position starts, as elements of type T.
  template <typename T>
  T* At(const internal::AlignedFloats& data, int64_t b, int64_t h, int64_t t,
        int64_t features) const {
    return reinterpret_cast<T*>(const_cast<float*>(data.data())) + Offset(b, h, t, features);
  }
  // The first `keys` positions of every sequence, (B, keys, Hkv, F) by strides.
  template <typename T>
  TensorView<const T> View(const internal::AlignedFloats& data, int64_t keys,
                           int64_t features) const {
    return TensorView<const T>(
        At<const T>(data, 0, 0, 0, features), {shape.batch, keys, shape.kv_heads, features},
        {shape.kv_heads * positions * features, features, positions * features, 1});
  }
  // Stores one position's `features` elements, `step` apart in `src`, at dst.
  void Store(const float* src, int64_t step, int64_t features, void* dst) const {
    if (element_bytes == 4) {
      auto* out = static_cast<float*>(dst);
      for (int64_t d = 0; d < features; ++d) out[d] = src[d * step];
      return;
    }
    // Rounded to bf16 a slice at a time, gathered into a buffer on the stack.
    auto* out = static_cast<uint16_t*>(dst);
    constexpr int64_t kSlice = 256;
    float gathered[kSlice];
    for (int64_t d0 = 0; d0 < features; d0 += kSlice) {
      const int64_t n = std::min(kSlice, features - d0);
      const float* from = src + d0 * step;
      if (step != 1) {
        for (int64_t d = 0; d < n; ++d) gathered[d] = from[d * step];
        from = gathered;
      }
      kernels::RoundToBf16(from, static_cast<size_t>(n), out + d0);
    }
  }
  // Copies keys (rows, Hkv, D) and values (rows, Hkv, Dv) of checked views
  // to sequence b's positions from its length on (rounded to bf16 where
  // the cache holds bf16).
  void Copy(int64_t b, const ConstTensor& k, const ConstTensor& v, int64_t k_offset,
            int64_t v_offset) {
    const int64_t rows = k.dims[k.rank - 3];
    const int s = k.rank - 3;  // the views' position dim
    const int64_t held = lengths[static_cast<size_t>(b)];
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        Store(k.data + k_offset + t * k.strides[s] + h * k.strides[s + 1], k.strides[s + 2],
              shape.key_dim, At<char>(keys, b, h, held + t, shape.key_dim * element_bytes));
        Store(v.data + v_offset + t * v.strides[s] + h * v.strides[s + 1], v.strides[s + 2],
              shape.value_dim, At<char>(values, b, h, held + t, shape.value_dim * element_bytes));
      }
    }
    lengths[static_cast<size_t>(b)] += rows;
  }
  Status CheckRoom(int64_t b, int64_t rows) const {
    const int64_t held = lengths[static_cast<size_t>(b)];
    if (rows > shape.capacity - held) {
      return Status::InvalidArgument(std::string(kOp) + ": sequence " + std::to_string(b) +
                                     " holds " + std::to_string(held) + " of its " +
                                     std::to_string(shape.capacity) + " positions; " +
                                     std::to_string(rows) + " more do not fit");
    }
    return Status::Ok();
  }
  // Takes from the pool the blocks `rows` more positions need, for every
  // sequence or for `only` (>= 0) alone, once CheckRoom has found they fit
  // each capacity; or, where too few are free, refuses, taking none.
  Status TakeBlocks(int64_t rows, int64_t only) {
    const int64_t first = only < 0 ? 0 : only, last = only < 0 ? shape.batch : only + 1;
    int64_t needed = 0;
    for (int64_t b = first; b < last; ++b) {
      const int64_t held = lengths[static_cast<size_t>(b)];
      needed += BlocksFor(held + rows) - BlocksFor(held);
    }
    if (needed > shape.blocks - blocks_in_use) {
      return Status::InvalidArgument(
          std::string(kOp) + ": the pool has " + std::to_string(shape.blocks - blocks_in_use) +
          " of its " + std::to_string(shape.blocks) + " blocks of " +
          std::to_string(shape.block_positions) + " positions free; appending " +
          std::to_string(rows) + " positions to " +
          (only < 0 ? std::string("every sequence") : "sequence " + std::to_string(only)) +
          " needs " + std::to_string(needed));
    }
    blocks_in_use += needed;
    return Status::Ok();
  }
};

KvCache::KvCache(std::unique_ptr<Storage> storage) : storage_(std::move(storage)) {}
KvCache::~KvCache() = default;

int64_t KvCache::BlockPositionsMultiple(int64_t key_dim, int64_t value_dim, Precision precision) {
  if (key_dim < 1 || value_dim < 1) return 0;
  const auto page = static_cast<int64_t>(internal::AlignedFloats::PageBytes());
  const int64_t bytes = precision == Precision::kBf16 ? 2 : 4;
  // The fewest positions whose rows of `features` elements are whole pages:
  // page / gcd(page, bytes · features). features is taken modulo the page:
  // bytes · (features mod page) ≡ bytes · features (mod page), and the
  // product stays below 4 · page, whatever the dim.
  const auto whole_pages = [page, bytes](int64_t features) {
    return page / std::gcd(page, (features % page) * bytes);
  };
  return std::lcm(whole_pages(key_dim), whole_pages(value_dim));
}

Status KvCache::Create(const KvCacheShape& shape, std::unique_ptr<KvCache>* cache) {
  if (cache == nullptr) return Status::InvalidArgument("KvCache::Create: cache is null");
  if (shape.precision != Precision::kFp32 && shape.precision != Precision::kBf16) {
    return Status::InvalidArgument("KvCache::Create: precision is " +
                                   std::to_string(static_cast<int>(shape.precision)) +
                                   ", not a Precision (fp32 or bf16)");
  }
  const std::pair<const char*, int64_t> dims[] = {{"batch", shape.batch},
                                                  {"capacity", shape.capacity},
                                                  {"kv_heads", shape.kv_heads},
                                                  {"key_dim", shape.key_dim},
                                                  {"value_dim", shape.value_dim}};
  // Each dim at least 1, and B · capacity · Hkv · (D + Dv) floats at most 2^40.
  double floats = static_cast<double>(shape.key_dim) + static_cast<double>(shape.value_dim);
  for (const auto& [name, size] : dims) {
    if (size < 1) {
      return Status::InvalidArgument(std::string("KvCache::Create: ") + name + " is " +
                                     std::to_string(size) + "; it must be at least 1");
    }
    if (name != std::string("key_dim") && name != std::string("value_dim")) {
      floats *= static_cast<double>(size);
    }
  }
  if (floats > 1099511627776.0) {
    return Status::InvalidArgument("KvCache::Create: B · capacity · Hkv · (D + Dv) is " +
                                   CountText(floats) + " floats, more than 2^40");
  }
  ATTNSCORE_RETURN_IF_ERROR(CheckPoolShape(shape));
  return internal::Guarded("KvCache::Create", [&] {
    auto storage = std::make_unique<Storage>();
    storage->shape = shape;
    const int64_t block = shape.block_positions;
    storage->positions = block > 0 ? (shape.capacity + block - 1) / block * block : shape.capacity;
    storage->element_bytes = shape.precision == Precision::kBf16 ? 2 : 4;
    // The floats whose bytes hold the elements.
    const auto floats_of = [&](int64_t features) {
      const int64_t elements = shape.batch * shape.kv_heads * storage->positions * features;
      return static_cast<size_t>((elements * storage->element_bytes + 3) / 4);
    };
    if (storage->pooled()) {
      storage->keys = internal::AlignedFloats::Reserved(floats_of(shape.key_dim));
      storage->values = internal::AlignedFloats::Reserved(floats_of(shape.value_dim));
    } else {
      storage->keys = internal::AlignedFloats(floats_of(shape.key_dim));
      storage->values = internal::AlignedFloats(floats_of(shape.value_dim));
    }
    storage->lengths.assign(static_cast<size_t>(shape.batch), 0);
    cache->reset(new KvCache(std::move(storage)));
    return Status::Ok();
  });
}

const KvCacheShape& KvCache::shape() const { return storage_->shape; }

int64_t KvCache::length(int64_t sequence) const {
  if (sequence < 0 || sequence >= storage_->shape.batch) return 0;
  return storage_->lengths[static_cast<size_t>(sequence)];
}

int64_t KvCache::blocks_in_use() const { return storage_->blocks_in_use; }

Status KvCache::Append(ConstTensor keys, ConstTensor values) {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {s.batch, kAnyDim, s.kv_heads, s.key_dim}, "(B, T, Hkv, D)"));
  const int64_t rows = keys.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(
      kOp, "values", values, {s.batch, rows, s.kv_heads, s.value_dim}, "(B, T, Hkv, Dv)"));
  for (int64_t b = 0; b < s.batch; ++b) ATTNSCORE_RETURN_IF_ERROR(storage_->CheckRoom(b, rows));
  ATTNSCORE_RETURN_IF_ERROR(storage_->TakeBlocks(rows, /*only=*/-1));
  for (int64_t b = 0; b < s.batch; ++b) {
    storage_->Copy(b, keys, values, b * keys.strides[0], b * values.strides[0]);
  }
  return Status::Ok();
}

Status KvCache::AppendTo(int64_t sequence, ConstTensor keys, ConstTensor values) {
  const KvCacheShape& s = storage_->shape;
  if (sequence < 0 || sequence >= s.batch) {
    return Status::InvalidArgument(std::string(kOp) + ": sequence is " + std::to_string(sequence) +
                                   "; the cache has sequences 0.." + std::to_string(s.batch - 1));
  }
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {kAnyDim, s.kv_heads, s.key_dim}, "(T, Hkv, D)"));
  const int64_t rows = keys.dims[0];
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "values", values, {rows, s.kv_heads, s.value_dim}, "(T, Hkv, Dv)"));
  ATTNSCORE_RETURN_IF_ERROR(storage_->CheckRoom(sequence, rows));
  ATTNSCORE_RETURN_IF_ERROR(storage_->TakeBlocks(rows, sequence));
  storage_->Copy(sequence, keys, values, 0, 0);
  return Status::Ok();
}

Status KvCache::Clear(int64_t sequence) {
  if (sequence < 0 || sequence >= storage_->shape.batch) {
    return Status::InvalidArgument(std::string(kOp) + ": sequence is " + std::to_string(sequence) +
                                   "; the cache has sequences 0.." +
                                   std::to_string(storage_->shape.batch - 1));
  }
  Storage& s = *storage_;
  const int64_t held = s.lengths[static_cast<size_t>(sequence)];
  if (s.pooled()) {
    // Its blocks' pages, head by head: whole pages, as CheckPoolShape made them.
    const int64_t written = s.BlocksFor(held) * s.shape.block_positions;
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      s.keys.Discard(
          static_cast<size_t>(s.Offset(sequence, h, 0, s.shape.key_dim) * s.element_bytes / 4),
          static_cast<size_t>(written * s.shape.key_dim * s.element_bytes / 4));
      s.values.Discard(
          static_cast<size_t>(s.Offset(sequence, h, 0, s.shape.value_dim) * s.element_bytes / 4),
          static_cast<size_t>(written * s.shape.value_dim * s.element_bytes / 4));
    }
    s.blocks_in_use -= s.BlocksFor(held);
  }
  s.lengths[static_cast<size_t>(sequence)] = 0;
  return Status::Ok();
}

Status KvCache::Attend(const Engine& engine, ConstTensor queries, Tensor out,
                       Tensor attention_weights) const {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "queries", queries,
                                        {s.batch, kAnyDim, kAnyDim, s.key_dim}, "(B, N, Hq, D)"));
  if (queries.dims[2] % s.kv_heads != 0) {
    return Status::InvalidArgument(std::string(kOp) + ": queries " + ShapeString(queries) +
                                   " have " + std::to_string(queries.dims[2]) +
                                   " heads; the cache's " + std::to_string(s.kv_heads) +
                                   " key-value heads must divide them");
  }
  const int64_t queries_per_sequence = queries.dims[1];
  int64_t longest = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t held = storage_->lengths[static_cast<size_t>(b)];
    if (held < queries_per_sequence) {
      return Status::InvalidArgument(
          std::string(kOp) + ": sequence " + std::to_string(b) + " holds " + std::to_string(held) +
          " positions but queries " + ShapeString(queries) + " are its newest " +
          std::to_string(queries_per_sequence) + "; append their keys and values first");
    }
    longest = std::max(longest, held);
  }
  // Query i of sequence b sees its keys 0 .. L_b − N + i: per-query lengths.
  return internal::RunCall(
      internal::EngineAccess::Context(engine), kOp, [&](const internal::CallContext& call) {
        int64_t* const lengths =
            call.workspace.Words(internal::IndexSlot::kCacheLengths,
                                 static_cast<size_t>(s.batch * queries_per_sequence));
        for (int64_t b = 0; b < s.batch; ++b) {
          for (int64_t i = 0; i < queries_per_sequence; ++i) {
            lengths[b * queries_per_sequence + i] =
                storage_->lengths[static_cast<size_t>(b)] - queries_per_sequence + i + 1;
          }
        }
        const ValidLens lens = ValidLens::PerQuery(lengths, s.batch, queries_per_sequence);
        if (s.precision == Precision::kBf16) {
          return ops::CachedAttentionBf16(
              call, kOp, queries, storage_->View<uint16_t>(storage_->keys, longest, s.key_dim),
              storage_->View<uint16_t>(storage_->values, longest, s.value_dim), lens, out,
              attention_weights);
        }
        return ops::MultiHeadAttention(
            call, kOp, queries, storage_->View<float>(storage_->keys, longest, s.key_dim),
            storage_->View<float>(storage_->values, longest, s.value_dim), lens, MultiHeadOptions(),
            out, attention_weights);
      });
}

std::vector<std::pair<const void*, size_t>> internal::KvCacheBytes::Held(const KvCache& cache) {
  const KvCache::Storage& s = *cache.storage_;
  std::vector<std::pair<const void*, size_t>> spans;
  for (int64_t b = 0; b < s.shape.batch; ++b) {
    const auto held = static_cast<size_t>(s.lengths[static_cast<size_t>(b)] * s.element_bytes);
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      spans.emplace_back(s.At<char>(s.keys, b, h, 0, s.shape.key_dim * s.element_bytes),
                         held * static_cast<size_t>(s.shape.key_dim));
    }
    for (int64_t h = 0; h < s.shape.kv_heads; ++h) {
      spans.emplace_back(s.At<char>(s.values, b, h, 0, s.shape.value_dim * s.element_bytes),
                         held * static_cast<size_t>(s.shape.value_dim));
    }
  }
  return spans;
}

}  // namespace attnscore
