// What every engine call sets up and then restores for its caller.
#ifndef ATTNSCORE_API_CALL_SCOPE_H_
#define ATTNSCORE_API_CALL_SCOPE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>

#include "attnscore/status.h"

namespace attnscore {

// Flush-to-zero and denormals-are-zero on this thread while alive. exp(x - max)
// lands in the subnormal range easily, and subnormals make Highway's Exp
// 11-19x slower on this machine; results differ by less than 1e-38.
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
// flushed; both are restored for the caller afterwards.
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

// A per-thread buffer of at least `count` floats, starting on a 64-byte
// cache line, that lives until the thread ends; `slot` tells apart buffers
// one call needs at the same time. Grows, never shrinks, so the steady state
// does not allocate.
float* ThreadScratch(int slot, size_t count);

// The threads worth waking for about `flops` of work: a second thread costs
// a microsecond or two to wake and join, so calls under kMinSharedFlops
// (about 10 µs of the row kernels' work) stay on the caller's thread.
constexpr double kMinSharedFlops = 1e5;
inline int ThreadsFor(int threads, double flops) { return flops < kMinSharedFlops ? 1 : threads; }

// Runs body(row, scratch) for every row in [0, rows) on up to `threads`
// OpenMP threads, each with denormals flushed and its own scratch of
// `scratch_floats` (ThreadScratch slot `slot`; none and a null pointer when
// 0); then after() once per thread. An exception may not leave an OpenMP region, so a thread that
// cannot allocate its scratch skips its rows and the call reports it (rows
// done by other threads stay written). Rows go to threads in equal runs;
// `Balance::kDynamic` hands them out one at a time instead, for rows of very
// unequal cost (each row's result never depends on which thread ran it).
enum class Balance { kStatic, kDynamic };
template <class Body, class After>
Status ForEachRowInParallel(int threads, int64_t rows, int slot, size_t scratch_floats,
                            Body body, After after, Balance balance = Balance::kStatic) {
  if (threads <= 1 || rows <= 1) {
    // No OpenMP region at all: even a one-thread region costs the caller
    // futex calls, a few microseconds of a small call.
    FlushDenormals flush;
    float* scratch = nullptr;
    try {
      if (scratch_floats > 0) scratch = ThreadScratch(slot, scratch_floats);
    } catch (const std::bad_alloc&) {
      return Status::Internal("out of memory for per-thread scratch");
    }
    for (int64_t r = 0; r < rows; ++r) body(r, scratch);
    after();
    return Status::Ok();
  }
  std::atomic<bool> out_of_memory{false};
#pragma omp parallel num_threads(threads)
  {
    FlushDenormals flush;  // MXCSR is per thread
    float* scratch = nullptr;
    bool ready = scratch_floats == 0;
    try {
      if (!ready) scratch = ThreadScratch(slot, scratch_floats);
      ready = true;
    } catch (const std::bad_alloc&) {
      out_of_memory = true;
    }
    if (balance == Balance::kDynamic) {
#pragma omp for schedule(dynamic)
      for (int64_t r = 0; r < rows; ++r) {
        if (ready) body(r, scratch);
      }
    } else {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        if (ready) body(r, scratch);
      }
    }
    after();
  }
  return out_of_memory ? Status::Internal("out of memory for per-thread scratch") : Status::Ok();
}

// Runs call() and turns an exception into a Status, so none crosses the API:
// the only ones the engine can meet are allocation failures (scratch, plan
// cache, model weights) and dependency errors.
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

}  // namespace attnscore

#endif  // ATTNSCORE_API_CALL_SCOPE_H_
