// What every engine call sets up and then restores for its caller, and how
// it keeps exceptions from crossing the API.
#ifndef ATTNSCORE_BASE_CALL_SCOPE_H_
#define ATTNSCORE_BASE_CALL_SCOPE_H_

#include <exception>
#include <memory>
#include <new>
#include <string>

#include "attnscore/cancel.h"
#include "attnscore/options.h"
#include "attnscore/status.h"
#include "base/thread_team.h"
#include "base/workspace.h"

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

// What an Engine owns from Create on: its options, its thread team and the
// workspaces it lends its calls (one per call running at the same time,
// kept between calls). Every op, path and helper of a call reaches them
// through the call's CallContext.
struct EngineContext {
  EngineContext(const EngineOptions& engine_options, std::unique_ptr<ThreadTeam> thread_team)
      : options(engine_options),
        team(std::move(thread_team)),
        workspaces(engine_options.threads, team.get()) {}
  const EngineOptions options;
  const std::unique_ptr<ThreadTeam> team;
  WorkspacePool workspaces;
};

// What one call passes down: the engine's options and the call's own
// workspace.
struct CallContext {
  const EngineOptions& options;
  Workspace& workspace;
  int threads() const { return options.threads; }
};

// The CancelToken of the calling thread's innermost CancelScope, or null
// (attnscore/cancel.h): a thread_local, the one other than a team worker's
// index in engine/.
const CancelToken* ThreadCancelToken();
void SetThreadCancelToken(const CancelToken* token);

// One engine call's setup: denormals are flushed and a workspace is taken
// from the engine's pool, checking the thread's cancel token; the caller's
// floating-point mode comes back, and the workspace goes back to the pool
// (trimmed), when it ends. Calls do not nest.
class CallScope {
 public:
  // Throws std::bad_alloc (a new workspace).
  explicit CallScope(EngineContext& engine);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

  const CallContext& call() const { return call_; }

 private:
  FlushDenormals flush_;
  EngineContext& engine_;
  std::unique_ptr<Workspace> workspace_;
  CallContext call_;
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

// An engine call: body(call) inside a CallScope of `engine`, guarded.
// A call stopped by its cancel token (ForEachRowInParallel's "cancelled")
// says which op it stopped.
template <class Body>
Status RunCall(EngineContext& engine, const char* op, Body body) {
  Status status = Guarded(op, [&] {
    CallScope scope(engine);
    return body(scope.call());
  });
  if (status.code() == StatusCode::kCancelled) {
    return Status::Cancelled(std::string(op) + ": cancelled; its outputs are partly written");
  }
  return status;
}

}  // namespace attnscore::internal

#endif  // ATTNSCORE_BASE_CALL_SCOPE_H_
