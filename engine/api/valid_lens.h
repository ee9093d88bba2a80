// Checking and reading ValidLens (the public struct is in include/).
#ifndef ATTNSCORE_API_VALID_LENS_H_
#define ATTNSCORE_API_VALID_LENS_H_

#include <cstdint>

#include "attnscore/status.h"
#include "attnscore/tensor.h"
#include "attnscore/valid_lens.h"

namespace attnscore {

// OK when `lens` fits a problem of `batch` entries with `queries` each: the
// right dims, a non-null pointer and no negative length. `op` names the call
// in messages.
Status CheckValidLens(const ValidLens& lens, int64_t batch, int64_t queries,
                      const char* op);

// The lengths must not share memory with an output: the dot product reads
// them again after writing its first outputs.
Status CheckValidLensDisjoint(const ValidLens& lens, const char* op,
                              const char* out_name, const ConstTensor& out);

// The number of keys row (b, i) attends to, clamped to [0, keys].
inline int64_t RowValidLength(const ValidLens& lens, int64_t b, int64_t i,
                              int64_t keys) {
  if (lens.kind == ValidLens::Kind::kNone) return keys;
  const int64_t index = lens.kind == ValidLens::Kind::kPerBatch ? b : b * lens.dims[1] + i;
  const int64_t len = lens.is_int64 ? static_cast<const int64_t*>(lens.data)[index]
                                    : static_cast<const int32_t*>(lens.data)[index];
  return len < keys ? len : keys;
}

}  // namespace attnscore

#endif  // ATTNSCORE_API_VALID_LENS_H_
