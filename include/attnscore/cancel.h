// Stopping a long call from another thread, or from a signal handler.
//
//   attnscore::CancelToken token;            // shared with whoever may stop the call
//   {
//     attnscore::CancelScope scope(token);   // calls this thread makes now check it
//     Status s = engine->DotProductAttention(...);   // token.Cancel() elsewhere:
//   }                                        //   s.code() == StatusCode::kCancelled
//
// A call checks the token between rows of its work (a row: one query's
// scores, softmax and output, or one row of a matrix product's block), so it
// stops within about one row's time on each thread. A cancelled call
// returns StatusCode::kCancelled; the rows it finished are written, the
// others not: treat its outputs as garbage. A call that finishes its work
// before it sees the token returns OK. KvCache::Append, AppendTo and Clear
// are never cancelled (a cache is never left half-appended).
#ifndef ATTNSCORE_CANCEL_H_
#define ATTNSCORE_CANCEL_H_

#include <atomic>

#include "attnscore/export.h"

namespace attnscore {

class CancelToken {
 public:
  // From any thread, or a signal handler (a lock-free atomic store).
  void Cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  void Reset() noexcept { cancelled_.store(false, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
  static_assert(std::atomic<bool>::is_always_lock_free);
};

// While it lives, every engine call the constructing thread makes checks
// `token` (which must outlive the scope). Scopes nest; the innermost token
// counts, and the one before it comes back when the scope ends. Destroy
// scopes on the thread that made them, in reverse order.
class ATTNSCORE_API CancelScope {
 public:
  explicit CancelScope(const CancelToken& token) noexcept;
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const CancelToken* previous_;
};

}  // namespace attnscore

#endif  // ATTNSCORE_CANCEL_H_
