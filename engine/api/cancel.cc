#include "attnscore/cancel.h"

#include "base/call_scope.h"

namespace attnscore {

CancelScope::CancelScope(const CancelToken& token) noexcept
    : previous_(internal::ThreadCancelToken()) {
  internal::SetThreadCancelToken(&token);
}

CancelScope::~CancelScope() { internal::SetThreadCancelToken(previous_); }

}  // namespace attnscore
