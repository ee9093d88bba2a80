// Where a KvCache keeps what it holds, for the engine and its benchmarks
// only: a read of these very bytes is the limit that decoding from the cache
// is measured against (bench/multihead_bench.cc), where a read of the
// caller's copies would find them in other cache lines.
#ifndef ATTNSCORE_API_KV_CACHE_BYTES_H_
#define ATTNSCORE_API_KV_CACHE_BYTES_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "attnscore/kv_cache.h"

namespace attnscore::internal {

struct KvCacheBytes {
  // Each sequence's keys, then its values, of one head after another, over
  // the positions it holds: (first byte, bytes), as Attend reads them.
  static std::vector<std::pair<const void*, size_t>> Held(const KvCache& cache);
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_API_KV_CACHE_BYTES_H_
