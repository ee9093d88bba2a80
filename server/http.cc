// The HTTP layer's connections (http.h): an acceptor, and a pool of
// threads, started as connections need them, of which each serves one
// connection at a time from its first
// byte to its close, reading, handling and writing on the same thread (a
// hand-off between threads costs a wake-up of another CPU, which on a
// virtual machine is hundreds of microseconds). Every wait is a poll with a
// deadline, so a slow client holds its thread for request_timeout at most,
// and a connection waiting for a head can be taken over at the limit.
#include "http.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

namespace attnscore::server::http {
namespace {

using std::chrono::milliseconds;

// How often the acceptor looks at the stop flag, and a waiting head hook
// is asked again.
constexpr milliseconds kTick{20};
constexpr size_t kReadChunk = 64 << 10;

Response ErrorResponse(int status, const std::string& message) {
  Response response;
  response.status = status;
  response.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
  response.close = true;
  return response;
}

int RemainingMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// Waits until `fd` has `events` or `deadline` passes; false on the deadline.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    const int n = poll(&entry, 1, RemainingMs(deadline));
    if (n > 0) return true;
    if (n == 0 || (n < 0 && errno != EINTR)) return false;
  }
}

}  // namespace

struct Server::Pool {
  // A connection as the acceptor sees it: whether it waits for a request's
  // head (so it may be taken over), and since when.
  struct Slot {
    bool in_head = true;
    Clock::time_point since;
    bool evicted = false;
  };

  Limits limits;
  Hooks hooks;
  std::atomic<int>* open_count;
  int listener = -1;
  std::atomic<bool> stopping{false};

  std::mutex mutex;  // guards slots, pending, quit, idle, threads
  std::condition_variable work;
  std::map<int, Slot> slots;  // every accepted connection, by fd
  std::deque<int> pending;    // accepted, waiting for a thread
  bool quit = false;
  int idle = 0;  // threads waiting for a connection
  std::vector<std::thread> threads;

  Pool(Limits l, Hooks h, std::atomic<int>* count)
      : limits(std::move(l)), hooks(std::move(h)), open_count(count) {}

  // Marks the connection as waiting for a head (since now) or not; false
  // when it was taken over meanwhile.
  bool Mark(int fd, bool in_head) {
    std::lock_guard<std::mutex> lock(mutex);
    Slot& slot = slots[fd];
    if (slot.evicted || (in_head && stopping)) return false;
    slot.in_head = in_head;
    slot.since = Clock::now();
    return true;
  }

  // Writes a response; false when the client did not take it in time.
  bool Write(int fd, Response response) {
    std::string head =
        "HTTP/1.1 " + std::to_string(response.status) + " " + Reason(response.status) + "\r\n";
    if (!response.body.empty()) head += "Content-Type: " + response.content_type + "\r\n";
    head += "Content-Length: " + std::to_string(response.body.size()) + "\r\n";
    for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
    if (response.close) head += "Connection: close\r\n";
    head += "\r\n";
    size_t sent = 0;
    const size_t total = head.size() + response.body.size();
    // One deadline for the whole answer: request_timeout, and a second per
    // MiB (a client reading slower is cut off).
    const Clock::time_point deadline =
        Clock::now() + limits.request_timeout + milliseconds(1000 * (total >> 20));
    while (sent < total) {
      iovec parts[2];
      int count = 0;
      if (sent < head.size()) {
        parts[count++] = {head.data() + sent, head.size() - sent};
        parts[count++] = {response.body.data(), response.body.size()};
      } else {
        parts[count++] = {response.body.data() + (sent - head.size()), total - sent};
      }
      msghdr message{};
      message.msg_iov = parts;
      message.msg_iovlen = count;
      const ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!WaitFor(fd, POLLOUT, deadline)) return false;
      } else {
        return false;
      }
    }
    return true;
  }

  // Closes the connection's writing side and reads what the client still
  // sends, dropped, for up to 2 s (RFC 9112 section 9.6): a client still
  // sending a body the answer refused reads the answer before the close,
  // rather than a reset.
  void Linger(int fd) {
    shutdown(fd, SHUT_WR);
    if (!Mark(fd, true)) return;  // evictable meanwhile, as if waiting for a head
    const Clock::time_point deadline =
        Clock::now() + std::min<milliseconds>(milliseconds(2000), limits.request_timeout);
    char sink[4 << 10];
    while (WaitFor(fd, POLLIN, deadline)) {
      const ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
    }
  }

  // Reads up to `want` more bytes into `in` by `deadline`. 1: read some;
  // 0: the client closed its side; -1: the deadline passed or an error.
  int Read(int fd, std::string* in, size_t want, Clock::time_point deadline) {
    if (!WaitFor(fd, POLLIN, deadline)) return -1;
    const size_t had = in->size();
    in->resize(had + std::min(want, kReadChunk));
    const ssize_t n = recv(fd, in->data() + had, in->size() - had, MSG_DONTWAIT);
    in->resize(had + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) return 1;
    if (n == 0) return 0;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 1 : -1;
  }

  // Serves one connection's requests, in order, until it closes.
  void Serve(int fd) {
    std::string in;  // bytes read, not yet taken by a request
    bool peer_closed = false;
    for (;;) {
      // The head: idle_timeout for its first byte, request_timeout for all.
      if (!Mark(fd, true)) return;
      Request request;
      Clock::time_point first_byte = Clock::now();
      Clock::time_point deadline =
          first_byte + (in.empty() ? limits.idle_timeout : limits.request_timeout);
      // The head is parsed once its blank line is in (or it passed the
      // limit); each read looks for that line among the new bytes only, so
      // a head sent a byte at a time costs its length, not its square.
      HeadParse parse;
      size_t scanned = 0;
      bool started = !in.empty();
      for (;;) {
        size_t blank = 0;  // empty lines before a request, dropped at once
        while (in.compare(blank, 2, "\r\n") == 0) blank += 2;
        if (blank > 0) in.erase(0, blank);
        const size_t from = scanned > 3 ? scanned - 3 : 0;
        scanned = in.size();
        if (in.find("\r\n\r\n", from) != std::string::npos || in.size() > limits.max_head_bytes) {
          parse = ParseHead(in, limits, &request);
          if (parse.result != HeadParse::Result::kIncomplete) break;
        }
        if (peer_closed) return;
        const size_t room = limits.max_head_bytes + 1 - std::min(in.size(), limits.max_head_bytes);
        const size_t had = in.size();
        const int got = Read(fd, &in, room, deadline);
        if (got < 0) return;
        if (got == 0) peer_closed = true;
        // The request's deadline runs from its first byte, blank lines too.
        if (!started && in.size() > had) {
          started = true;
          first_byte = Clock::now();
          deadline = first_byte + limits.request_timeout;
        }
      }
      if (!Mark(fd, false)) return;
      request.arrival = first_byte;
      if (parse.result == HeadParse::Result::kBad) {
        Response refusal = ErrorResponse(parse.status, parse.error);
        if (hooks.refused) hooks.refused(request, refusal);
        if (Write(fd, std::move(refusal))) Linger(fd);
        return;
      }
      in.erase(0, parse.head_bytes);

      // Admission, before the body is read.
      const Clock::time_point give_up = Clock::now() + hooks.patience;
      for (;;) {
        Response answer;
        const Verdict verdict = hooks.head ? hooks.head(request, &answer) : Verdict::kRead;
        if (verdict == Verdict::kRead) break;
        if (verdict == Verdict::kAnswer || Clock::now() >= give_up || stopping) {
          answer.close = true;
          if (hooks.refused) hooks.refused(request, answer);
          if (Write(fd, std::move(answer))) Linger(fd);
          return;
        }
        std::this_thread::sleep_for(kTick);
      }

      // The body, by the same deadline as the head; a client that asked
      // first (Expect: 100-continue) is told to send it.
      const size_t body_bytes = static_cast<size_t>(parse.body_bytes);
      if (parse.continue_expected && in.size() < body_bytes) {
        const std::string go_on = "HTTP/1.1 100 Continue\r\n\r\n";
        if (send(fd, go_on.data(), go_on.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(go_on.size())) {
          return;
        }
      }
      in.reserve(body_bytes);
      while (in.size() < body_bytes) {
        if (peer_closed || Read(fd, &in, body_bytes - in.size(), deadline) <= 0) {
          std::string().swap(in);  // the body goes before the hold gives its bytes back
          return;
        }
      }
      if (in.size() == body_bytes) {
        request.body.swap(in);  // the usual case: nothing pipelined after it
      } else {
        request.body = in.substr(0, body_bytes);
        in.erase(0, body_bytes);
      }

      Response response;
      hooks.handle(request, &response);
      std::string().swap(request.body);  // the body goes before the hold gives its bytes back
      request.hold.reset();
      // A half-closed connection is closed once the requests it sent are
      // answered (above, when its buffer holds no more).
      response.close = response.close || stopping || !request.KeepAlive();
      const bool close_after = response.close;
      if (!Write(fd, std::move(response))) return;
      if (close_after) {
        Linger(fd);
        return;
      }
    }
  }

  // A pool thread: takes accepted connections and serves each to its end.
  void Work() {
    for (;;) {
      int fd;
      {
        std::unique_lock<std::mutex> lock(mutex);
        ++idle;
        work.wait(lock, [&] { return quit || !pending.empty(); });
        --idle;
        if (pending.empty()) return;
        fd = pending.front();
        pending.pop_front();
      }
      Serve(fd);
      {
        std::lock_guard<std::mutex> lock(mutex);
        slots.erase(fd);
        close(fd);
      }
      open_count->fetch_sub(1);
      work.notify_all();  // the acceptor may wait for a free thread
    }
  }

  // Takes over the connection that has waited longest for a head, if any:
  // shut down, its thread ends it. Called with `mutex` held.
  bool EvictOne() {
    int victim = -1;
    Clock::time_point oldest = Clock::time_point::max();
    for (const auto& [fd, slot] : slots) {
      if (slot.in_head && !slot.evicted && slot.since < oldest) {
        victim = fd;
        oldest = slot.since;
      }
    }
    if (victim < 0) return false;
    slots[victim].evicted = true;
    shutdown(victim, SHUT_RDWR);
    return true;
  }

  void Run() {
    while (!stopping) {
      pollfd entry{listener, POLLIN, 0};
      if (poll(&entry, 1, static_cast<int>(kTick.count())) <= 0) continue;
      std::unique_lock<std::mutex> lock(mutex);
      // At the limit: take over a connection waiting for a head, or wait
      // for one to close.
      if (static_cast<int>(slots.size()) >= limits.max_connections && !EvictOne()) {
        work.wait_for(lock, kTick);
        continue;
      }
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors: wait for a connection to close rather than spin.
        if (errno == EMFILE || errno == ENFILE) work.wait_for(lock, kTick);
        continue;
      }
      const int on = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      slots[fd].since = Clock::now();
      pending.push_back(fd);
      open_count->fetch_add(1);
      // Threads start as connections need them, up to the limit: only as
      // many as were ever open at once have touched their stacks.
      if (static_cast<int>(pending.size()) > idle &&
          static_cast<int>(threads.size()) < limits.max_connections) {
        try {
          threads.emplace_back([this] { Work(); });
        } catch (const std::system_error&) {
          // No thread to spare: the connection waits for a running one.
        }
      }
      lock.unlock();
      work.notify_one();
    }
    // Stopping: no more connections; those waiting for a head end now, the
    // others once their request is answered.
    close(listener);
    listener = -1;
    {
      std::lock_guard<std::mutex> lock(mutex);
      quit = true;
      for (auto& [fd, slot] : slots) {
        if (slot.in_head) shutdown(fd, SHUT_RD);
      }
    }
    work.notify_all();
    for (std::thread& thread : threads) thread.join();
  }
};

Server::Server(Limits limits, Hooks hooks)
    : pool_(std::make_unique<Pool>(std::move(limits), std::move(hooks), &open_connections_)) {}

Server::~Server() {
  if (pool_->listener >= 0) close(pool_->listener);
}

int Server::Bind(const std::string& host, int port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const std::string where = host + ":" + service;
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    *error = "cannot listen on " + where + " (not an address of this machine)";
    return -1;
  }
  int fd = -1;
  for (addrinfo* address = found; address != nullptr && fd < 0; address = address->ai_next) {
    fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (bind(fd, address->ai_addr, address->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    *error = "cannot listen on " + where + " (address in use, or not this machine's)";
    return -1;
  }
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &size);
  pool_->listener = fd;
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

void Server::Run() { pool_->Run(); }

void Server::Stop() { pool_->stopping = true; }

}  // namespace attnscore::server::http
