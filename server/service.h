// The Open Inference Protocol's REST endpoints over the server's state
// (state.h: models, admission, metrics, readiness), with one JSON log line
// per request. docs/serving.md.
#ifndef ATTNSCORE_SERVER_SERVICE_H_
#define ATTNSCORE_SERVER_SERVICE_H_

#include <httplib.h>

#include <string>

#include "state.h"

namespace attnscore::server {

class Service {
 public:
  explicit Service(ServerState& state) : state_(state) {}

  // Routes, limits, the error and exception handlers and the logger.
  void Install(httplib::Server* http);

 private:
  void Infer(const httplib::Request& request, const std::string& body, httplib::Response& response);
  // Counts the request in the metrics, once, before its response is
  // written: a client that has its response sees it in /metrics. Called by
  // the error handler (every status from 400) and after an inference's
  // handler; the logger calls it for any request neither did.
  void Account(const httplib::Request& request, const httplib::Response& response);
  void Log(const httplib::Request& request, const httplib::Response& response);

  ServerState& state_;
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_SERVICE_H_
