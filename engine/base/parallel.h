// Rows of work shared among OpenMP threads.
#ifndef ATTNSCORE_BASE_PARALLEL_H_
#define ATTNSCORE_BASE_PARALLEL_H_

#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "attnscore/status.h"
#include "base/call_scope.h"
#include "base/workspace.h"

namespace attnscore::internal {

// The threads worth waking for about `flops` of work: a second thread costs
// a microsecond or two to wake and join, so calls under kMinSharedFlops
// (about 10 µs of the row kernels' work) stay on the caller's thread.
constexpr double kMinSharedFlops = 1e5;
inline int ThreadsFor(int threads, double flops) { return flops < kMinSharedFlops ? 1 : threads; }

// Starts `threads` - 1 threads and joins them, then runs one OpenMP region
// of `threads`, whose team OpenMP keeps for this thread's later calls. A
// system that cannot start them gets an Unsupported Status naming the
// reason here, where OpenMP would end the process ("Thread creation
// failed") in the middle of a call.
Status StartThreads(int threads);

// Runs body(row, scratch) for every row in [0, rows) on up to `threads`
// OpenMP threads (at most the engine's), each with denormals flushed and
// its own scratch of `scratch_floats` in `slot` of the call's `workspace`
// (a null pointer when 0); then after() once per thread. An exception may
// not leave an OpenMP region, so a thread that cannot allocate its scratch
// skips its rows and the call reports it (rows done by other threads stay
// written). Rows go to threads in equal runs;
// `Balance::kDynamic` hands them out one at a time instead, for rows of very
// unequal cost (each row's result never depends on which thread ran it).
enum class Balance { kStatic, kDynamic };
template <class Body, class After>
Status ForEachRowInParallel(Workspace& workspace, int threads, int64_t rows, ScratchSlot slot,
                            size_t scratch_floats, Body body, After after,
                            Balance balance = Balance::kStatic) {
  if (threads <= 1 || rows <= 1) {
    // No OpenMP region at all: even a one-thread region costs the caller
    // futex calls, a few microseconds of a small call.
    FlushDenormals flush;
    float* scratch = nullptr;
    try {
      if (scratch_floats > 0) scratch = workspace.Floats(slot, scratch_floats);
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
      if (!ready) scratch = workspace.Floats(slot, scratch_floats);
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

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_PARALLEL_H_
