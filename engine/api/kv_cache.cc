// KvCache: each sequence's keys and values kept heads-first, (Hkv, capacity,
// D) per sequence, so that a head's cached keys are one contiguous block
// (read in one stream by decoding), and attention over them by the
// multi-head op on a strided view of the whole cache.
#include "attnscore/kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "base/aligned_floats.h"
#include "base/call_scope.h"
#include "base/checks.h"

namespace attnscore {
namespace {

constexpr const char* kOp = "KvCache";
using internal::CheckTensor;
using internal::kAnyDim;

}  // namespace

struct KvCache::Storage {
  KvCacheShape shape;
  // (B, Hkv, capacity, D) and (B, Hkv, capacity, Dv), on cache lines and
  // huge pages: with D a multiple of 16, no vector load of a row splits a
  // line (rows 16 bytes off a line made decoding's kernels a fifth slower
  // in cache).
  internal::AlignedFloats keys, values;
  std::vector<int64_t> lengths;  // (B)

  // Where position t of head h of sequence b starts.
  float* key(int64_t b, int64_t h, int64_t t) {
    return keys.data() + ((b * shape.kv_heads + h) * shape.capacity + t) * shape.key_dim;
  }
  float* value(int64_t b, int64_t h, int64_t t) {
    return values.data() + ((b * shape.kv_heads + h) * shape.capacity + t) * shape.value_dim;
  }
  // The first `keys` positions of every sequence, (B, keys, Hkv, F) by strides.
  ConstTensor View(const internal::AlignedFloats& data, int64_t keys, int64_t features) const {
    return ConstTensor(
        data.data(), {shape.batch, keys, shape.kv_heads, features},
        {shape.kv_heads * shape.capacity * features, features, shape.capacity * features, 1});
  }
  // Copies keys (rows, Hkv, D) and values (rows, Hkv, Dv) of checked views
  // to sequence b's positions from its length on.
  void Copy(int64_t b, const ConstTensor& k, const ConstTensor& v, int64_t k_offset,
            int64_t v_offset) {
    const int64_t rows = k.dims[k.rank - 3];
    const int s = k.rank - 3;  // the views' position dim
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        const float* src_k = k.data + k_offset + t * k.strides[s] + h * k.strides[s + 1];
        float* dst_k = key(b, h, lengths[static_cast<size_t>(b)] + t);
        for (int64_t d = 0; d < shape.key_dim; ++d) dst_k[d] = src_k[d * k.strides[s + 2]];
        const float* src_v = v.data + v_offset + t * v.strides[s] + h * v.strides[s + 1];
        float* dst_v = value(b, h, lengths[static_cast<size_t>(b)] + t);
        for (int64_t d = 0; d < shape.value_dim; ++d) dst_v[d] = src_v[d * v.strides[s + 2]];
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
};

KvCache::KvCache(std::unique_ptr<Storage> storage) : storage_(std::move(storage)) {}
KvCache::~KvCache() = default;

Status KvCache::Create(const KvCacheShape& shape, std::unique_ptr<KvCache>* cache) {
  if (cache == nullptr) return Status::InvalidArgument("KvCache::Create: cache is null");
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
                                   std::to_string(floats) + " floats, more than 2^40");
  }
  return internal::Guarded("KvCache::Create", [&] {
    auto storage = std::make_unique<Storage>();
    storage->shape = shape;
    storage->keys = internal::AlignedFloats(
        static_cast<size_t>(shape.batch * shape.kv_heads * shape.capacity * shape.key_dim));
    storage->values = internal::AlignedFloats(
        static_cast<size_t>(shape.batch * shape.kv_heads * shape.capacity * shape.value_dim));
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

Status KvCache::Append(ConstTensor keys, ConstTensor values) {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(
      CheckTensor(kOp, "keys", keys, {s.batch, kAnyDim, s.kv_heads, s.key_dim}, "(B, T, Hkv, D)"));
  const int64_t rows = keys.dims[1];
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(
      kOp, "values", values, {s.batch, rows, s.kv_heads, s.value_dim}, "(B, T, Hkv, Dv)"));
  for (int64_t b = 0; b < s.batch; ++b) ATTNSCORE_RETURN_IF_ERROR(storage_->CheckRoom(b, rows));
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
  storage_->Copy(sequence, keys, values, 0, 0);
  return Status::Ok();
}

Status KvCache::Clear(int64_t sequence) {
  if (sequence < 0 || sequence >= storage_->shape.batch) {
    return Status::InvalidArgument(std::string(kOp) + ": sequence is " + std::to_string(sequence) +
                                   "; the cache has sequences 0.." +
                                   std::to_string(storage_->shape.batch - 1));
  }
  storage_->lengths[static_cast<size_t>(sequence)] = 0;
  return Status::Ok();
}

Status KvCache::Attend(const Engine& engine, ConstTensor queries, Tensor out,
                       Tensor attention_weights) const {
  const KvCacheShape& s = storage_->shape;
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(kOp, "queries", queries,
                                        {s.batch, kAnyDim, kAnyDim, s.key_dim}, "(B, N, Hq, D)"));
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
  return internal::Guarded(kOp, [&] {
    thread_local std::vector<int64_t> lengths;
    lengths.resize(static_cast<size_t>(s.batch * queries_per_sequence));
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t i = 0; i < queries_per_sequence; ++i) {
        lengths[static_cast<size_t>(b * queries_per_sequence + i)] =
            storage_->lengths[static_cast<size_t>(b)] - queries_per_sequence + i + 1;
      }
    }
    return engine.MultiHeadAttention(
        queries, storage_->View(storage_->keys, longest, s.key_dim),
        storage_->View(storage_->values, longest, s.value_dim),
        ValidLens::PerQuery(lengths.data(), s.batch, queries_per_sequence), MultiHeadOptions(),
        out, attention_weights);
  });
}

}  // namespace attnscore
