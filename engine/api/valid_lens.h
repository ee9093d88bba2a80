// Checking and reading ValidLens (the public struct is in include/).
#ifndef ATTNSCORE_API_VALID_LENS_H_
#define ATTNSCORE_API_VALID_LENS_H_

#include <cstdint>
#include <initializer_list>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

// A view and the name messages call it by.
struct NamedView {
  const char* name;
  ConstTensor view;
};

// OK when `lens` fits a problem of `batch` entries with `queries` each: the
// right dims, a non-null pointer, no memory shared with `outputs` (the dot
// product reads the lengths again after writing its first outputs) and no
// negative length. `op` names the call in messages.
Status CheckValidLens(const ValidLens& lens, int64_t batch, int64_t queries, const char* op,
                      std::initializer_list<NamedView> outputs);

// The number of keys row (b, i) attends to, clamped to [0, keys].
inline int64_t RowValidLength(const ValidLens& lens, int64_t b, int64_t i,
                              int64_t keys) {
  if (lens.kind == ValidLens::Kind::kNone) return keys;
  const int64_t index = lens.kind == ValidLens::Kind::kPerBatch ? b : b * lens.dims[1] + i;
  const int64_t len = lens.is_int64 ? static_cast<const int64_t*>(lens.data)[index]
                                    : static_cast<const int32_t*>(lens.data)[index];
  return len < keys ? len : keys;
}

// What batch entry b's queries attend to: `longest`, the longest valid
// length among them (the keys worth scoring), and `mix`, the keys W V must
// read: that, or all of them when a query has L = 0 (uniform weights).
struct EntryWidths {
  int64_t longest, mix;
};

inline EntryWidths EntryValidWidths(const ValidLens& lens, int64_t b, int64_t queries,
                                    int64_t keys) {
  int64_t longest = 0;
  bool has_empty = false;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t valid = RowValidLength(lens, b, i, keys);
    longest = valid > longest ? valid : longest;
    has_empty |= valid == 0;
    if (lens.kind != ValidLens::Kind::kPerQuery) break;  // the same for every i
  }
  return {longest, has_empty ? keys : longest};
}

}  // namespace attnscore

#endif  // ATTNSCORE_API_VALID_LENS_H_
