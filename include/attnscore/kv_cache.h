// Keys and values cached for decoding (docs/semantics.md section 5.3): B
// sequences, each holding up to `capacity` positions of Hkv key-value heads.
// A decoder appends each step's keys and values, then lets the step's
// queries attend to everything its sequence holds:
//
//   attnscore::KvCacheShape shape{/*batch=*/4, /*capacity=*/4096, /*kv_heads=*/4,
//                                 /*key_dim=*/64, /*value_dim=*/64};
//   std::unique_ptr<attnscore::KvCache> cache;
//   Status s = attnscore::KvCache::Create(shape, &cache);
//   s = cache->Append(new_keys, new_values);          // (B, T, Hkv, D), (B, T, Hkv, Dv)
//   s = cache->Attend(*engine, queries, out);          // (B, T, Hq, D) -> (B, T, Hq, Dv)
//
// Appending and clearing change the cache; Attend does not, and many
// threads may Attend at once, but not while another thread appends.
#ifndef ATTNSCORE_KV_CACHE_H_
#define ATTNSCORE_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "attnscore/engine.h"
#include "attnscore/export.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"

namespace attnscore {

struct KvCacheShape {
  int64_t batch = 1;      // B sequences
  int64_t capacity = 0;   // positions per sequence
  int64_t kv_heads = 1;   // Hkv
  int64_t key_dim = 0;    // D
  int64_t value_dim = 0;  // Dv
};

class ATTNSCORE_API KvCache {
 public:
  // Allocates B · capacity · Hkv · (D + Dv) floats, every sequence empty.
  static Status Create(const KvCacheShape& shape, std::unique_ptr<KvCache>* cache);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheShape& shape() const;
  // Positions sequence b holds; 0 for a b out of range.
  int64_t length(int64_t sequence) const;

  // Appends T positions to every sequence: keys (B, T, Hkv, D), values
  // (B, T, Hkv, Dv), any strides, copied. Fails, changing nothing, when a
  // sequence would pass its capacity.
  Status Append(ConstTensor keys, ConstTensor values);
  // Appends T positions to sequence b alone: keys (T, Hkv, D), values (T, Hkv, Dv).
  Status AppendTo(int64_t sequence, ConstTensor keys, ConstTensor values);
  // Empties sequence b, for a new sequence to take its place.
  Status Clear(int64_t sequence);

  // Queries (B, N, Hq, D), Hq a multiple of Hkv, are each sequence's N
  // newest positions (their keys and values already appended): query i of
  // sequence b attends to its keys 0 .. L_b − N + i (causal, bottom-right),
  // scores scaled by 1/sqrt(D), as Engine::MultiHeadAttention computes.
  // out (B, N, Hq, Dv); `attention_weights`, when not empty, (B, Hq, N, L)
  // with L the longest sequence's length, zero past each sequence's own.
  Status Attend(const Engine& engine, ConstTensor queries, Tensor out,
                Tensor attention_weights = Tensor()) const;

 private:
  struct Storage;
  explicit KvCache(std::unique_ptr<Storage> storage);
  std::unique_ptr<Storage> storage_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_KV_CACHE_H_
