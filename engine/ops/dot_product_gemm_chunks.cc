// The gemm path's groups: see dot_product_gemm_chunks.h.
#include "ops/dot_product_gemm_chunks.h"

namespace attnscore::ops::dot_product {
namespace {

// Queries per block of a cut entry: 64 rows keep oneDNN's kernels on full
// tiles, and cut the causal (1, 1024, 1024) to 1.06x its unmasked half.
constexpr int64_t kQueryBlock = 64;
// An entry is cut when its blocks' work is at most this share of the whole
// entry's: each block costs its own oneDNN calls.
constexpr double kCutWhenBelow = 0.8;

// The widths of queries [first, first + count) of entry b: the longest
// length among them rounded up to 16 columns (fewer distinct plans) but
// never past the entry's own longest, and the mix width likewise, or all M
// keys when one of them has length 0.
std::pair<int64_t, int64_t> BlockWidths(const internal::RowLengths& lens, int64_t b, int64_t first,
                                        int64_t count) {
  const internal::EntryWidths& entry = lens.entry(b);
  int64_t longest = 0;
  bool uniform = false;  // a query with length 0
  for (int64_t i = first; i < first + count; ++i) {
    longest = std::max(longest, lens.row(b, i));
    uniform = uniform || lens.row(b, i) == 0;
  }
  const int64_t score = std::min(CeilDiv(longest, 16) * 16, entry.longest);
  return {score, uniform ? lens.keys() : score};
}

}  // namespace

std::vector<Group> GroupBatches(const internal::RowLengths& lens, int64_t batch, int64_t depth,
                                int64_t value_dim) {
  const int64_t queries = lens.queries();
  std::vector<Group> groups;
  for (int64_t b = 0; b < batch; ++b) {
    const auto [longest, mix] = lens.entry(b);
    if (queries > kQueryBlock) {
      // The work of the blocks against the whole entry's.
      double whole =
          static_cast<double>(queries) * static_cast<double>(longest * depth + mix * value_dim);
      double cut = 0;
      for (int64_t i = 0; i < queries; i += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, queries - i);
        const auto [score, block_mix] = BlockWidths(lens, b, i, rows);
        cut +=
            static_cast<double>(rows) * static_cast<double>(score * depth + block_mix * value_dim);
      }
      if (cut < kCutWhenBelow * whole) {
        for (int64_t i = 0; i < queries; i += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, queries - i);
          const auto [score, block_mix] = BlockWidths(lens, b, i, rows);
          groups.push_back(Group{b, 1, i, rows, score, block_mix, 0, {}});
        }
        continue;
      }
    }
    const Group* last = groups.empty() ? nullptr : &groups.back();
    if (last != nullptr && last->queries == queries && last->score_width == longest &&
        last->mix_width == mix) {
      ++groups.back().count;
    } else {
      groups.push_back(Group{b, 1, 0, queries, longest, mix, 0, {}});
    }
  }
  return groups;
}

double GemmFlops(const internal::RowLengths& lens, int64_t batch, int64_t depth,
                 int64_t value_dim) {
  double flops = 0;
  for (const Group& g : GroupBatches(lens, batch, depth, value_dim)) {
    flops += 2.0 * static_cast<double>(g.count * g.queries) *
             static_cast<double>(g.score_width * depth + g.mix_width * value_dim);
  }
  return flops;
}

}  // namespace attnscore::ops::dot_product
