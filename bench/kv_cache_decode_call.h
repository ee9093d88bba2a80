// One decoding step over a KvCache, for the benchmarks that time it
// (multihead_bench.cc, sweep_bench.cc).
#ifndef ATTNSCORE_BENCH_KV_CACHE_DECODE_CALL_H_
#define ATTNSCORE_BENCH_KV_CACHE_DECODE_CALL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "attnscore/engine.h"
#include "attnscore/kv_cache.h"
#include "bench_util.h"

namespace attnscore::bench {

// One decoding step over a KvCache holding `keys` positions per sequence,
// filled with random K and V (B, M, Hkv, D); one random query per head.
// `pooled`: the cache's sequences share a pool of blocks of the fewest
// positions that are whole pages, just enough of them for the keys.
struct KvCacheDecodeCall {
  KvCacheDecodeCall(int64_t batch, int64_t keys, int64_t heads, int64_t kv_heads, int64_t depth,
                    bool pooled = false, Precision precision = Precision::kFp32)
      : batch(batch),
        heads(heads),
        depth(depth),
        k(RandomFloats(batch * keys * kv_heads * depth, 2)),
        v(RandomFloats(batch * keys * kv_heads * depth, 3)),
        q(RandomFloats(batch * heads * depth, 1)),
        out(static_cast<size_t>(batch * heads * depth)) {
    KvCacheShape shape;
    shape.batch = batch, shape.capacity = keys, shape.kv_heads = kv_heads;
    shape.key_dim = depth, shape.value_dim = depth;
    shape.precision = precision;
    if (pooled) {
      shape.block_positions = KvCache::BlockPositionsMultiple(depth, depth, precision);
      shape.blocks = batch * ((keys + shape.block_positions - 1) / shape.block_positions);
    }
    status = KvCache::Create(shape, &cache);
    if (status.ok()) {
      status = cache->Append(ConstTensor(k.data(), {batch, keys, kv_heads, depth}),
                             ConstTensor(v.data(), {batch, keys, kv_heads, depth}));
    }
  }

  Status Run(const Engine& engine) {
    Status s = cache->Attend(engine, ConstTensor(q.data(), {batch, 1, heads, depth}),
                             Tensor(out.data(), {batch, 1, heads, depth}));
    benchmark::DoNotOptimize(out.data());
    return s;
  }

  const int64_t batch, heads, depth;
  const std::vector<float> k, v;  // what the cache holds, as appended
  const std::vector<float> q;
  std::vector<float> out;
  std::unique_ptr<KvCache> cache;
  Status status;  // of filling the cache
};

}  // namespace attnscore::bench

#endif  // ATTNSCORE_BENCH_KV_CACHE_DECODE_CALL_H_
