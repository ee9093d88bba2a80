#include "grpc_service.h"

#include <dirent.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tensors.h"

namespace attnscore::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

Status Bad(const std::string& message) { return Status::InvalidArgument(message); }

// The gRPC code Triton gives an answer of HTTP `status`.
grpc::StatusCode CodeOf(int status) {
  switch (status) {
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status Error(int status, const std::string& message) {
  return grpc::Status(CodeOf(status), message);
}

// A unary call's reactor, finished with `status` on the gRPC thread that
// read the call.
grpc::ServerUnaryReactor* Answered(grpc::CallbackServerContext* context,
                                   const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// Counts itself in `count` from its making to its deletion; lets every
// batch of its call proceed untouched.
class CountedCall final : public grpc::experimental::Interceptor {
 public:
  explicit CountedCall(std::atomic<int64_t>* count) : count_(count) {
    count_->fetch_add(1, std::memory_order_relaxed);
  }
  ~CountedCall() override { count_->fetch_sub(1, std::memory_order_release); }
  CountedCall(const CountedCall&) = delete;
  CountedCall& operator=(const CountedCall&) = delete;

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  std::atomic<int64_t>* count_;
};

// Bytes written to this process's connected TCP sockets and not yet
// acknowledged by their peers (SIOCOUTQ: sent but unacknowledged, plus not
// yet sent), over every descriptor in /proc/self/fd; -1 if that cannot be
// read (no descriptor left to open it with). Descriptors that are not TCP
// sockets fail SO_PROTOCOL or differ in it; listening ones fail SIOCOUTQ. A
// socket that gRPC closes meanwhile fails too, or is read once more if reused.
int64_t UnacknowledgedBytes() {
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return -1;
  int64_t total = 0;
  while (const dirent* entry = readdir(fds)) {
    char* end = nullptr;
    const int fd = static_cast<int>(std::strtol(entry->d_name, &end, 10));
    if (end == entry->d_name || *end != '\0') continue;  // "." and ".."
    int protocol = 0;
    socklen_t size = sizeof(protocol);
    int queued = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &size) == 0 && protocol == IPPROTO_TCP &&
        ioctl(fd, SIOCOUTQ, &queued) == 0) {
      total += queued;
    }
  }
  closedir(fds);
  return total;
}

// A model's single version is "1"; "" lets the server choose it.
bool KnownVersion(const std::string& version) { return version.empty() || version == "1"; }

std::string UnknownVersion(const std::string& model, const std::string& version) {
  return "model '" + model + "' has no version '" + version + "'; its one version is 1";
}

// The request's parameters as the REST form's JSON object.
json Parameters(const google::protobuf::Map<std::string, inference::InferParameter>& map) {
  json parameters = json::object();
  for (const auto& [key, value] : map) {
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        parameters[key] = value.bool_param();
        break;
      case inference::InferParameter::kInt64Param:
        parameters[key] = value.int64_param();
        break;
      case inference::InferParameter::kStringParam:
        parameters[key] = value.string_param();
        break;
      case inference::InferParameter::kDoubleParam:
        parameters[key] = value.double_param();
        break;
      case inference::InferParameter::kUint64Param:
        parameters[key] = value.uint64_param();
        break;
      default:
        parameters[key] = nullptr;
    }
  }
  return parameters;
}

// The request's inputs, from typed contents or from raw_input_contents (one
// entry per input, all or none), checked as ParseInputs checks the REST form.
Status ReadInputs(const inference::ModelInferRequest& request, std::vector<InputTensor>* inputs) {
  const int count = request.inputs_size();
  const bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != count) {
    return Bad("the request has " + std::to_string(count) + " inputs but " +
               std::to_string(request.raw_input_contents_size()) +
               " raw_input_contents; want one per input");
  }
  std::set<std::string> seen;
  inputs->assign(count, InputTensor());
  for (int i = 0; i < count; ++i) {
    const auto& entry = request.inputs(i);
    InputTensor& tensor = (*inputs)[i];
    tensor.name = entry.name();
    tensor.datatype = entry.datatype();
    ATTNSCORE_RETURN_IF_ERROR(CheckDatatype(tensor));
    if (entry.shape_size() > kMaxRank) {
      return Bad("input '" + tensor.name + "' has " + std::to_string(entry.shape_size()) +
                 " dims; at most " + std::to_string(kMaxRank) + " are taken");
    }
    tensor.shape.assign(entry.shape().begin(), entry.shape().end());
    for (int64_t dim : tensor.shape) {
      if (dim < 0 || dim > (int64_t{1} << 62)) {
        return Bad("input '" + tensor.name + "' has shape " + ShapeText(tensor.shape) +
                   "; dims must be integers from 0 to 2^62 (4611686018427387904)");
      }
    }
    const inference::InferTensorContents& contents = entry.contents();
    if (raw) {
      if (entry.has_contents()) {
        return Bad("input '" + tensor.name + "' has contents, but the request gives " +
                   "raw_input_contents: use one or the other");
      }
      const std::string& bytes = request.raw_input_contents(i);
      ATTNSCORE_RETURN_IF_ERROR(CheckRawSize(tensor, bytes.size(),
                                             "raw_input_contents[" + std::to_string(i) + "] has " +
                                                 std::to_string(bytes.size()) + " bytes"));
      ReadRaw(bytes.data(), &tensor);
    } else if (tensor.datatype == "FP32") {
      ATTNSCORE_RETURN_IF_ERROR(CheckElementCount(tensor, contents.fp32_contents_size()));
      tensor.floats.assign(contents.fp32_contents().begin(), contents.fp32_contents().end());
    } else if (tensor.datatype == "INT32") {
      ATTNSCORE_RETURN_IF_ERROR(CheckElementCount(tensor, contents.int_contents_size()));
      tensor.ints.assign(contents.int_contents().begin(), contents.int_contents().end());
    } else {
      ATTNSCORE_RETURN_IF_ERROR(CheckElementCount(tensor, contents.int64_contents_size()));
      tensor.ints.assign(contents.int64_contents().begin(), contents.int64_contents().end());
    }
    if (!seen.insert(tensor.name).second) return Bad("input '" + tensor.name + "' is given twice");
  }
  return Status::Ok();
}

}  // namespace

grpc::Status GrpcService::LoggedInfer(const inference::ModelInferRequest& request,
                                      inference::ModelInferResponse* response, Slot slot) {
  const Clock::time_point start = Clock::now();
  std::string error;
  int status = 500;
  try {
    status = Infer(request, response, slot, &error);
  } catch (const std::bad_alloc&) {
    error = "out of memory";
  } catch (const std::exception& e) {
    error = std::string("internal error: ") + e.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const bool known = state_.models.Find(request.model_name()) != nullptr;
  state_.metrics.Record(known ? request.model_name() : "unknown", status, seconds);
  json line = {{"time", LogTime()},
               {"method", "gRPC"},
               {"path", "/inference.GRPCInferenceService/ModelInfer"},
               {"status", status},
               {"request_bytes", request.ByteSizeLong()},
               {"response_bytes", status == 200 ? response->ByteSizeLong() : 0},
               {"latency_us", static_cast<int64_t>(seconds * 1e6)},
               {"model", request.model_name()}};
  if (!error.empty()) line["error"] = error;
  state_.Log(line);
  if (status != 200) {
    response->Clear();
    return Error(status, error);
  }
  return grpc::Status::OK;
}

// The callback API's entry points: each but ModelInfer answered at once.

grpc::ServerUnaryReactor* GrpcService::ServerLive(grpc::CallbackServerContext* context,
                                                  const inference::ServerLiveRequest*,
                                                  inference::ServerLiveResponse* response) {
  response->set_live(true);
  return Answered(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::ServerReady(grpc::CallbackServerContext* context,
                                                   const inference::ServerReadyRequest*,
                                                   inference::ServerReadyResponse* response) {
  response->set_ready(!state_.stopping);
  return Answered(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::ModelReady(grpc::CallbackServerContext* context,
                                                  const inference::ModelReadyRequest* request,
                                                  inference::ModelReadyResponse* response) {
  int status = 0;
  std::string message;
  const std::shared_ptr<const Model> model = state_.ReadyModel(request->name(), &status, &message);
  if (status == 404) return Answered(context, Error(status, message));
  if (!KnownVersion(request->version())) {
    return Answered(context, Error(404, UnknownVersion(request->name(), request->version())));
  }
  response->set_ready(model != nullptr && !state_.stopping);
  return Answered(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::ServerMetadata(grpc::CallbackServerContext* context,
                                                      const inference::ServerMetadataRequest*,
                                                      inference::ServerMetadataResponse* response) {
  response->set_name("attnscore");
  response->set_version(Version());
  response->add_extensions("binary_tensor_data");
  response->add_extensions("model_repository");
  return Answered(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::ModelMetadata(grpc::CallbackServerContext* context,
                                                     const inference::ModelMetadataRequest* request,
                                                     inference::ModelMetadataResponse* response) {
  int status = 0;
  std::string message;
  const std::shared_ptr<const Model> model = state_.ReadyModel(request->name(), &status, &message);
  if (model == nullptr) return Answered(context, Error(status, message));
  if (!KnownVersion(request->version())) {
    return Answered(context, Error(404, UnknownVersion(request->name(), request->version())));
  }
  const json metadata = model->Metadata();
  response->set_name(metadata["name"].get<std::string>());
  for (const json& version : metadata["versions"])
    response->add_versions(version.get<std::string>());
  response->set_platform(metadata["platform"].get<std::string>());
  const auto add = [](const json& entry, inference::ModelMetadataResponse::TensorMetadata* tensor) {
    tensor->set_name(entry["name"].get<std::string>());
    tensor->set_datatype(entry["datatype"].get<std::string>());
    for (const json& dim : entry["shape"]) tensor->add_shape(dim.get<int64_t>());
  };
  for (const json& entry : metadata["inputs"]) add(entry, response->add_inputs());
  for (const json& entry : metadata["outputs"]) add(entry, response->add_outputs());
  return Answered(context, grpc::Status::OK);
}

// A message's bytes count against the byte budget until its answer is
// handed to gRPC, as a REST body's do until it is answered; gRPC has read
// the message already, so one that does not fit is refused at once rather
// than kept waiting. (Held until gRPC had sent the answer, by a reactor of
// the server's own, a toy call at 8 at once took 0.9 more context switches
// and about 10 µs more of the server's CPU: gRPC runs such a reactor's
// OnDone on another thread.) A call that takes a free slot computes on
// the gRPC thread that read it; one that must wait for a slot waits on a
// thread of `waiting_`; one that finds no place there either is refused, as
// Gate::Enter refuses.
grpc::ServerUnaryReactor* GrpcService::ModelInfer(grpc::CallbackServerContext* context,
                                                  const inference::ModelInferRequest* request,
                                                  inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (state_.stopping) {  // until gRPC shuts down (AwaitDelivery)
    reactor->Finish(LoggedInfer(*request, response, Slot::kStopping));
    return reactor;
  }
  const auto bytes = static_cast<int64_t>(request->ByteSizeLong());
  if (!state_.budget.TryReserve(bytes)) {
    reactor->Finish(LoggedInfer(*request, response, Slot::kOverBudget));
    return reactor;
  }
  // Shared with a waiting call's closure, which lives until the call has run.
  const auto hold = std::make_shared<const BudgetHold>(&state_.budget, bytes);
  if (state_.gate.TryEnter()) {
    reactor->Finish(LoggedInfer(*request, response, Slot::kHeld));
  } else if (!waiting_.Post([this, request, response, reactor, hold] {
               // What gRPC does for a handler that throws, here by hand: no
               // exception may leave a thread of WaitingCalls.
               grpc::Status status(grpc::StatusCode::UNKNOWN, "internal error");
               try {
                 status = LoggedInfer(*request, response, Slot::kWait);
               } catch (const std::exception& e) {
                 status = grpc::Status(grpc::StatusCode::UNKNOWN, e.what());
               }
               reactor->Finish(status);
             })) {
    reactor->Finish(LoggedInfer(*request, response, Slot::kRefused));
  }
  return reactor;
}

grpc::experimental::Interceptor* LiveCalls::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo*) {
  return new CountedCall(&count_);
}

// The calls first: once none is left, every answer so far is in the
// kernel's send queues. Calls still come (ModelInfer is refused at once while
// stopping; the others are answered, as small), so a busy server gets here
// too; one that comes between the last reading and gRPC's shutdown is not
// waited for.
void AwaitDelivery(const LiveCalls& calls, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    if (calls.count() == 0 && UnacknowledgedBytes() == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int GrpcService::Infer(const inference::ModelInferRequest& request,
                       inference::ModelInferResponse* response, Slot slot, std::string* error) {
  if (slot == Slot::kStopping) {
    *error = "attnscore-server is stopping: it takes no new calls";
    return 503;
  }
  std::optional<GateSlot> held;  // left on return
  if (slot == Slot::kHeld) held.emplace(&state_.gate);
  if (slot == Slot::kOverBudget) {
    *error = state_.OverBudget(static_cast<int64_t>(request.ByteSizeLong()));
    return 503;
  }
  int status = 0;
  const std::shared_ptr<const Model> model =
      state_.ReadyModel(request.model_name(), &status, error);
  if (model == nullptr) return status;
  if (!KnownVersion(request.model_version())) {
    *error = UnknownVersion(request.model_name(), request.model_version());
    return 404;
  }
  if (slot == Slot::kRefused || (slot == Slot::kWait && !state_.gate.Enter())) {
    *error = state_.AtCapacity();
    return 503;
  }
  if (slot == Slot::kWait) held.emplace(&state_.gate);

  std::vector<InputTensor> inputs;
  std::vector<RequestedOutput> requested;
  std::vector<OutputData> outputs;
  Status s = ReadInputs(request, &inputs);
  for (const auto& output : request.outputs()) requested.push_back({output.name(), false});
  if (s.ok()) {
    s = model->Infer(state_.engine, inputs, Parameters(request.parameters()), requested,
                     state_.options.max_request_bytes / 4, &outputs);
  }
  if (!s.ok()) {
    *error = s.message();
    const bool client =
        s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kUnsupported;
    return client ? 400 : 500;
  }
  response->set_model_name(model->name());
  response->set_model_version("1");
  response->set_id(request.id());
  // Outputs come in the form the inputs came in: raw bytes, or typed contents.
  const bool raw = request.raw_input_contents_size() > 0;
  for (const OutputData& output : outputs) {
    auto* tensor = response->add_outputs();
    tensor->set_name(output.name);
    tensor->set_datatype("FP32");
    for (int64_t dim : output.dims) tensor->add_shape(dim);
    if (raw) {
      response->add_raw_output_contents(reinterpret_cast<const char*>(output.data.data()),
                                        output.data.size() * sizeof(float));
    } else {
      tensor->mutable_contents()->mutable_fp32_contents()->Add(output.data.begin(),
                                                               output.data.end());
    }
  }
  return 200;
}

WaitingCalls::~WaitingCalls() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  posted_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

bool WaitingCalls::Post(std::function<void()> call) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || calls_.size() + running_ >= max_calls_) return false;
  calls_.push_back(std::move(call));
  // Each call posted has a thread not running one to take it, so there are
  // at most running_ + calls_.size() <= max_calls_ threads.
  if (threads_.size() - running_ < calls_.size()) {
    try {
      threads_.emplace_back([this] { Run(); });
    } catch (const std::system_error&) {  // no thread to be had
      if (threads_.size() == running_) {
        calls_.pop_back();
        return false;
      }
    }
  }
  posted_.notify_one();
  return true;
}

void WaitingCalls::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    posted_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
    if (calls_.empty()) return;  // stopping, every call run
    std::function<void()> call = std::move(calls_.front());
    calls_.pop_front();
    ++running_;
    lock.unlock();
    call();
    lock.lock();
    --running_;
  }
}

}  // namespace attnscore::server
