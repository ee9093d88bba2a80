#include "state.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace attnscore::server {
namespace {

// Latency buckets of the histogram, in seconds.
constexpr double kBuckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                               0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
constexpr size_t kBucketCount = sizeof(kBuckets) / sizeof(kBuckets[0]);

// Prometheus label values escape backslash, double quote and newline.
std::string LabelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

bool Gate::Enter() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (running_ < slots_) {
    ++running_;
    return true;
  }
  if (waiting_ >= max_waiting_) return false;
  ++waiting_;
  freed_.wait(lock, [&] { return running_ < slots_; });
  --waiting_;
  ++running_;
  return true;
}

bool Gate::TryEnter() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (running_ >= slots_) return false;
  ++running_;
  return true;
}

void Gate::Leave() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
  }
  freed_.notify_one();
}

int Gate::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

int Gate::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

void Metrics::Record(const std::string& model, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{model, status}];
  if (seconds < 0) return;
  Histogram& h = latency_[model];
  h.counts.resize(kBucketCount + 1);
  size_t bucket = 0;
  while (bucket < kBucketCount && seconds > kBuckets[bucket]) ++bucket;
  ++h.counts[bucket];
  ++h.count;
  h.sum += seconds;
}

std::string Metrics::Text(const Gate& gate, const ByteBudget& budget) const {
  std::string text;
  text += "# HELP attnscore_requests_total Inference requests by model and HTTP status.\n";
  text += "# TYPE attnscore_requests_total counter\n";
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, count] : requests_) {
    text += "attnscore_requests_total{model=\"" + LabelValue(key.first) + "\",code=\"" +
            std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  text +=
      "# HELP attnscore_request_duration_seconds Inference latency, arrival until the "
      "response is ready to send.\n";
  text += "# TYPE attnscore_request_duration_seconds histogram\n";
  char number[32];
  for (const auto& [model, h] : latency_) {
    const std::string label = "model=\"" + LabelValue(model) + "\"";
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kBucketCount; ++b) {
      cumulative += h.counts[b];
      std::string le = "+Inf";
      if (b < kBucketCount) {
        std::snprintf(number, sizeof(number), "%g", kBuckets[b]);
        le = number;
      }
      text += "attnscore_request_duration_seconds_bucket{" + label + ",le=\"" + le + "\"} " +
              std::to_string(cumulative) + "\n";
    }
    std::snprintf(number, sizeof(number), "%.9g", h.sum);
    text += "attnscore_request_duration_seconds_sum{" + label + "} " + number + "\n";
    text +=
        "attnscore_request_duration_seconds_count{" + label + "} " + std::to_string(h.count) + "\n";
  }
  text += "# HELP attnscore_queue_depth Inference requests waiting for a worker.\n";
  text += "# TYPE attnscore_queue_depth gauge\n";
  text += "attnscore_queue_depth " + std::to_string(gate.waiting()) + "\n";
  text += "# HELP attnscore_in_flight Inference requests being computed.\n";
  text += "# TYPE attnscore_in_flight gauge\n";
  text += "attnscore_in_flight " + std::to_string(gate.running()) + "\n";
  text +=
      "# HELP attnscore_inflight_bytes Bytes of request bodies and gRPC messages held "
      "(--max-inflight-bytes).\n";
  text += "# TYPE attnscore_inflight_bytes gauge\n";
  text += "attnscore_inflight_bytes " + std::to_string(budget.held()) + "\n";
  return text;
}

bool ByteBudget::TryReserve(int64_t bytes) {
  bytes = std::min(bytes, capacity_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (held_ + bytes > capacity_) return false;
  held_ += bytes;
  return true;
}

void ByteBudget::Release(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_ -= std::min(bytes, capacity_);
}

int64_t ByteBudget::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

std::shared_ptr<const Model> ServerState::ReadyModel(const std::string& name, int* status,
                                                     std::string* message) const {
  std::shared_ptr<const Model> model = models.Find(name);
  if (model == nullptr) {
    *status = 404;
    *message = "unknown model '" + name + "'";
    return nullptr;
  }
  if (!model->ready()) {
    *status = 400;
    *message = "model '" + name + "' is not ready: " + model->not_ready_reason();
    return nullptr;
  }
  return model;
}

std::string ServerState::AtCapacity() const {
  return "the server is at capacity: " + std::to_string(options.max_queue) +
         " requests are waiting already (--max-queue); retry later";
}

std::string ServerState::OverBudget(int64_t bytes) const {
  return "the server holds " + std::to_string(budget.held()) + " bytes of requests already; " +
         std::to_string(bytes) + " more would pass --max-inflight-bytes " +
         std::to_string(budget.capacity()) + "; retry later";
}

void ServerState::Log(const nlohmann::json& line) {
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> lock(log_mutex_);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

std::string LogTime() {
  char time[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc;
  gmtime_r(&now, &utc);
  std::strftime(time, sizeof(time), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return time;
}

}  // namespace attnscore::server
