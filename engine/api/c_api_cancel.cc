// The C API's cancel tokens (attnscore/c_api.h, attnscore/cancel.h).
#include <new>
#include <type_traits>

#include "attnscore/c_api.h"
#include "attnscore/cancel.h"
#include "base/call_scope.h"

// One member: a pointer to the struct is a pointer to its token and back.
struct attnscore_cancel_token {
  attnscore::CancelToken token;
};
static_assert(std::is_standard_layout_v<attnscore_cancel_token>);

attnscore_cancel_token* attnscore_cancel_token_create(void) {
  return new (std::nothrow) attnscore_cancel_token;
}

void attnscore_cancel_token_destroy(attnscore_cancel_token* token) { delete token; }

void attnscore_cancel_token_cancel(attnscore_cancel_token* token) {
  if (token != nullptr) token->token.Cancel();
}

void attnscore_cancel_token_reset(attnscore_cancel_token* token) {
  if (token != nullptr) token->token.Reset();
}

int attnscore_cancel_token_cancelled(const attnscore_cancel_token* token) {
  return token != nullptr && token->token.cancelled() ? 1 : 0;
}

const attnscore_cancel_token* attnscore_set_thread_cancel_token(
    const attnscore_cancel_token* token) {
  const attnscore::CancelToken* previous = attnscore::internal::ThreadCancelToken();
  attnscore::internal::SetThreadCancelToken(token == nullptr ? nullptr : &token->token);
  return reinterpret_cast<const attnscore_cancel_token*>(previous);
}
