// The Open Inference Protocol's gRPC service (inference.proto) over the
// server's state (state.h): the same models, parameters, admission, metrics
// and error texts as the REST endpoints, with each error's gRPC code the one
// Triton gives for its HTTP status. docs/serving.md.
#ifndef ATTNSCORE_SERVER_GRPC_SERVICE_H_
#define ATTNSCORE_SERVER_GRPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <condition_variable>
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
  // How a ModelInfer call stands: refused over the byte budget; holding a
  // worker slot already; free to wait for one; or refused, every slot and
  // every place in the queue taken.
  enum class Slot { kOverBudget, kHeld, kWait, kRefused };

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
