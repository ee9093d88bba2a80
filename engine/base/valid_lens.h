// Checking valid lengths (the public ValidLens) and resolving them once per
// call into what the ops read: each row's length and each entry's widths.
#ifndef ATTNSCORE_BASE_VALID_LENS_H_
#define ATTNSCORE_BASE_VALID_LENS_H_

#include <cstdint>
#include <initializer_list>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"
#include "base/workspace.h"

namespace attnscore::internal {

// A view and the name messages call it by.
struct NamedView {
  const char* name;
  ConstTensor view;
};

// OK when `lens` fits a problem of `batch` entries with `queries` each: the
// right dims, a non-null pointer, no memory shared with `outputs` (the ops
// read the caller's lengths only before writing, but a caller's overlap is a
// bug worth naming) and no negative length. `op` names the call in messages.
Status CheckValidLens(const ValidLens& lens, int64_t batch, int64_t queries, const char* op,
                      std::initializer_list<NamedView> outputs);

// What batch entry b's queries attend to: `longest`, the longest valid
// length among them (the keys worth scoring), and `mix`, the keys W V must
// read: that, or all of them when a query has L = 0 (uniform weights).
struct EntryWidths {
  int64_t longest, mix;
};

// Checked lengths for (batch, queries) rows over `keys` keys, decoded once:
// int32 or int64, per batch or per query or none, each clamped to [0, keys]
// (docs/semantics.md section 1: L >= M means all M keys). The storage is
// the call's workspace's (IndexSlot::kRowLengths), so one call resolves
// once, at its entry, and reads the result from any of its threads.
class RowLengths {
 public:
  static Status Resolve(const ValidLens& lens, int64_t batch, int64_t queries, int64_t keys,
                        Workspace& workspace, RowLengths* resolved);

  // Row (b, i)'s length, in [0, keys]: the end of its keys.
  int64_t row(int64_t b, int64_t i) const { return rows_[b * queries_ + i]; }
  // Where row (b, i)'s keys begin: 0 unless a window cut them (WithStarts).
  // A row sees keys [start, row); with start == row > 0 it sees none (a
  // window emptied it: weights 0, output 0), while row == 0 (start 0) is
  // d2l's L = 0, uniform over all keys.
  int64_t start(int64_t b, int64_t i) const { return starts_ ? starts_[b * queries_ + i] : 0; }
  bool has_starts() const { return starts_ != nullptr; }
  const EntryWidths& entry(int64_t b) const { return entries_[b]; }
  int64_t queries() const { return queries_; }
  int64_t keys() const { return keys_; }

  // The same problem with row (b, i)'s length read from rows[b * queries + i]:
  // each entry's lengths reordered (its queries permuted), so that its
  // widths still hold. `rows` must outlive the result.
  RowLengths WithRows(const int64_t* rows) const {
    RowLengths reordered = *this;
    reordered.rows_ = rows;
    return reordered;
  }
  // The same lengths, row (b, i) beginning at starts[b * queries + i], with
  // 0 <= start <= row, and start == 0 where row == 0. Only the gemm path
  // (unsorted) and the softmax and remix under it read starts. `starts` must
  // outlive the result.
  RowLengths WithStarts(const int64_t* starts) const {
    RowLengths cut = *this;
    cut.starts_ = starts;
    return cut;
  }

 private:
  const int64_t* rows_ = nullptr;
  const int64_t* starts_ = nullptr;
  const EntryWidths* entries_ = nullptr;
  int64_t queries_ = 0, keys_ = 0;
};

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_VALID_LENS_H_
