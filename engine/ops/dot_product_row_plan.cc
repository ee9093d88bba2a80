// The row path's plan: its key blocks, its threads and how they share its
// tasks. See dot_product_paths.h.
#include <algorithm>
#include <cstdint>

#include "base/parallel.h"
#include "kernels/attention_row.h"
#include "ops/dot_product_paths.h"

namespace attnscore::ops::dot_product {

double RowPathNanos(int64_t entries, int64_t groups, int64_t group_rows, int64_t keys,
                    int64_t features) {
  const auto chunks =
      static_cast<double>(CeilDiv(group_rows, static_cast<int64_t>(kernels::kMaxSharedRows)));
  return static_cast<double>(entries * groups) * static_cast<double>(keys) *
         (static_cast<double>(features) / 128.0) *
         (3.5 * chunks + 1.5 * static_cast<double>(group_rows));
}

int64_t RowKeyBlock(int64_t entries, int64_t entry_rows, int64_t keys, int64_t features) {
  const int64_t whole = CeilDiv(keys, 16) * 16;
  // The fewest chunks the rows make (all of an entry's rows sharing keys).
  if (RowPathNanos(entries, 1, entry_rows, keys, features) < kMinSharedRowNanos) return whole;
  // Tasks in whole rows, at the fewest: an entry's rows in chunks.
  const int64_t tasks =
      entries * CeilDiv(entry_rows, static_cast<int64_t>(kernels::kMaxSharedRows));
  int64_t blocks =
      std::max<int64_t>(1, std::min(CeilDiv(kRowTasks, tasks), keys / kMinRowKeyBlock));
  if (blocks > 1 && entry_rows > static_cast<int64_t>(kernels::kMaxSharedRows)) {
    const int64_t shared = std::max<int64_t>(16, kSharedKeyBlockBytes / (4 * features));
    blocks = std::max(blocks, CeilDiv(keys, shared));
  }
  return CeilDiv(CeilDiv(keys, blocks), 16) * 16;
}

int RowPathThreads(int threads, int64_t entries, int64_t groups, int64_t group_rows, int64_t keys,
                   int64_t features) {
  return internal::ThreadsFor(threads, RowPathNanos(entries, groups, group_rows, keys, features),
                              kMinSharedRowNanos);
}

internal::Balance RowPathBalance(const internal::RowLengths& lens, int64_t batch) {
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < lens.queries(); ++i) {
      if (lens.row(b, i) != lens.keys() || lens.start(b, i) != 0) {
        return internal::Balance::kOneAtATime;
      }
    }
  }
  return internal::Balance::kRuns;
}

}  // namespace attnscore::ops::dot_product
