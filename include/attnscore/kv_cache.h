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
//
// By default each sequence's `capacity` positions are its own. A server
// whose sequences differ in length sets block_positions and blocks instead:
// then the sequences share a pool of `blocks` blocks of block_positions
// positions. A sequence takes a block from the pool when its positions
// reach into one, and Clear hands its blocks back, their memory returned to
// the system; an Append that needs more blocks than are free fails,
// changing nothing. Memory then follows the blocks in use, at most
// blocks · block_positions · Hkv · (D + Dv) elements, while each sequence may
// still grow to `capacity` (address space is reserved for every sequence's
// capacity, not memory).
#ifndef ATTNSCORE_KV_CACHE_H_
#define ATTNSCORE_KV_CACHE_H_

#include <cstdint>
#include <memory>

#include "attnscore/engine.h"
#include "attnscore/export.h"
#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"

namespace attnscore {

namespace internal {
struct KvCacheBytes;
}  // namespace internal

// How KvCache::Attend makes its scores, beyond the cache's own causal mask:
// MultiHeadOptions' (docs/semantics.md section 5), with query i of N at
// position p = L_b - N + i of its sequence b of L_b positions.
struct KvCacheAttendOptions {
  float scale = 0.0f;    // what q·k is multiplied by; 0 means 1/sqrt(D). Finite.
  float softcap = 0.0f;  // c > 0: each score s becomes c · tanh(s / c); 0: none
  ConstTensor sinks;     // (Hq,) sink logits, or empty: none (MultiHeadOptions::sinks)
  // A sliding window: keys p - left <= j (right has nothing to cut, the
  // cache being causal); left -1: unbounded. Keys before it are not read
  // (in bf16 and int8, but for those of its first key's group of 16).
  Window window;
  ConstTensor alibi_slopes;  // (Hq,) or empty (MultiHeadOptions::alibi_slopes)
  // A bias or a mask as MultiHeadOptions', shaped (B, Hq, N, L), L the
  // longest sequence's length (the weights' shape), each dim that or 1;
  // columns past a sequence's own length are not read. Attend only.
  ConstTensor bias;
  TensorView<const uint8_t> mask;
};

struct KvCacheShape {
  int64_t batch = 1;      // B sequences
  int64_t capacity = 0;   // positions per sequence
  int64_t kv_heads = 1;   // Hkv
  int64_t key_dim = 0;    // D
  int64_t value_dim = 0;  // Dv
  // A pool of blocks shared by the sequences (0, 0: none). A block's keys
  // and values of one head are whole pages: block_positions · D · E and
  // block_positions · Dv · E bytes (E = 4, 2 in bf16, 1 in int8) are
  // multiples of the page size, so block_positions is a multiple of
  // KvCache::BlockPositionsMultiple(D, Dv, precision) (16 with 4 KiB pages,
  // D = Dv = 64 and fp32; 32 in bf16; 64 in int8; bf16 and int8 blocks are
  // also whole groups of 16 key positions).
  int64_t block_positions = 0;
  int64_t blocks = 0;
  // How keys and values are held (docs/semantics.md section 5.3): kFp32 as
  // given; kBf16, each element rounded to the nearest bfloat16 (ties to
  // even) once, as it is appended, and read as such by Attend: half the
  // memory, and half the bytes a decoding step reads; or kInt8, 8-bit codes
  // with a scale per key channel per 16 positions and per value row: about
  // a third of fp32's bytes (164 for a position of D = Dv = 64, against
  // 512), finite keys and values only.
  Precision precision = Precision::kFp32;
};

class ATTNSCORE_API KvCache {
 public:
  // Allocates B · capacity · Hkv · (D + Dv) elements (floats, bf16 words,
  // or int8 codes and their scales), every sequence empty; with a pool, reserves address space for
  // them (capacity rounded up to whole blocks) and takes memory only as
  // positions arrive.
  static Status Create(const KvCacheShape& shape, std::unique_ptr<KvCache>* cache);
  // The fewest positions whose keys (D elements each) and values (Dv
  // elements each) in `precision` are whole pages of this machine: a pool's
  // block_positions must be a multiple of it. 0 where D or Dv is below 1.
  static int64_t BlockPositionsMultiple(int64_t key_dim, int64_t value_dim,
                                        Precision precision = Precision::kFp32);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheShape& shape() const;
  // Positions sequence b holds; 0 for a b out of range.
  int64_t length(int64_t sequence) const;
  // The pool's blocks the sequences hold: Σ_b ceil(length(b) / block_positions);
  // 0 without a pool.
  int64_t blocks_in_use() const;

  // Appends T positions to every sequence: keys (B, T, Hkv, D), values
  // (B, T, Hkv, Dv), any strides, copied. Fails, changing nothing, when a
  // sequence would pass its capacity or the pool has too few free blocks,
  // or when an int8 cache is given a key or value that is not finite.
  Status Append(ConstTensor keys, ConstTensor values);
  // Appends T positions to sequence b alone: keys (T, Hkv, D), values (T, Hkv, Dv).
  Status AppendTo(int64_t sequence, ConstTensor keys, ConstTensor values);
  // A server step's positions, packed: keys (T, Hkv, D) and values (T, Hkv,
  // Dv), sequence b taking the next counts[b] >= 0 rows in order (T = Σ
  // counts, counts (B,)), so that sequences prefilling, decoding and idle
  // (0) append in one call. Fails, changing nothing, as Append does.
  Status AppendPacked(ConstTensor keys, ConstTensor values, TensorView<const int64_t> counts);
  // Empties sequence b, for a new sequence to take its place; with a pool,
  // its blocks go back to the pool and their memory to the system.
  Status Clear(int64_t sequence);

  // Queries (B, N, Hq, D), Hq a multiple of Hkv, are each sequence's N
  // newest positions (their keys and values already appended): query i of
  // sequence b attends to its keys 0 .. L_b − N + i (causal, bottom-right),
  // scores scaled by 1/sqrt(D), as Engine::MultiHeadAttention computes.
  // out (B, N, Hq, Dv); `attention_weights`, when not empty, (B, Hq, N, L)
  // with L the longest sequence's length, zero past each sequence's own.
  Status Attend(const Engine& engine, ConstTensor queries, Tensor out,
                Tensor attention_weights = Tensor()) const;
  // The same with the scores as `options` make them, each checked as
  // Engine::MultiHeadAttention checks its own.
  Status Attend(const Engine& engine, ConstTensor queries, const KvCacheAttendOptions& options,
                Tensor out, Tensor attention_weights = Tensor()) const;
  // A server step's queries, packed (T, Hq, D): sequence b's are the next
  // query_counts[b] >= 0 rows (its newest positions), T = Σ counts, and out
  // (T, Hq, Dv) gets their rows as Attend gives them for that sequence alone.
  // A sequence of count 0 is idle: none of its keys is read. No weights, bias
  // or mask (shaped for one N); the other options as Attend's.
  Status AttendPacked(const Engine& engine, ConstTensor queries,
                      TensorView<const int64_t> query_counts, const KvCacheAttendOptions& options,
                      Tensor out) const;

 private:
  struct Storage;
  friend struct internal::KvCacheBytes;  // the engine's own view of what it holds
  explicit KvCache(std::unique_ptr<Storage> storage);
  std::unique_ptr<Storage> storage_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_KV_CACHE_H_
