// What every engine call sets up and then restores for its caller, and how
// it keeps exceptions from crossing the API.
#ifndef ATTNSCORE_BASE_CALL_SCOPE_H_
#define ATTNSCORE_BASE_CALL_SCOPE_H_

#include <exception>
#include <new>
#include <string>

#include "attnscore/status.h"

namespace attnscore::internal {

// Flush-to-zero and denormals-are-zero on this thread while alive. exp(x - max)
// lands in the subnormal range easily, and subnormals make Highway's Exp
// 11-19x slower (measured on an AMD EPYC); results differ by less than 1e-38.
// Floating-point exceptions are masked and rounding is to nearest too. The
// caller's MXCSR comes back on destruction.
class FlushDenormals {
 public:
  FlushDenormals();
  ~FlushDenormals();
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  unsigned saved_;
};

// One engine call: OpenMP (ours and oneDNN's) gets `threads`, denormals are
// flushed; both are restored for the caller afterwards, and the calling
// thread's large scratch is returned (base/scratch.h). Calls do not nest.
class CallScope {
 public:
  explicit CallScope(int threads);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  FlushDenormals flush_;
  int saved_threads_;
};

// Runs call() and turns an exception into a Status, so none crosses the API:
// the only ones the engine can meet are allocation failures (scratch, plan
// cache, model parameters) and dependency errors.
template <class Call>
Status Guarded(const char* op, Call call) {
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return Status::Internal(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(std::string(op) + ": " + e.what());
  }
}

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_CALL_SCOPE_H_
