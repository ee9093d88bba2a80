#include "base/valid_lens.h"

#include <algorithm>
#include <new>
#include <string>
#include <vector>

namespace attnscore::internal {
namespace {

template <typename T>
Status CheckNonNegative(const T* lens, int64_t count, int64_t columns, const char* op) {
  for (int64_t k = 0; k < count; ++k) {
    if (lens[k] < 0) {
      const std::string where =
          columns ? "[" + std::to_string(k / columns) + ", " + std::to_string(k % columns) + "]"
                  : "[" + std::to_string(k) + "]";
      return Status::InvalidArgument(std::string(op) + ": valid_lens" + where + " is " +
                                     std::to_string(lens[k]) + "; lengths must be >= 0");
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckValidLens(const ValidLens& lens, int64_t batch, int64_t queries, const char* op,
                      std::initializer_list<NamedView> outputs) {
  // Built only for an error: a call that passes its checks allocates nothing.
  const auto name = [op] { return std::string(op) + ": valid_lens"; };
  int64_t count = 0;
  int64_t columns = 0;
  switch (lens.kind) {
    case ValidLens::Kind::kNone:
      return Status::Ok();
    case ValidLens::Kind::kPerBatch:
      if (lens.dims[0] != batch) {
        return Status::InvalidArgument(name() + " has shape (" + std::to_string(lens.dims[0]) +
                                       ",) but the batch size is " + std::to_string(batch));
      }
      count = batch;
      break;
    case ValidLens::Kind::kPerQuery:
      if (lens.dims[0] != batch || lens.dims[1] != queries) {
        return Status::InvalidArgument(name() + " has shape (" + std::to_string(lens.dims[0]) +
                                       ", " + std::to_string(lens.dims[1]) +
                                       ") but (batch, queries) is (" + std::to_string(batch) +
                                       ", " + std::to_string(queries) + ")");
      }
      count = batch * queries;
      columns = queries;
      break;
    default:
      return Status::InvalidArgument(name() + " has an unknown kind");
  }
  if (lens.data == nullptr) {
    return Status::InvalidArgument(name() + " is null");
  }
  const auto first = reinterpret_cast<uintptr_t>(lens.data);
  const uintptr_t last = first + static_cast<uintptr_t>(count) * (lens.is_int64 ? 8 : 4) - 1;
  for (const NamedView& out : outputs) {
    if (out.view.empty()) continue;
    int64_t span = 0;
    for (int d = 0; d < out.view.rank; ++d) span += (out.view.dims[d] - 1) * out.view.strides[d];
    const auto out_first = reinterpret_cast<uintptr_t>(out.view.data);
    const uintptr_t out_last = out_first + static_cast<uintptr_t>(span) * sizeof(float) + 3;
    if (first <= out_last && out_first <= last) {
      return Status::InvalidArgument(std::string(op) + ": " + out.name + " overlaps valid_lens");
    }
  }
  return lens.is_int64
             ? CheckNonNegative(static_cast<const int64_t*>(lens.data), count, columns, op)
             : CheckNonNegative(static_cast<const int32_t*>(lens.data), count, columns, op);
}

namespace {

template <typename T>
int64_t LengthAt(const ValidLens& lens, int64_t index) {
  return static_cast<int64_t>(static_cast<const T*>(lens.data)[index]);
}

}  // namespace

Status RowLengths::Resolve(const ValidLens& lens, int64_t batch, int64_t queries, int64_t keys,
                           Workspace& workspace, RowLengths* resolved) {
  // rows, then entries, in one buffer of the call's workspace.
  const auto rows = static_cast<size_t>(batch * queries);
  static_assert(sizeof(EntryWidths) == 2 * sizeof(int64_t));
  const size_t words = rows + 2 * static_cast<size_t>(batch);
  int64_t* storage = nullptr;
  try {
    storage = workspace.Words(IndexSlot::kRowLengths, words);
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory for the valid lengths");
  }
  int64_t* const row_lengths = storage;
  auto* const entries = reinterpret_cast<EntryWidths*>(storage + rows);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t* const entry_rows = row_lengths + b * queries;
    switch (lens.kind) {
      case ValidLens::Kind::kNone:
        std::fill(entry_rows, entry_rows + queries, keys);
        break;
      case ValidLens::Kind::kPerBatch: {
        const int64_t len = lens.is_int64 ? LengthAt<int64_t>(lens, b) : LengthAt<int32_t>(lens, b);
        std::fill(entry_rows, entry_rows + queries, std::min(len, keys));
        break;
      }
      case ValidLens::Kind::kPerQuery:
        for (int64_t i = 0; i < queries; ++i) {
          const int64_t index = b * queries + i;
          const int64_t len =
              lens.is_int64 ? LengthAt<int64_t>(lens, index) : LengthAt<int32_t>(lens, index);
          entry_rows[i] = std::min(len, keys);
        }
        break;
    }
    int64_t longest = 0;
    bool has_empty = false;
    for (int64_t i = 0; i < queries; ++i) {
      longest = std::max(longest, entry_rows[i]);
      has_empty |= entry_rows[i] == 0;
    }
    entries[b] = {longest, has_empty ? keys : longest};
  }
  resolved->rows_ = row_lengths;
  resolved->entries_ = entries;
  resolved->queries_ = queries;
  resolved->keys_ = keys;
  return Status::Ok();
}

}  // namespace attnscore::internal
