// The Open Inference Protocol's gRPC service (inference.proto) over the
// server's state (state.h): the same models, parameters, admission, metrics
// and error texts as the REST endpoints, with each error's gRPC code the one
// Triton gives for its HTTP status. docs/serving.md.
#ifndef ATTNSCORE_SERVER_GRPC_SERVICE_H_
#define ATTNSCORE_SERVER_GRPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "inference.grpc.pb.h"
#include "state.h"

namespace attnscore::server {

class GrpcService final : public inference::GRPCInferenceService::Service {
 public:
  explicit GrpcService(ServerState& state) : state_(state) {}

  grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* request,
                          inference::ServerLiveResponse* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const inference::ServerReadyRequest* request,
                           inference::ServerReadyResponse* response) override;
  grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override;
  grpc::Status ServerMetadata(grpc::ServerContext* context,
                              const inference::ServerMetadataRequest* request,
                              inference::ServerMetadataResponse* response) override;
  grpc::Status ModelMetadata(grpc::ServerContext* context,
                             const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override;
  grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* request,
                          inference::ModelInferResponse* response) override;

 private:
  // The answer of ModelInfer and its HTTP status (200 when it succeeded).
  int Infer(const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
            std::string* error);

  ServerState& state_;
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_GRPC_SERVICE_H_
