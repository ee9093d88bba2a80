#include "service.h"

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string_view>

#include "infer.h"

namespace attnscore::server {
namespace {

using nlohmann::json;

void Reply(http::Response* response, int status, const json& body) {
  response->status = status;
  response->content_type = "application/json";
  response->body = body.dump(-1, ' ', false, json::error_handler_t::replace);
}

void ReplyError(http::Response* response, int status, const std::string& message) {
  response->status = status;
  response->content_type = "application/json";
  response->body = ErrorBody(message);
}

// A /v2/models/{name}[/versions/1][/{action}] path: the name and the action
// ("" for the metadata, "ready" or "infer"); false for any other path.
bool ModelPath(std::string_view path, std::string* name, std::string* action) {
  const std::string_view prefix = "/v2/models/";
  if (path.substr(0, prefix.size()) != prefix) return false;
  path.remove_prefix(prefix.size());
  const size_t slash = path.find('/');
  *name = std::string(path.substr(0, slash));
  std::string_view rest = slash == std::string_view::npos ? "" : path.substr(slash);
  if (rest.substr(0, 11) == "/versions/1") rest.remove_prefix(11);
  if (name->empty() || (!rest.empty() && rest != "/ready" && rest != "/infer")) return false;
  *action = rest.empty() ? "" : std::string(rest.substr(1));
  return true;
}

// The {name} of an infer path, else "".
std::string InferTarget(const http::Request& request) {
  std::string name, action;
  return ModelPath(request.path, &name, &action) && action == "infer" ? name : "";
}

}  // namespace

http::Hooks Service::Hooks() {
  http::Hooks hooks;
  hooks.head = [this](http::Request& head, http::Response* answer) { return Head(head, answer); };
  hooks.handle = [this](const http::Request& request, http::Response* response) {
    Handle(request, response);
  };
  hooks.refused = [this](const http::Request& request, const http::Response& response) {
    Finish(request, response);
  };
  return hooks;
}

http::Verdict Service::Head(http::Request& head, http::Response* answer) {
  // A body's bytes are reserved before it is read, whatever its route; a
  // request that would pass the budget waits (the layer asks again), then
  // gets 503.
  const int64_t bytes = head.content_length;
  if (bytes == 0) return http::Verdict::kRead;
  if (state_.budget.TryReserve(bytes)) {
    head.hold = std::make_shared<BudgetHold>(&state_.budget, bytes);
    return http::Verdict::kRead;
  }
  ReplyError(answer, 503, state_.OverBudget(bytes));
  answer->headers.emplace_back("Retry-After", "1");
  return http::Verdict::kWait;
}

void Service::Handle(const http::Request& request, http::Response* response) {
  try {
    Route(request, response);
  } catch (const std::bad_alloc&) {
    ReplyError(response, 500, "out of memory");
  } catch (const std::exception& e) {
    ReplyError(response, 500, std::string("internal error: ") + e.what());
  }
  Finish(request, *response);
}

void Service::Route(const http::Request& request, http::Response* response) {
  const std::string& path = request.path;
  std::string name, action;
  if (request.method == "POST" && ModelPath(path, &name, &action) && action == "infer") {
    Infer(request, name, response);
  } else if (request.method == "POST" && path.rfind("/v2/repository/", 0) == 0) {
    Repository(request, response);
  } else if (request.method != "GET") {
    ReplyError(response, 404, "no endpoint " + request.method + " " + path);
  } else if (path == "/v2/health/live") {
    Reply(response, 200, json{{"live", true}});
  } else if (path == "/v2/health/ready") {
    Reply(response, state_.stopping ? 503 : 200, json{{"ready", !state_.stopping}});
  } else if (path == "/v2" || path == "/v2/") {
    // The server's metadata, at /v2 and at /v2/ (as the protocol's OpenAPI
    // file writes the path).
    Reply(response, 200,
          json{{"name", "attnscore"},
               {"version", Version()},
               {"extensions", {"binary_tensor_data", "model_repository"}}});
  } else if (path == "/metrics") {
    response->content_type = "text/plain; version=0.0.4";
    response->body = state_.metrics.Text(state_.gate, state_.budget);
  } else if (ModelPath(path, &name, &action) && action != "infer") {
    int status = 0;
    std::string message;
    const std::shared_ptr<const Model> model = state_.ReadyModel(name, &status, &message);
    if (action.empty()) {
      if (model == nullptr) {
        ReplyError(response, status, message);
      } else {
        Reply(response, 200, model->Metadata());
      }
    } else if (model == nullptr) {
      // The protocol: 200 means ready, a 4xx not ready.
      if (status == 404) {
        ReplyError(response, status, message);
      } else {
        Reply(response, status, json{{"name", name}, {"ready", false}, {"error", message}});
      }
    } else {
      const bool ready = !state_.stopping;
      Reply(response, ready ? 200 : 503, json{{"name", name}, {"ready", ready}});
    }
  } else {
    ReplyError(response, 404, "no endpoint " + request.method + " " + path);
  }
}

void Service::Repository(const http::Request& request, http::Response* response) {
  const std::string& path = request.path;
  if (path == "/v2/repository/index") {
    // {"ready": true} in the body lists the ready models alone.
    const json options = json::parse(request.body.empty() ? "{}" : request.body, nullptr, false);
    if (!options.is_object() || (options.contains("ready") && !options["ready"].is_boolean())) {
      ReplyError(response, 400, "the index request's body is {\"ready\": true|false} or empty");
      return;
    }
    const bool ready_only = options.value("ready", false);
    json index = json::array();
    for (const ModelRepository::Entry& entry : state_.models.Index()) {
      if (ready_only && !entry.ready) continue;
      json item = {
          {"name", entry.name}, {"version", "1"}, {"state", entry.ready ? "READY" : "UNAVAILABLE"}};
      if (!entry.ready) item["reason"] = entry.reason;
      index.push_back(std::move(item));
    }
    Reply(response, 200, index);
    return;
  }
  const std::string prefix = "/v2/repository/models/";
  const size_t slash = path.rfind('/');
  const std::string name = path.size() > prefix.size() && slash > prefix.size()
                               ? path.substr(prefix.size(), slash - prefix.size())
                               : "";
  const std::string verb = path.substr(slash + 1);
  if (path.rfind(prefix, 0) != 0 || name.empty() || name.find('/') != std::string::npos ||
      (verb != "load" && verb != "unload")) {
    ReplyError(response, 404, "no endpoint POST " + path);
    return;
  }
  // Triton's load takes parameters (a config, files) that this server has
  // no use for: refused rather than dropped.
  const json options = json::parse(request.body.empty() ? "{}" : request.body, nullptr, false);
  if (!options.is_object() || options.contains("parameters")) {
    ReplyError(response, 400, "POST " + path + " takes an empty body or {}; no parameters");
    return;
  }
  std::string error;
  const int status =
      verb == "load" ? state_.models.Load(name, &error) : state_.models.Unload(name, &error);
  if (status == 200) {
    Reply(response, 200, json::object());
  } else {
    ReplyError(response, status, error);
  }
}

void Service::Infer(const http::Request& request, const std::string& name,
                    http::Response* response) {
  int status = 0;
  std::string message;
  const std::shared_ptr<const Model> model = state_.ReadyModel(name, &status, &message);
  if (model == nullptr) {
    ReplyError(response, status, message);
    return;
  }
  if (!state_.gate.Enter()) {
    response->headers.emplace_back("Retry-After", "1");
    ReplyError(response, 503, state_.AtCapacity());
    return;
  }
  GateSlot slot(&state_.gate);

  // With the binary tensor data extension, the JSON is the body's first
  // Inference-Header-Content-Length bytes and tensor data follows it.
  const std::string& body = request.body;
  size_t json_bytes = body.size();
  if (const std::string* text = request.Header("inference-header-content-length")) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>((*text)[0])) ||
        value > body.size()) {
      ReplyError(response, 400,
                 "Inference-Header-Content-Length is '" + *text +
                     "'; want the JSON's length, at most the body's " +
                     std::to_string(body.size()) + " bytes");
      return;
    }
    json_bytes = static_cast<size_t>(value);
  }
  InferAnswer answer =
      server::Infer(*model, state_.engine, body, json_bytes, state_.options.max_request_bytes / 4);
  response->status = answer.status;
  response->content_type = "application/json";
  if (answer.json_bytes != answer.body.size()) {
    response->headers.emplace_back("Inference-Header-Content-Length",
                                   std::to_string(answer.json_bytes));
    response->content_type = "application/octet-stream";
  }
  response->body = std::move(answer.body);
}

void Service::Finish(const http::Request& request, const http::Response& response) {
  // Latency from the head's first byte; unknown for a request the layer
  // could not parse.
  double seconds = -1;
  if (request.arrival != http::Clock::time_point()) {
    seconds = std::chrono::duration<double>(http::Clock::now() - request.arrival).count();
  }
  const std::string target = InferTarget(request);
  if (!target.empty()) {
    state_.metrics.Record(state_.models.Find(target) ? target : "unknown", response.status,
                          seconds);
  }
  json line = {{"time", LogTime()},
               {"method", request.method},
               {"path", request.path},
               {"status", response.status},
               {"request_bytes", request.content_length},
               {"response_bytes", response.body.size()}};
  if (seconds >= 0) line["latency_us"] = static_cast<int64_t>(seconds * 1e6);
  if (!target.empty()) line["model"] = target;
  if (response.status >= 400) {
    const json error = json::parse(response.body, nullptr, false);
    if (error.is_object() && error.contains("error")) line["error"] = error["error"];
  }
  state_.Log(line);
}

}  // namespace attnscore::server
