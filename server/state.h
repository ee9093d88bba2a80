// What the server's two front ends, REST (service.h) and gRPC
// (grpc_service.h), share: the engine and its models, admission (a bounded
// queue, refused with 503 / UNAVAILABLE when full), Prometheus metrics,
// a budget of request bytes held at once, readiness that turns off when the
// server stops, and the request log.
// docs/serving.md.
#ifndef ATTNSCORE_SERVER_STATE_H_
#define ATTNSCORE_SERVER_STATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "attnscore/attnscore.h"
#include "repository.h"

namespace attnscore::server {

// At most `slots` requests compute at once; up to `max_waiting` more wait for
// a slot; any request beyond that is refused at once.
class Gate {
 public:
  Gate(int slots, int max_waiting) : slots_(slots), max_waiting_(max_waiting) {}
  // True once the caller holds a slot (call Leave after); false, without
  // waiting, when max_waiting requests are waiting already.
  bool Enter();
  // True once the caller holds a slot (call Leave after), where one is free
  // now; false at once, without waiting or queueing, where none is.
  bool TryEnter();
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

// Holds a slot of a Gate that let it in, until it goes out of scope.
class GateSlot {
 public:
  explicit GateSlot(Gate* gate) : gate_(gate) {}
  ~GateSlot() { gate_->Leave(); }
  GateSlot(const GateSlot&) = delete;
  GateSlot& operator=(const GateSlot&) = delete;

 private:
  Gate* gate_;
};

// Bytes of request bodies the server holds at once, at most `capacity`: a
// request reserves its body's length before the body is read and gives it
// back once answered. Memory for bodies is so bounded however many
// connections upload at once.
class ByteBudget {
 public:
  explicit ByteBudget(int64_t capacity) : capacity_(capacity) {}
  // Reserves `bytes` (at most the capacity) when they fit; never waits.
  bool TryReserve(int64_t bytes);
  void Release(int64_t bytes);
  int64_t held() const;
  int64_t capacity() const { return capacity_; }

 private:
  mutable std::mutex mutex_;
  const int64_t capacity_;
  int64_t held_ = 0;
};

// Holds bytes of a ByteBudget that granted them, until it goes out of scope.
class BudgetHold {
 public:
  BudgetHold(ByteBudget* budget, int64_t bytes) : budget_(budget), bytes_(bytes) {}
  ~BudgetHold() { budget_->Release(bytes_); }
  BudgetHold(const BudgetHold&) = delete;
  BudgetHold& operator=(const BudgetHold&) = delete;

 private:
  ByteBudget* budget_;
  int64_t bytes_;
};

// Request counts by model and status, and an inference latency histogram by
// model, in Prometheus' text format. A gRPC request counts with the HTTP
// status its answer would have over REST.
class Metrics {
 public:
  void Record(const std::string& model, int status, double seconds);
  std::string Text(const Gate& gate, const ByteBudget& budget) const;

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
  // Bytes of request bodies held at once (ByteBudget); 0 for the default,
  // workers * max_request_bytes.
  int64_t max_inflight_bytes = 0;
};

class ServerState {
 public:
  ServerState(const Engine& engine, ModelRepository& models, const ServiceOptions& options)
      : engine(engine),
        models(models),
        options(options),
        gate(options.workers, options.max_queue),
        budget(options.max_inflight_bytes > 0 ? options.max_inflight_bytes
                                              : options.workers * options.max_request_bytes) {}

  // The model `name` when it is there and ready; else null, with the HTTP
  // status (404 unknown, 400 not ready) and the message both front ends give.
  // The caller holds it for the request's life (it may be unloaded meanwhile).
  std::shared_ptr<const Model> ReadyModel(const std::string& name, int* status,
                                          std::string* message) const;
  // The answer when the gate refuses a request (503).
  std::string AtCapacity() const;
  // The answer when the budget refuses a body of `bytes` (503).
  std::string OverBudget(int64_t bytes) const;
  // One line of the request log, on stderr.
  void Log(const nlohmann::json& line);

  const Engine& engine;
  ModelRepository& models;
  const ServiceOptions options;
  Gate gate;
  ByteBudget budget;
  Metrics metrics;
  // Set when the server stops: readiness answers false from then on.
  std::atomic<bool> stopping{false};

 private:
  std::mutex log_mutex_;
};

// The time now, as the log writes it: "2026-12-03T11:20:00Z".
std::string LogTime();

}  // namespace attnscore::server

#endif  // ATTNSCORE_SERVER_STATE_H_
