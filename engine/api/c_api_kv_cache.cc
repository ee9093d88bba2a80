// The C API's KV cache (attnscore/c_api.h) over attnscore::KvCache.
#include <memory>
#include <string>

#include "api/c_api_internal.h"
#include "attnscore/c_api.h"
#include "attnscore/kv_cache.h"

struct attnscore_kv_cache {
  std::unique_ptr<attnscore::KvCache> cache;
};

namespace {

using attnscore::ConstTensor;
using attnscore::Status;
using attnscore::Tensor;
using attnscore::c_api::Guarded;
using attnscore::c_api::HeadFloats;
using attnscore::c_api::In;
using attnscore::c_api::Invalid;
using attnscore::c_api::Out;
using attnscore::c_api::ToC;

// Both create calls, each refusing under its own name.
attnscore_status* CreateKvCache(const char* call, const attnscore::KvCacheShape& shape,
                                attnscore_kv_cache** cache) {
  if (cache == nullptr) return Invalid(call, "cache is null");
  return Guarded(call, [&] {
    auto handle = std::make_unique<attnscore_kv_cache>();
    ATTNSCORE_RETURN_IF_ERROR(attnscore::KvCache::Create(shape, &handle->cache));
    *cache = handle.release();
    return Status::Ok();
  });
}

attnscore::KvCacheShape KvCacheShapeOf(int64_t batch, int64_t capacity, int64_t kv_heads,
                                       int64_t key_dim, int64_t value_dim) {
  attnscore::KvCacheShape shape;
  shape.batch = batch, shape.capacity = capacity, shape.kv_heads = kv_heads;
  shape.key_dim = key_dim, shape.value_dim = value_dim;
  return shape;
}

// One count per sequence of the cache, B contiguous int64.
attnscore::TensorView<const int64_t> Counts(const attnscore_kv_cache& cache,
                                            const int64_t* counts) {
  return attnscore::TensorView<const int64_t>(counts, {cache.cache->shape().batch});
}

// `call`'s options as the C++ ones (NULL: the defaults); a `windowed`
// outside 0 and 1 is refused naming `call`.
Status AttendOptionsOf(const char* call, const attnscore_kv_cache_attend_options* options,
                       const attnscore_tensor_view* queries, attnscore::KvCacheAttendOptions* out) {
  *out = attnscore::KvCacheAttendOptions();
  if (options == nullptr) return Status::Ok();
  out->scale = options->scale, out->softcap = options->softcap;
  out->sinks = HeadFloats(options->sinks, queries);
  out->alibi_slopes = HeadFloats(options->alibi_slopes, queries);
  if (options->bias != nullptr) out->bias = In(options->bias);
  if (options->windowed != 0 && options->windowed != 1) {
    return Status::InvalidArgument(std::string(call) + ": options->windowed is " +
                                   std::to_string(options->windowed) + "; want 0 or 1");
  }
  if (options->windowed == 1) out->window = {options->window_left, -1};
  return Status::Ok();
}

}  // namespace

extern "C" {

attnscore_status* attnscore_kv_cache_create(int64_t batch, int64_t capacity, int64_t kv_heads,
                                            int64_t key_dim, int64_t value_dim,
                                            attnscore_kv_cache** cache) {
  return CreateKvCache("attnscore_kv_cache_create",
                       KvCacheShapeOf(batch, capacity, kv_heads, key_dim, value_dim), cache);
}

attnscore_status* attnscore_kv_cache_create_pooled(int64_t batch, int64_t capacity,
                                                   int64_t kv_heads, int64_t key_dim,
                                                   int64_t value_dim, int64_t block_positions,
                                                   int64_t blocks, attnscore_kv_cache** cache) {
  attnscore::KvCacheShape shape = KvCacheShapeOf(batch, capacity, kv_heads, key_dim, value_dim);
  shape.block_positions = block_positions, shape.blocks = blocks;
  return CreateKvCache("attnscore_kv_cache_create_pooled", shape, cache);
}

int64_t attnscore_kv_cache_block_positions_multiple(int64_t key_dim, int64_t value_dim) {
  return attnscore::KvCache::BlockPositionsMultiple(key_dim, value_dim);
}

attnscore_status* attnscore_kv_cache_create_shaped(const attnscore_kv_cache_shape* shape,
                                                   attnscore_kv_cache** cache) {
  if (shape == nullptr) return Invalid("attnscore_kv_cache_create_shaped", "shape is null");
  attnscore::KvCacheShape cpp = KvCacheShapeOf(shape->batch, shape->capacity, shape->kv_heads,
                                               shape->key_dim, shape->value_dim);
  cpp.block_positions = shape->block_positions, cpp.blocks = shape->blocks;
  cpp.precision = static_cast<attnscore::Precision>(shape->precision);  // Create checks it
  return CreateKvCache("attnscore_kv_cache_create_shaped", cpp, cache);
}

int64_t attnscore_kv_cache_block_positions_multiple_in(int64_t key_dim, int64_t value_dim,
                                                       int32_t precision) {
  if (precision < ATTNSCORE_FP32 || precision > ATTNSCORE_INT8) return 0;
  return attnscore::KvCache::BlockPositionsMultiple(key_dim, value_dim,
                                                    static_cast<attnscore::Precision>(precision));
}

void attnscore_kv_cache_destroy(attnscore_kv_cache* cache) { delete cache; }

int64_t attnscore_kv_cache_blocks_in_use(const attnscore_kv_cache* cache) {
  return cache == nullptr ? 0 : cache->cache->blocks_in_use();
}

int64_t attnscore_kv_cache_length(const attnscore_kv_cache* cache, int64_t sequence) {
  return cache ? cache->cache->length(sequence) : 0;
}

attnscore_status* attnscore_kv_cache_append(attnscore_kv_cache* cache,
                                            const attnscore_tensor_view* keys,
                                            const attnscore_tensor_view* values) {
  constexpr const char* kCall = "attnscore_kv_cache_append";
  if (cache == nullptr || keys == nullptr || values == nullptr) {
    return Invalid(kCall, "cache, keys and values must not be null");
  }
  return Guarded(kCall, [&] { return cache->cache->Append(In(keys), In(values)); });
}

attnscore_status* attnscore_kv_cache_append_to(attnscore_kv_cache* cache, int64_t sequence,
                                               const attnscore_tensor_view* keys,
                                               const attnscore_tensor_view* values) {
  constexpr const char* kCall = "attnscore_kv_cache_append_to";
  if (cache == nullptr || keys == nullptr || values == nullptr) {
    return Invalid(kCall, "cache, keys and values must not be null");
  }
  return Guarded(kCall, [&] { return cache->cache->AppendTo(sequence, In(keys), In(values)); });
}

attnscore_status* attnscore_kv_cache_clear(attnscore_kv_cache* cache, int64_t sequence) {
  if (cache == nullptr) return Invalid("attnscore_kv_cache_clear", "cache is null");
  return Guarded("attnscore_kv_cache_clear", [&] { return cache->cache->Clear(sequence); });
}

attnscore_status* attnscore_kv_cache_attend(const attnscore_kv_cache* cache,
                                            const attnscore_engine* engine,
                                            const attnscore_tensor_view* queries,
                                            const attnscore_tensor* out,
                                            const attnscore_tensor* attention_weights) {
  constexpr const char* kCall = "attnscore_kv_cache_attend";
  if (cache == nullptr || engine == nullptr)
    return Invalid(kCall, "cache and engine must not be null");
  if (queries == nullptr || out == nullptr)
    return Invalid(kCall, "queries and out must not be null");
  return Guarded(kCall, [&] {
    return cache->cache->Attend(*engine->engine, In(queries), Out(out), Out(attention_weights));
  });
}

attnscore_status* attnscore_kv_cache_attend_with_options(
    const attnscore_kv_cache* cache, const attnscore_engine* engine,
    const attnscore_tensor_view* queries, const attnscore_kv_cache_attend_options* options,
    const attnscore_tensor* out, const attnscore_tensor* attention_weights) {
  constexpr const char* kCall = "attnscore_kv_cache_attend_with_options";
  if (cache == nullptr || engine == nullptr)
    return Invalid(kCall, "cache and engine must not be null");
  if (queries == nullptr || out == nullptr)
    return Invalid(kCall, "queries and out must not be null");
  attnscore::KvCacheAttendOptions cpp;
  const Status options_ok = AttendOptionsOf(kCall, options, queries, &cpp);
  if (!options_ok.ok()) return ToC(options_ok);
  return Guarded(kCall, [&] {
    return cache->cache->Attend(*engine->engine, In(queries), cpp, Out(out),
                                Out(attention_weights));
  });
}

attnscore_status* attnscore_kv_cache_append_packed(attnscore_kv_cache* cache,
                                                   const attnscore_tensor_view* keys,
                                                   const attnscore_tensor_view* values,
                                                   const int64_t* counts) {
  constexpr const char* kCall = "attnscore_kv_cache_append_packed";
  if (cache == nullptr || keys == nullptr || values == nullptr || counts == nullptr) {
    return Invalid(kCall, "cache, keys, values and counts must not be null");
  }
  return Guarded(kCall, [&] {
    return cache->cache->AppendPacked(In(keys), In(values), Counts(*cache, counts));
  });
}

attnscore_status* attnscore_kv_cache_attend_packed(const attnscore_kv_cache* cache,
                                                   const attnscore_engine* engine,
                                                   const attnscore_tensor_view* queries,
                                                   const int64_t* query_counts,
                                                   const attnscore_kv_cache_attend_options* options,
                                                   const attnscore_tensor* out) {
  constexpr const char* kCall = "attnscore_kv_cache_attend_packed";
  if (cache == nullptr || engine == nullptr)
    return Invalid(kCall, "cache and engine must not be null");
  if (queries == nullptr || query_counts == nullptr || out == nullptr) {
    return Invalid(kCall, "queries, query_counts and out must not be null");
  }
  attnscore::KvCacheAttendOptions cpp;
  const Status options_ok = AttendOptionsOf(kCall, options, queries, &cpp);
  if (!options_ok.ok()) return ToC(options_ok);
  return Guarded(kCall, [&] {
    return cache->cache->AttendPacked(*engine->engine, In(queries), Counts(*cache, query_counts),
                                      cpp, Out(out));
  });
}

}  // extern "C"
