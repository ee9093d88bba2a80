// attnscore-server: the engine behind the Open Inference Protocol's REST
// endpoints and gRPC service (docs/serving.md). Uses the library only
// through its public API.
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnscore/attnscore.h"
#include "cli/args.h"
#include "grpc_service.h"
#include "http.h"
#include "repository.h"
#include "service.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace attnscore::server {
namespace {

// The CPUs this process may run on: its affinity mask's (taskset), no more
// than its cgroup's CPU quota rounded up (cgroup v2's cpu.max, "QUOTA
// PERIOD" or "max PERIOD"; v1's cpu.cfs_quota_us over cpu.cfs_period_us,
// -1 for none; each of the cgroup /proc/self/cgroup names); at least 1. A
// container given 2 CPUs on a 64-core host counts 2.
int64_t UsableCpus() {
  int64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  const auto cap = [&cpus](long long quota, long long period) {
    if (quota > 0 && period > 0) cpus = std::min<int64_t>(cpus, (quota + period - 1) / period);
  };
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    // "ID:CONTROLLERS:PATH"; v2's line is "0::PATH".
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    if (line.rfind("0::", 0) == 0) {
      std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
      std::string quota;
      long long period = 0;
      if (max >> quota >> period && quota != "max") cap(std::atoll(quota.c_str()), period);
    } else if ((',' + controllers + ',').find(",cpu,") != std::string::npos) {
      long long quota = 0, period = 0;
      std::ifstream("/sys/fs/cgroup/cpu" + path + "/cpu.cfs_quota_us") >> quota;
      std::ifstream("/sys/fs/cgroup/cpu" + path + "/cpu.cfs_period_us") >> period;
      cap(quota, period);
    }
  }
  return cpus;
}

constexpr const char* kUsage = R"(usage: attnscore-server [flags]

Serves attnscore's ops and models over the Open Inference Protocol (KServe v2)
in its two forms. REST/JSON (HTTP/1.1): GET /v2, /v2/health/live, /v2/health/ready,
/v2/models/NAME, /v2/models/NAME/ready, /metrics; POST /v2/models/NAME/infer,
/v2/repository/index, /v2/repository/models/NAME/load and .../unload.
gRPC: the service inference.GRPCInferenceService (ServerLive, ServerReady,
ModelReady, ServerMetadata, ModelMetadata, ModelInfer).
SIGTERM or SIGINT stops taking inference requests, finishes those in flight and exits 0.

  --host HOST               address to listen on (default 127.0.0.1)
  --port PORT               port (default 8000; 0 picks a free one). The chosen
                            address is printed on stdout once listening.
  --grpc-port PORT          gRPC port (default 8001; 0 picks a free one), on
                            the same host; printed on stdout's second line
  --models DIR              serve each DIR/NAME.safetensors as model NAME:
                            additive, concat, bilinear or multihead, the kind
                            and its parameters (num_heads, query_size) from
                            the file's __metadata__ or DIR/NAME.json; a file
                            it cannot serve is listed not ready, with the
                            reason on stderr
  --threads N               engine threads per request (default 1); one
                            request at a time has them, others meanwhile run
                            on their worker's thread alone
  --workers N               requests computed at once (default: the CPUs this
                            process may use, by its affinity and cgroup quota,
                            / threads)
  --max-queue N             requests waiting for a worker; more get 503 with
                            Retry-After (default 64)
  --max-request-bytes N     larger bodies get 413 (default 16777216); outputs
                            are limited to N/4 floats. A JSON body takes up to
                            about 50 times its size in memory while parsed
  --max-inflight-bytes N    bytes of request bodies and gRPC messages held at
                            once, reserved before a body is read; a request
                            that would pass it waits up to 0.5 s, then gets
                            503 with Retry-After (a gRPC call: UNAVAILABLE at
                            once) (default: workers * max-request-bytes);
                            gRPC's own buffers are held to twice it
  --connections N           connections open at once (default 256); at the
                            limit, a new one takes the place of the one that
                            has waited longest for a request's headers
  --request-timeout S       a request's headers and body must arrive within S
                            seconds of its first byte, an answer be taken
                            within S seconds of progress (default 30)
  --isa NAME                cap the instruction set: scalar, sse4, avx2, avx512, best
  --help, --version
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "attnscore-server: error: %s\n", message.c_str());
  return 2;
}

// While the server starts, a thread that takes SIGTERM or SIGINT (blocked
// in every thread, see Serve) and ends the process with 128 + the signal.
// Started() (or destruction, on a failed start) ends the watch; a signal
// after that waits for the stopper.
class StartGuard {
 public:
  explicit StartGuard(const sigset_t& signals)
      : thread_([this, signals] {
          const timespec tick{0, 20'000'000};
          while (!started_.load()) {
            const int number = sigtimedwait(&signals, nullptr, &tick);
            if (number > 0) {
              std::fprintf(stderr, "attnscore-server: stopped while starting (%s)\n",
                           number == SIGTERM ? "SIGTERM" : "SIGINT");
              std::_Exit(128 + number);
            }
          }
        }) {}
  ~StartGuard() { Started(); }
  StartGuard(const StartGuard&) = delete;
  StartGuard& operator=(const StartGuard&) = delete;

  void Started() {
    started_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> started_{false};
  std::thread thread_;
};

// Once a second while no request computes, gives the free pages of the
// heaps back to the system (malloc_trim): the heaps keep the blocks requests
// free, large bodies and gRPC's messages of many small blocks alike, so
// without it a burst's memory would stay resident.
class IdleTrimmer {
 public:
  explicit IdleTrimmer(const Gate& gate) : thread_([this, &gate] { Run(gate); }) {}
  ~IdleTrimmer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    stopped_.notify_one();
    thread_.join();
  }
  IdleTrimmer(const IdleTrimmer&) = delete;
  IdleTrimmer& operator=(const IdleTrimmer&) = delete;

 private:
  void Run(const Gate& gate) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopped_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
      if (gate.running() == 0 && gate.waiting() == 0) malloc_trim(0);
    }
  }

  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stop_ = false;
  std::thread thread_;
};

int Serve(const std::vector<std::string>& argv) {
  cli::Args args;
  Status s = cli::ParseArgs(argv, {"--help", "--version"},
                            {"--host", "--port", "--models", "--threads", "--workers",
                             "--max-queue", "--max-request-bytes", "--connections", "--isa",
                             "--grpc-port", "--max-inflight-bytes", "--request-timeout"},
                            &args);
  if (!s.ok()) return Fail(s.message() + " (see --help)");
  if (args.has("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.has("--version")) {
    std::printf("attnscore-server %s\n", Version());
    return 0;
  }
  if (!args.words.empty()) return Fail("unexpected argument '" + args.words[0] + "' (see --help)");

  const int64_t cores = UsableCpus();
  int64_t port, grpc_port, threads, workers, max_queue, max_bytes, connections, max_inflight,
      request_timeout;
  if (!(s = cli::ParseInt(args, "--port", 8000, 0, 65535, &port)).ok() ||
      !(s = cli::ParseInt(args, "--grpc-port", 8001, 0, 65535, &grpc_port)).ok() ||
      !(s = cli::ParseInt(args, "--threads", 1, 1, kMaxThreads, &threads)).ok() ||
      !(s = cli::ParseInt(args, "--workers", std::max<int64_t>(1, cores / threads), 1, 4096,
                          &workers))
           .ok() ||
      !(s = cli::ParseInt(args, "--max-queue", 64, 0, 1 << 20, &max_queue)).ok() ||
      !(s = cli::ParseInt(args, "--max-request-bytes", int64_t{16} << 20, 1024, int64_t{1} << 40,
                          &max_bytes))
           .ok() ||
      !(s = cli::ParseInt(args, "--connections", 256, 1, 65536, &connections)).ok() ||
      !(s = cli::ParseInt(args, "--request-timeout", 30, 1, 3600, &request_timeout)).ok() ||
      !(s = cli::ParseInt(args, "--max-inflight-bytes", workers * max_bytes, max_bytes,
                          int64_t{1} << 62, &max_inflight))
           .ok()) {
    return Fail(s.message());
  }
  EngineOptions engine_options;
  engine_options.threads = static_cast<int>(threads);
  if (args.has("--isa") && !ParseIsa(args.get("--isa"), &engine_options.isa)) {
    return Fail("--isa is '" + args.get("--isa") + "'; want scalar, sse4, avx2, avx512 or best");
  }

  // The heaps keep what requests free while requests run, and IdleTrimmer
  // gives their free pages back once a second while none computes. A buffer
  // mapped for itself and unmapped when freed (glibc's way past
  // M_MMAP_THRESHOLD) costs its pages' faults on every request: a 4 MiB
  // binary decode request spent three quarters of its server time faulting.
  // So blocks up to 32 MiB, glibc's most, come from the heaps; no heap
  // shrinks as blocks are freed; and there is one heap (arena), not glibc's
  // eight per CPU, so that what any thread frees serves the next request and
  // the memory kept is what requests held at once (two 8 MiB requests at a
  // time kept 17 MiB with one heap, 27-34 MiB with two or four).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  mallopt(M_ARENA_MAX, 1);

  // SIGTERM and SIGINT go to one waiting thread only: block them before any
  // other thread starts (threads inherit the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is an error on its socket, not our exit
  // Until the server listens, a stop signal ends the process at once: a
  // start held up (a slow disk, a file that blocks) can always be stopped.
  StartGuard start_guard(stop_signals);

  std::unique_ptr<Engine> engine;
  if (!(s = Engine::Create(engine_options, &engine)).ok()) return Fail(s.message());
  std::unique_ptr<ModelRepository> models;
  if (!(s = ModelRepository::Open(args.get("--models"), &models)).ok()) return Fail(s.message());

  ServiceOptions options;
  options.workers = static_cast<int>(workers);
  options.max_queue = static_cast<int>(max_queue);
  options.max_request_bytes = max_bytes;
  options.max_inflight_bytes = max_inflight;
  ServerState state(*engine, *models, options);
  IdleTrimmer trimmer(state.gate);
  Service service(state);
  http::Limits limits;
  limits.max_body_bytes = max_bytes;
  limits.max_connections = static_cast<int>(connections);
  limits.request_timeout = std::chrono::seconds(request_timeout);
  http::Server http(limits, service.Hooks());
  const std::string host = args.get("--host", "127.0.0.1");
  std::string error;
  const int bound = http.Bind(host, static_cast<int>(port), &error);
  if (bound < 0) return Fail(error);

  // gRPC on the same host: an IPv6 address goes in brackets.
  GrpcService grpc_service(state);
  grpc::ServerBuilder builder;
  const std::string grpc_host = host.find(':') == std::string::npos ? host : "[" + host + "]";
  int grpc_bound = 0;
  builder.AddListeningPort(grpc_host + ":" + std::to_string(grpc_port),
                           grpc::InsecureServerCredentials(), &grpc_bound);
  builder.RegisterService(&grpc_service);
  auto counted_calls = std::make_unique<LiveCalls>();
  const LiveCalls* live_calls = counted_calls.get();  // owned by the server once built
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::move(counted_calls));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // A message is a request's whole body: the same limit as REST's.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(-1);
  // gRPC's own buffers (messages being read or written, and the read buffer
  // a connection keeps between messages, as large as its last ones) are
  // held to twice the byte budget: past it gRPC frees idle connections'
  // buffers, then cancels streams (RESOURCE_EXHAUSTED). Unbounded, 40
  // connections that had each sent three 2.7 MiB messages kept 131 MiB
  // between them once idle, and one 64 MiB message over the limit was read
  // whole before its refusal; at the budget itself, over-limit messages made
  // gRPC reset other clients' good calls.
  grpc::ResourceQuota grpc_buffers("attnscore-server gRPC buffers");
  grpc_buffers.Resize(static_cast<size_t>(2 * std::min(max_inflight, int64_t{1} << 61)));
  builder.SetResourceQuota(grpc_buffers);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (grpc_server == nullptr || grpc_bound == 0) {
    return Fail("cannot listen for gRPC on " + grpc_host + ":" + std::to_string(grpc_port) +
                " (address in use, or not this machine's)");
  }
  start_guard.Started();

  std::thread stopper([&] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    state.stopping = true;
    http.Stop();  // Run returns once the requests in flight are answered
    // The RPCs in flight are answered and their answers delivered before
    // gRPC shuts down (grpc_service.h); any still running after 30 s is
    // cancelled.
    constexpr std::chrono::seconds kGrace(30);
    const auto system_deadline = std::chrono::system_clock::now() + kGrace;
    AwaitDelivery(*live_calls, std::chrono::steady_clock::now() + kGrace);
    grpc_server->Shutdown(system_deadline);
  });
  std::printf(
      "attnscore-server: listening on http://%s:%d (%zu models; engine %d thread(s), "
      "%d worker(s))\n",
      host.c_str(), bound, models->size(), engine_options.threads, options.workers);
  std::printf("attnscore-server: gRPC listening on %s:%d\n", grpc_host.c_str(), grpc_bound);
  std::fflush(stdout);
  http.Run();
  stopper.join();
  grpc_server->Wait();
  std::fprintf(stderr, "attnscore-server: stopped\n");
  // Every request is answered: the process ends here, before gRPC's library
  // shuts down (grpc_shutdown, as the last gRPC object goes), which joins a
  // thread of gRPC's own that may sit polling with a 10 s timeout: 2 of 6
  // stops took 10.2 s. Nothing left is the system's to keep.
  std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
  __lsan_do_leak_check();  // what an exit would have checked
#endif
  std::_Exit(0);
}

}  // namespace
}  // namespace attnscore::server

int main(int argc, char** argv) {
  try {
    return attnscore::server::Serve(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::bad_alloc&) {
    std::fputs("attnscore-server: error: out of memory\n", stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnscore-server: error: %s\n", e.what());
  }
  return 1;
}
