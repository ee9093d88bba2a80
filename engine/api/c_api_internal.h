// What the C API's files share: the handles' definitions, statuses as heap
// objects, and the guard that keeps exceptions from crossing into C.
#ifndef ATTNSCORE_API_C_API_INTERNAL_H_
#define ATTNSCORE_API_C_API_INTERNAL_H_

#include <memory>
#include <new>
#include <string>

#include "attnscore/c_api.h"
#include "attnscore/engine.h"
#include "attnscore/status.h"

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
