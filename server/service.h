// The Open Inference Protocol's REST endpoints over the server's state
// (state.h: models, admission, metrics, readiness), as the hooks of the
// HTTP layer (http.h), with one JSON log line per request. docs/serving.md.
#ifndef ATTNSCORE_SERVER_SERVICE_H_
#define ATTNSCORE_SERVER_SERVICE_H_

#include <string>

#include "http.h"
#include "state.h"

namespace attnscore::server {

class Service {
 public:
  explicit Service(ServerState& state) : state_(state) {}

  // Admission of a request's head (the byte budget), the routes, and the
  // metrics and log line of every answer.
  http::Hooks Hooks();

 private:
  http::Verdict Head(http::Request& head, http::Response* answer);
  void Handle(const http::Request& request, http::Response* response);
  void Route(const http::Request& request, http::Response* response);
  void Infer(const http::Request& request, const std::string& model, http::Response* response);
  // POST /v2/repository/index, /v2/repository/models/NAME/load and unload.
  void Repository(const http::Request& request, http::Response* response);
  // Counts an inference answer in the metrics and writes the request's log
  // line; called before the answer is written, so a client that has its
  // answer finds it in the next /metrics.
  void Finish(const http::Request& request, const http::Response& response);

  ServerState& state_;
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_SERVICE_H_
