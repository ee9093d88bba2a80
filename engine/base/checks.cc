#include "base/checks.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/valid_lens.h"

namespace attnscore::internal {
namespace {

std::string Prefix(const char* op, const char* name) { return std::string(op) + ": " + name; }

std::string ExpectedString(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  bool first = true;
  for (int64_t n : dims) {
    if (!first) s += ", ";
    s += n == kAnyDim ? std::string("*") : std::to_string(n);
    first = false;
  }
  return s + ")";
}

// Byte range [first, last] that a checked view touches.
struct Extent {
  uintptr_t first, last;
};

Extent ExtentOf(const ConstTensor& v) {
  int64_t last = 0;
  for (int d = 0; d < v.rank; ++d) last += (v.dims[d] - 1) * v.strides[d];
  const auto first = reinterpret_cast<uintptr_t>(v.data);
  return {first, first + static_cast<uintptr_t>(last) * sizeof(float) + sizeof(float) - 1};
}

bool SameView(const ConstTensor& a, const ConstTensor& b) {
  if (a.data != b.data || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.dims[d] != b.dims[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

}  // namespace

Status CheckTensor(const char* op, const char* name, const ConstTensor& view,
                   std::initializer_list<int64_t> dims, const char* layout) {
  const int rank = static_cast<int>(dims.size());
  if (view.rank != rank) {
    return Status::InvalidArgument(Prefix(op, name) + " must have rank " + std::to_string(rank) +
                                   " " + layout + " but has rank " + std::to_string(view.rank) +
                                   (view.rank < 0 ? " (dims and strides differ in count)" : ""));
  }
  if (view.data == nullptr) {
    return Status::InvalidArgument(Prefix(op, name) + " is null");
  }
  // Too many elements is the shape's fault; an addressable shape whose
  // last element lies past what can be addressed is its strides'.
  int64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    if (view.dims[d] < 1) {
      return Status::InvalidArgument(Prefix(op, name) + " has shape " + ShapeString(view) +
                                     ": every dim must be >= 1");
    }
    if (view.strides[d] < 0) {
      return Status::InvalidArgument(Prefix(op, name) + " has a negative stride");
    }
    if (__builtin_mul_overflow(elements, view.dims[d], &elements) ||
        elements > INT64_MAX / static_cast<int64_t>(sizeof(float))) {
      return Status::InvalidArgument(Prefix(op, name) + " has shape " + ShapeString(view) +
                                     ", too large to address");
    }
  }
  int64_t last_offset = 0;
  for (int d = 0; d < rank; ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(view.dims[d] - 1, view.strides[d], &span) ||
        __builtin_add_overflow(last_offset, span, &last_offset) ||
        last_offset > INT64_MAX / static_cast<int64_t>(sizeof(float))) {
      std::string strides;
      for (int e = 0; e < rank; ++e) {
        strides += (e == 0 ? "(" : ", ") + std::to_string(view.strides[e]);
      }
      return Status::InvalidArgument(Prefix(op, name) + " has strides " + strides +
                                     ") that reach past what can be addressed (shape " +
                                     ShapeString(view) + ")");
    }
  }
  int d = 0;
  for (int64_t want : dims) {
    if (want != kAnyDim && view.dims[d] != want) {
      return Status::InvalidArgument(Prefix(op, name) + " has shape " + ShapeString(view) +
                                     " but must be " + layout + " = " + ExpectedString(dims));
    }
    ++d;
  }
  return Status::Ok();
}

Status CheckWritable(const char* op, const char* name, const ConstTensor& view) {
  // Sorted by stride, each dim must step past everything the smaller ones span.
  // CheckTensor ran first, so 0 < rank <= kMaxRank.
  const int rank = std::clamp(view.rank, 0, kMaxRank);
  // At most kMaxRank dims: an insertion sort, by stride.
  int order[kMaxRank] = {};
  for (int d = 0; d < rank; ++d) {
    int k = d;
    for (; k > 0 && view.strides[order[k - 1]] > view.strides[d]; --k) order[k] = order[k - 1];
    order[k] = d;
  }
  int64_t span = 1;  // elements covered by the dims sorted so far
  for (int k = 0; k < rank; ++k) {
    const int d = order[k];
    if (view.dims[d] == 1) continue;
    if (view.strides[d] < span) {
      return Status::InvalidArgument(Prefix(op, name) +
                                     " has strides that make elements share memory");
    }
    span = view.strides[d] * (view.dims[d] - 1) + span;
  }
  return Status::Ok();
}

Status CheckDisjoint(const char* op, const char* out_name, const ConstTensor& out,
                     const char* in_name, const ConstTensor& in, bool allow_same) {
  if (allow_same && SameView(out, in)) return Status::Ok();
  const Extent a = ExtentOf(out), b = ExtentOf(in);
  if (a.first <= b.last && b.first <= a.last) {
    return Status::InvalidArgument(Prefix(op, out_name) + " overlaps " + in_name +
                                   (allow_same ? " (only an exact in-place view is allowed)" : ""));
  }
  return Status::Ok();
}

Status CheckOutputsApart(const char* op, std::initializer_list<NamedView> inputs,
                         const ConstTensor& out, const ConstTensor& attention,
                         const ValidLens& valid_lens, int64_t batch, int64_t queries) {
  ATTNSCORE_RETURN_IF_ERROR(CheckWritable(op, "out", out));
  for (const NamedView& input : inputs) {
    ATTNSCORE_RETURN_IF_ERROR(CheckDisjoint(op, "out", out, input.name, input.view));
  }
  if (!attention.empty()) {
    ATTNSCORE_RETURN_IF_ERROR(CheckWritable(op, "attention_weights", attention));
    for (const NamedView& input : inputs) {
      ATTNSCORE_RETURN_IF_ERROR(
          CheckDisjoint(op, "attention_weights", attention, input.name, input.view));
    }
    ATTNSCORE_RETURN_IF_ERROR(CheckDisjoint(op, "attention_weights", attention, "out", out));
  }
  return CheckValidLens(valid_lens, batch, queries, op,
                        {{"out", out}, {"attention_weights", attention}});
}

Status CheckAttentionOutputs(const char* op, std::initializer_list<NamedView> inputs,
                             const AttentionShape& shape, const ValidLens& valid_lens,
                             const ConstTensor& out, const ConstTensor& attention) {
  ATTNSCORE_RETURN_IF_ERROR(CheckTensor(
      op, "out", out, {shape.batch, shape.queries, shape.out_features}, shape.out_layout));
  if (!attention.empty()) {
    ATTNSCORE_RETURN_IF_ERROR(CheckTensor(op, "attention_weights", attention,
                                          {shape.batch, shape.queries, shape.keys}, "(B, N, M)"));
  }
  return CheckOutputsApart(op, inputs, out, attention, valid_lens, shape.batch, shape.queries);
}

}  // namespace attnscore::internal
