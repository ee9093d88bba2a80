#include "service.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string_view>

#include "infer.h"

namespace attnscore::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a request waits for the byte budget before it gets 503.
constexpr std::chrono::milliseconds kBudgetPatience{500};

// When this thread's current request arrived (httplib serves a connection's
// requests one at a time on one thread); unset for requests refused before
// routing, such as 413.
thread_local Clock::time_point request_start;
thread_local bool request_started = false;
// Whether Service::Account has counted this thread's current request, and
// the latency it measured (-1 where the arrival is unknown).
thread_local bool request_accounted = false;
thread_local double request_seconds = -1;

void Reply(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
}

void ReplyError(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  response.set_content(ErrorBody(message), "application/json");
}

// The {name} of a /v2/models/{name}[/versions/1]/infer path, else "".
std::string InferTarget(std::string_view path) {
  const std::string_view prefix = "/v2/models/", suffix = "/infer", version = "/versions/1";
  if (path.size() <= prefix.size() + suffix.size() || path.substr(0, prefix.size()) != prefix ||
      path.substr(path.size() - suffix.size()) != suffix) {
    return "";
  }
  std::string_view name = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
  if (name.size() > version.size() && name.substr(name.size() - version.size()) == version) {
    name.remove_suffix(version.size());
  }
  return name.empty() || name.find('/') != std::string_view::npos ? "" : std::string(name);
}

// Why a request's Content-Length cannot frame its body, or "": none on a
// POST that is not chunked, more than one (even if equal: a proxy may have
// read either), or one that is not a decimal number of at most 18 digits (a
// sign, spaces, hex, an overflow).
std::string ContentLengthProblem(const httplib::Request& request) {
  const size_t count = request.get_header_value_count("Content-Length");
  if (count == 0) {
    // httplib would wait out its read timeout for a body with no length.
    if (request.method == "POST" && !request.has_header("Transfer-Encoding")) {
      return "the request has no Content-Length; a POST must give its body's length";
    }
    return "";
  }
  if (count > 1) {
    return "the request has " + std::to_string(count) + " Content-Length headers; it must have one";
  }
  const std::string value = request.get_header_value("Content-Length");
  if (value.empty() || value.size() > 18 ||
      value.find_first_not_of("0123456789") != std::string::npos) {
    return "the request's Content-Length is '" + value.substr(0, 40) +
           "'; it must be a decimal number of bytes";
  }
  return "";
}

}  // namespace

void Service::Install(httplib::Server* http) {
  http->set_payload_max_length(static_cast<size_t>(state_.options.max_request_bytes));
  // A client may send many requests on one connection (httplib's default
  // closes it after 5).
  http->set_keep_alive_max_count(100000);
  // Headers and body go out in separate writes: without TCP_NODELAY the body
  // waits for the client's delayed ACK (40 ms on Linux).
  http->set_tcp_nodelay(true);
  // Runs before httplib reads a body: a request whose length cannot be
  // trusted is refused before it costs memory or time (RFC 9112 section
  // 6.3: one Content-Length of digits, or a 400).
  http->set_pre_routing_handler([](const httplib::Request& request, httplib::Response& response) {
    request_start = Clock::now();
    request_started = true;
    request_accounted = false;  // as Log left it: each request is counted anew
    const std::string why = ContentLengthProblem(request);
    if (why.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ReplyError(response, 400, why);
    response.set_header("Connection", "close");  // what follows on the socket cannot be framed
    return httplib::Server::HandlerResponse::Handled;
  });
  // Responses httplib makes itself (no route, 413, a malformed request line)
  // get the protocol's JSON error body; ours already have one.
  http->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& request, httplib::Response& response) {
        Account(request, response);
        if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "HTTP " + std::to_string(response.status);
        if (response.status == 413) {
          message = "the request body is over " + std::to_string(state_.options.max_request_bytes) +
                    " bytes (--max-request-bytes)";
        } else if (response.status == 404) {
          message = "no endpoint " + request.method + " " + request.path;
        }
        ReplyError(response, response.status, message);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http->set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::bad_alloc&) {
          message = "out of memory";
        } catch (const std::exception& e) {
          message = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        ReplyError(response, 500, message);
      });
  http->set_logger([this](const httplib::Request& request, const httplib::Response& response) {
    Log(request, response);
  });

  http->Get("/v2/health/live", [](const httplib::Request&, httplib::Response& response) {
    Reply(response, 200, json{{"live", true}});
  });
  http->Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& response) {
    Reply(response, state_.stopping ? 503 : 200, json{{"ready", !state_.stopping}});
  });
  // The server's metadata, at /v2 and at /v2/ (as the protocol's OpenAPI
  // file writes the path).
  http->Get("/v2/?", [](const httplib::Request&, httplib::Response& response) {
    Reply(
        response, 200,
        json{
            {"name", "attnscore"}, {"version", Version()}, {"extensions", {"binary_tensor_data"}}});
  });
  http->Get(R"(/v2/models/([^/]+)(?:/versions/1)?)",
            [this](const httplib::Request& request, httplib::Response& response) {
              int status = 0;
              std::string message;
              const Model* model = state_.ReadyModel(request.matches[1].str(), &status, &message);
              if (model == nullptr) {
                ReplyError(response, status, message);
                return;
              }
              Reply(response, 200, model->Metadata());
            });
  http->Get(R"(/v2/models/([^/]+)(?:/versions/1)?/ready)", [this](const httplib::Request& request,
                                                                  httplib::Response& response) {
    const std::string name = request.matches[1].str();
    int status = 0;
    std::string message;
    // The protocol: 200 means ready, a 4xx not ready.
    if (state_.ReadyModel(name, &status, &message) == nullptr) {
      if (status == 404) {
        ReplyError(response, status, message);
      } else {
        Reply(response, status, json{{"name", name}, {"ready", false}, {"error", message}});
      }
      return;
    }
    const bool ready = !state_.stopping;
    Reply(response, ready ? 200 : 503, json{{"name", name}, {"ready", ready}});
  });
  // The body is read here rather than by httplib, which would parse a body
  // sent as a form (curl -d, urllib's default Content-Type) and refuse one
  // over 8 KiB with 413.
  http->Post(R"(/v2/models/([^/]+)(?:/versions/1)?/infer)",
             [this](const httplib::Request& request, httplib::Response& response,
                    const httplib::ContentReader& read) {
               if (request.is_multipart_form_data()) {
                 read([](const httplib::MultipartFormData&) { return true; },
                      [](const char*, size_t) { return true; });
                 ReplyError(response, 400,
                            "multipart bodies are not taken; send the JSON "
                            "request as the body (application/json)");
                 return;
               }
               const size_t limit = static_cast<size_t>(state_.options.max_request_bytes);
               // The body's bytes are reserved before it is read: its length as
               // claimed (one decimal number, the pre-routing handler saw to
               // it), the limit for a chunked one, none for one over the limit
               // (httplib skips it).
               int64_t claimed = static_cast<int64_t>(limit);
               if (request.has_header("Content-Length")) {
                 claimed = std::stoll(request.get_header_value("Content-Length"));
               }
               const int64_t reserved = claimed > static_cast<int64_t>(limit) ? 0 : claimed;
               if (!state_.budget.Reserve(reserved, kBudgetPatience)) {
                 // The body is read and dropped as it comes, costing no memory:
                 // httplib 0.11 keeps a connection open whatever the answer says,
                 // and would take the unread body for the next request.
                 read([](const char*, size_t) { return true; });
                 response.set_header("Retry-After", "1");
                 ReplyError(response, 503, state_.OverBudget(reserved));
                 return;
               }
               BudgetHold hold(&state_.budget, reserved);
               std::string body;  // freed before the hold gives its bytes back
               body.reserve(static_cast<size_t>(reserved));
               bool too_large = false;
               const bool complete = read([&](const char* data, size_t size) {
                 // httplib refuses a Content-Length over the limit itself (413,
                 // the body skipped); a chunked body is stopped here.
                 if (body.size() + size > limit) {
                   too_large = true;
                   return false;
                 }
                 body.append(data, size);
                 return true;
               });
               if (too_large || response.status == 413) {
                 ReplyError(response, 413,
                            "the request body is over " + std::to_string(limit) +
                                " bytes (--max-request-bytes)");
                 return;
               }
               if (!complete) {
                 ReplyError(response, 400, "the request body could not be read whole");
                 return;
               }
               Infer(request, body, response);
               if (response.status < 400) Account(request, response);
             });
  http->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(state_.metrics.Text(state_.gate, state_.budget),
                         "text/plain; version=0.0.4");
  });
}

void Service::Infer(const httplib::Request& request, const std::string& request_body,
                    httplib::Response& response) {
  int status = 0;
  std::string message;
  const Model* model = state_.ReadyModel(request.matches[1].str(), &status, &message);
  if (model == nullptr) {
    ReplyError(response, status, message);
    return;
  }
  if (!state_.gate.Enter()) {
    response.set_header("Retry-After", "1");
    ReplyError(response, 503, state_.AtCapacity());
    return;
  }
  GateSlot slot(&state_.gate);

  // With the binary tensor data extension, the JSON is the body's first
  // Inference-Header-Content-Length bytes and tensor data follows it.
  size_t json_bytes = request_body.size();
  if (request.has_header("Inference-Header-Content-Length")) {
    const std::string text = request.get_header_value("Inference-Header-Content-Length");
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(text[0])) ||
        value > request_body.size()) {
      ReplyError(response, 400,
                 "Inference-Header-Content-Length is '" + text +
                     "'; want the JSON's length, "
                     "at most the body's " +
                     std::to_string(request_body.size()) + " bytes");
      return;
    }
    json_bytes = static_cast<size_t>(value);
  }
  const InferAnswer answer = server::Infer(*model, state_.engine, request_body, json_bytes,
                                           state_.options.max_request_bytes / 4);
  response.status = answer.status;
  if (answer.json_bytes == answer.body.size()) {
    response.set_content(answer.body, "application/json");
  } else {
    response.set_header("Inference-Header-Content-Length", std::to_string(answer.json_bytes));
    response.set_content(answer.body, "application/octet-stream");
  }
}

void Service::Account(const httplib::Request& request, const httplib::Response& response) {
  if (request_accounted) return;
  request_accounted = true;
  request_seconds = -1;
  if (request_started) {
    request_seconds = std::chrono::duration<double>(Clock::now() - request_start).count();
    request_started = false;
  }
  const std::string target = InferTarget(request.path);
  if (!target.empty()) {
    state_.metrics.Record(state_.models.count(target) ? target : "unknown", response.status,
                          request_seconds);
  }
}

void Service::Log(const httplib::Request& request, const httplib::Response& response) {
  Account(request, response);
  const double seconds = request_seconds;
  request_accounted = false;  // the next request on this thread is a new one
  const std::string target = InferTarget(request.path);
  json line = {{"time", LogTime()},
               {"method", request.method},
               {"path", request.path},
               {"status", response.status},
               // The body's length as claimed; 0 where no valid claim was made.
               {"request_bytes",
                ContentLengthProblem(request).empty()
                    ? std::strtoull(request.get_header_value("Content-Length").c_str(), nullptr, 10)
                    : 0},
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
