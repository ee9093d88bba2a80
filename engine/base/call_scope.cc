#include "base/call_scope.h"

#include <xmmintrin.h>

#include <utility>

namespace attnscore::internal {
namespace {
constexpr unsigned kFlushToZero = 1u << 15;
constexpr unsigned kDenormalsAreZero = 1u << 6;
// All six exception mask bits: a caller who unmasked, say, invalid-operation
// traps must not get SIGFPE from the kernels' deliberate Inf * 0 probes.
constexpr unsigned kMaskAllExceptions = 0x1F80u;
// Rounding control (bits 13-14); cleared means round to nearest, which the
// fast exp's rounding by adding 1.5 * 2^23 relies on whatever the caller set.
constexpr unsigned kRoundingBits = 3u << 13;
}  // namespace

FlushDenormals::FlushDenormals() : saved_(_mm_getcsr()) {
  _mm_setcsr((saved_ & ~kRoundingBits) | kFlushToZero | kDenormalsAreZero | kMaskAllExceptions);
}

FlushDenormals::~FlushDenormals() { _mm_setcsr(saved_); }

namespace {
thread_local const CancelToken* thread_cancel_token = nullptr;
}  // namespace

const CancelToken* ThreadCancelToken() { return thread_cancel_token; }
void SetThreadCancelToken(const CancelToken* token) { thread_cancel_token = token; }

CallScope::CallScope(EngineContext& engine)
    : engine_(engine), workspace_(engine.workspaces.Take()), call_{engine.options, *workspace_} {
  workspace_->set_cancel_token(thread_cancel_token);
}

CallScope::~CallScope() {
  workspace_->set_cancel_token(nullptr);
  engine_.workspaces.Give(std::move(workspace_));
}

}  // namespace attnscore::internal
