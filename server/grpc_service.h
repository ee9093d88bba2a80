// The Open Inference Protocol's gRPC service (inference.proto) over the
// server's state (state.h): the same models, parameters, admission, metrics
// and error texts as the REST endpoints, with each error's gRPC code the one
// Triton gives for its HTTP status. docs/serving.md.
#ifndef ATTNSCORE_SERVER_GRPC_SERVICE_H_
#define ATTNSCORE_SERVER_GRPC_SERVICE_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "inference.grpc.pb.h"
#include "state.h"

namespace attnscore::server {

// Threads for the ModelInfer calls that find every worker slot taken: a gRPC
// callback must not block, so such a call waits for its slot on one of
// these. At most `max_calls` calls are posted and not yet done, each with a
// thread (kept for the next once it is done); Post refuses beyond that.
class WaitingCalls {
 public:
  explicit WaitingCalls(int max_calls) : max_calls_(max_calls) {}
  ~WaitingCalls();  // runs every call posted, then joins the threads
  WaitingCalls(const WaitingCalls&) = delete;
  WaitingCalls& operator=(const WaitingCalls&) = delete;

  bool Post(std::function<void()> call);

 private:
  void Run();

  const size_t max_calls_;
  std::mutex mutex_;
  std::condition_variable posted_;
  std::deque<std::function<void()>> calls_;  // posted, not yet taken
  std::vector<std::thread> threads_;
  size_t running_ = 0;  // calls being run
  bool stopping_ = false;
};

// Counts the gRPC calls not yet done, as an interceptor of every call: gRPC
// makes a call's interceptor once the call's request has arrived and the
// call reaches its method, and deletes it once the call is done (its answer
// handed to the kernel, or the call cancelled). A request still arriving is
// not counted.
class LiveCalls final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;
  int64_t count() const { return count_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> count_{0};
};

// Waits, until `deadline` at most, for every gRPC call to be done and every
// byte this process wrote to its TCP connections to be acknowledged by the
// peer. gRPC, once shut down, closes a connection as soon as its last call's
// answer is written; the kernel then resets the connection when the client's
// next frame arrives (a flow-control update, as it reads), dropping what it
// had not yet sent: the tail of a large answer to a client that reads slower
// than the server writes. So gRPC is shut down only after this. A client
// that stops reading holds the wait to its deadline.
void AwaitDelivery(const LiveCalls& calls, std::chrono::steady_clock::time_point deadline);

// Calls are answered through gRPC's callback API on the gRPC thread that
// read them, with no hand-off to a thread of the server's own, except the
// ModelInfer calls WaitingCalls takes. docs/serving.md.
class GrpcService final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit GrpcService(ServerState& state)
      : state_(state), waiting_(state.options.workers + state.options.max_queue) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;

 private:
  // How a ModelInfer call stands: refused, the server stopping; refused over
  // the byte budget; holding a worker slot already; free to wait for one; or
  // refused, every slot and every place in the queue taken.
  enum class Slot { kStopping, kOverBudget, kHeld, kWait, kRefused };

  // ModelInfer's status, counted and logged.
  grpc::Status LoggedInfer(const inference::ModelInferRequest& request,
                           inference::ModelInferResponse* response, Slot slot);
  // The answer of ModelInfer and its HTTP status (200 when it succeeded).
  int Infer(const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
            Slot slot, std::string* error);

  ServerState& state_;
  WaitingCalls waiting_;  // after state_, which it reads when it runs a call
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_GRPC_SERVICE_H_
