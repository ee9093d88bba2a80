#include "api/valid_lens.h"

#include <string>

namespace attnscore {
namespace {

template <typename T>
Status CheckNonNegative(const T* lens, int64_t count, int64_t columns,
                        const char* op) {
  for (int64_t k = 0; k < count; ++k) {
    if (lens[k] < 0) {
      const std::string where =
          columns ? "[" + std::to_string(k / columns) + ", " +
                        std::to_string(k % columns) + "]"
                  : "[" + std::to_string(k) + "]";
      return Status::InvalidArgument(std::string(op) + ": valid_lens" + where +
                                     " is " + std::to_string(lens[k]) +
                                     "; lengths must be >= 0");
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
        return Status::InvalidArgument(
            name() + " has shape (" + std::to_string(lens.dims[0]) +
            ",) but the batch size is " + std::to_string(batch));
      }
      count = batch;
      break;
    case ValidLens::Kind::kPerQuery:
      if (lens.dims[0] != batch || lens.dims[1] != queries) {
        return Status::InvalidArgument(
            name() + " has shape (" + std::to_string(lens.dims[0]) + ", " +
            std::to_string(lens.dims[1]) + ") but (batch, queries) is (" +
            std::to_string(batch) + ", " + std::to_string(queries) + ")");
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

}  // namespace attnscore
