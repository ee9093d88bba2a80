// The Open Inference Protocol's REST endpoints over a ModelMap, with the
// server's operations around them: admission (a bounded queue answered with
// 503 when full), Prometheus metrics, one JSON log line per request, and
// readiness that turns off when the server stops. docs/serving.md.
#ifndef ATTNSCORE_SERVER_SERVICE_H_
#define ATTNSCORE_SERVER_SERVICE_H_

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "attnscore/attnscore.h"
#include "models.h"

namespace attnscore::server {

// At most `slots` requests compute at once; up to `max_waiting` more wait for
// a slot; any request beyond that is refused at once.
class Gate {
 public:
  Gate(int slots, int max_waiting) : slots_(slots), max_waiting_(max_waiting) {}
  // True once the caller holds a slot (call Leave after); false, without
  // waiting, when max_waiting requests are waiting already.
  bool Enter();
  void Leave();
  int running() const;
  int waiting() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  const int slots_;
  const int max_waiting_;
  int running_ = 0;
  int waiting_ = 0;
};

// Request counts by model and status, and an inference latency histogram by
// model, in Prometheus' text format.
class Metrics {
 public:
  void Record(const std::string& model, int status, double seconds);
  std::string Text(const Gate& gate) const;

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket of kBuckets, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
};

struct ServiceOptions {
  int workers = 1;     // requests computed at once
  int max_queue = 64;  // requests waiting for a worker before 503
  int64_t max_request_bytes = int64_t{16} << 20;
};

class Service {
 public:
  Service(const Engine& engine, const ModelMap& models, const ServiceOptions& options)
      : engine_(engine),
        models_(models),
        options_(options),
        gate_(options.workers, options.max_queue) {}

  // Routes, limits, the error and exception handlers and the logger.
  void Install(httplib::Server* http);
  // From now on /v2/health/ready answers 503.
  void Stop() { stopping_ = true; }

 private:
  void Infer(const httplib::Request& request, const std::string& body, httplib::Response& response);
  // Counts the request in the metrics, once, before its response is
  // written: a client that has its response sees it in /metrics. Called by
  // the error handler (every status from 400) and after an inference's
  // handler; the logger calls it for any request neither did.
  void Account(const httplib::Request& request, const httplib::Response& response);
  void Log(const httplib::Request& request, const httplib::Response& response);

  const Engine& engine_;
  const ModelMap& models_;
  const ServiceOptions options_;
  Gate gate_;
  Metrics metrics_;
  std::atomic<bool> stopping_{false};
  std::mutex log_mutex_;
};

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_SERVICE_H_
