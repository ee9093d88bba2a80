// What every engine call sets up and then restores for its caller.
#ifndef ATTNSCORE_API_CALL_SCOPE_H_
#define ATTNSCORE_API_CALL_SCOPE_H_

#include <cstddef>

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

// A per-thread buffer of at least `count` floats that lives until the thread
// ends; `slot` tells apart buffers one call needs at the same time. Grows, never
// shrinks, so the steady state does not allocate.
float* ThreadScratch(int slot, size_t count);

}  // namespace attnscore

#endif  // ATTNSCORE_API_CALL_SCOPE_H_
