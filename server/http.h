// The server's HTTP/1.1 layer (RFC 9112), written for hostile clients. A
// pool of threads serves connections, each thread one connection at a time,
// reading, handling and writing requests on that thread. Its bounds:
// - a request's head (request line and headers) is at most
//   Limits::max_head_bytes, else 431; its head and body arrive within
//   Limits::request_timeout of its first byte, a connection's next request
//   begins within Limits::idle_timeout, else the connection closes;
// - a body is framed by exactly one Content-Length of digits (else 400;
//   Transfer-Encoding is refused with 501), and is at most
//   Limits::max_body_bytes (else 413): both answered before the body is
//   read, closing the connection, so nothing unread is ever parsed;
// - at Limits::max_connections, a new connection takes the place of the one
//   that has waited longest for a request's head;
// - pipelined requests are answered in order; a request followed by a
//   half-close (shutdown(SHUT_WR)) is answered, then the connection closes.
// docs/serving.md, "HTTP".
#ifndef ATTNSCORE_SERVER_HTTP_H_
#define ATTNSCORE_SERVER_HTTP_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnscore::server::http {

using Clock = std::chrono::steady_clock;

struct Request {
  std::string method;
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::string path;     // percent-decoded, without the query
  std::string query;    // after '?', as sent
  // Header names lower-cased, values trimmed, in arrival order.
  std::vector<std::pair<std::string, std::string>> headers;
  // The body's length as its one valid Content-Length claims it; 0 without
  // one, or when the head was refused before its framing was read.
  int64_t content_length = 0;
  Clock::time_point arrival;  // when the head's first byte came
  // Whatever the head hook keeps for the request's life (a byte budget's
  // hold): released once the request is handled or the connection ends,
  // after the body (declared after it, so destroyed before it) is freed.
  std::shared_ptr<void> hold;
  std::string body;

  // The first value of header `name` (lower case), or null.
  const std::string* Header(std::string_view name) const;
  size_t HeaderCount(std::string_view name) const;
  // Whether the connection may stay open after the answer (RFC 9112 9.3):
  // HTTP/1.1 unless "Connection: close", HTTP/1.0 with "keep-alive" only.
  bool KeepAlive() const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // besides the framing ones
  bool close = false;  // close the connection once this is written
};

struct Limits {
  size_t max_head_bytes = 64 << 10;
  int64_t max_body_bytes = int64_t{16} << 20;
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds idle_timeout{5000};  // between requests of a connection
  int max_connections = 256;                     // and as many threads
};

// What the head hook decides.
enum class Verdict {
  kRead,    // read the body, then handle the request
  kAnswer,  // send the response given at once and close
  kWait,    // ask again shortly; after `patience`, send the response given and close
};

struct Hooks {
  // A request's head has arrived, framing checked (body not read).
  std::function<Verdict(Request& head, Response* answer)> head;
  std::chrono::milliseconds patience{500};
  // A complete request.
  std::function<void(const Request&, Response*)> handle;
  // Every response the layer makes itself (400, 413, 431, 501, 505, and the
  // head hook's answers), before it is written: for the log and the
  // metrics. `request` has what was parsed.
  std::function<void(const Request&, const Response&)> refused;
};

// The parse of a request's head from the start of `buffer`.
struct HeadParse {
  enum class Result { kIncomplete, kDone, kBad } result = Result::kIncomplete;
  size_t head_bytes = 0;   // kDone: the head's length, its blank line included
  int64_t body_bytes = 0;  // kDone: the Content-Length (0 without one)
  bool continue_expected = false;  // kDone: "Expect: 100-continue" (HTTP/1.1)
  int status = 400;        // kBad: the answer's status
  std::string error;       // kBad: why
};
HeadParse ParseHead(std::string_view buffer, const Limits& limits, Request* request);

class Server {
 public:
  Server(Limits limits, Hooks hooks);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (0 picks a free one) and listens; the bound port, or -1
  // with `*error` set.
  int Bind(const std::string& host, int port, std::string* error);
  // Serves until Stop(): then stops accepting, answers the requests already
  // complete, and returns once their responses are written.
  void Run();
  // From any thread, once or more.
  void Stop();
  // Connections open now.
  int connections() const { return open_connections_.load(); }

 private:
  struct Pool;
  std::unique_ptr<Pool> pool_;
  std::atomic<int> open_connections_{0};
};

// "Bad Request" for 400, and so on; "" for a status it does not know.
const char* Reason(int status);

}  // namespace attnscore::server::http

#endif  // ATTNSCORE_SERVER_HTTP_H_
