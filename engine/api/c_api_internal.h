// What the C API's files share: the handles' definitions, statuses as heap
// objects, and the guard that keeps exceptions from crossing into C.
#ifndef ATTNSCORE_API_C_API_INTERNAL_H_
#define ATTNSCORE_API_C_API_INTERNAL_H_

#include <memory>
#include <new>
#include <string>

#include "attnscore/c_api.h"
#include "attnscore/engine.h"
#include "attnscore/multihead_options.h"
#include "attnscore/status.h"
#include "attnscore/tensor.h"

struct attnscore_status {
  attnscore_status_code code;
  std::string message;
};
struct attnscore_engine {
  std::unique_ptr<attnscore::Engine> engine;
};

namespace attnscore::c_api {

// Returned when the status itself cannot be allocated; never freed.
extern attnscore_status kOutOfMemory;

// A status the caller frees; NULL for OK.
attnscore_status* ToC(const Status& status);

// InvalidArgument "CALL: WHAT".
attnscore_status* Invalid(const char* call, const char* what);

// A C tensor as the C++ view of its memory; empty for NULL (an absent
// optional output, or refused as null).
template <class View, class CTensor>
View ViewOf(const CTensor* t) {
  View view;
  if (t == nullptr) return view;
  view.data = t->data;
  view.rank = t->rank;  // a rank other than the op's is refused before any dim is read
  for (int d = 0; d < kMaxRank; ++d) {
    view.dims[d] = t->dims[d];
    view.strides[d] = t->strides[d];
  }
  return view;
}
inline ConstTensor In(const attnscore_tensor_view* t) { return ViewOf<ConstTensor>(t); }
inline Tensor Out(const attnscore_tensor* t) { return ViewOf<Tensor>(t); }

// Hq contiguous floats (sinks, ALiBi slopes) or NULL as a (Hq,) view, Hq
// from the queries (B, N, Hq, D) or, packed, (T, Hq, D); for queries of
// another rank (0,), which the op's check of the queries refuses first.
ConstTensor HeadFloats(const float* floats, const attnscore_tensor_view* queries);

// `call`'s multi-head options as the C++ ones (NULL: the defaults); a
// `windowed` or `causal` outside its values is refused naming `call`.
Status MultiHeadOptionsOf(const char* call, const attnscore_multihead_options* options,
                          const attnscore_tensor_view* queries, MultiHeadOptions* out);

// Runs call() and turns an exception into a status.
template <class Call>
attnscore_status* Guarded(const char* name, Call call) {
  try {
    return ToC(call());
  } catch (const std::bad_alloc&) {
    return ToC(Status::Internal(std::string(name) + ": out of memory"));
  } catch (...) {
    return ToC(Status::Internal(std::string(name) + ": unexpected error"));
  }
}

}  // namespace attnscore::c_api

#endif  // ATTNSCORE_API_C_API_INTERNAL_H_
