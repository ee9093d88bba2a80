#include "interrupt.h"

#include <climits>
#include <optional>

#include "attnscore/cancel.h"

namespace attnscore::python {

namespace {

// At most one interruptible call runs at a time (the main thread's), so one
// token and one chained action serve it.
CancelToken interrupted;
struct sigaction chained;
unsigned long main_thread = 0;
// signal.getsignal and signal.default_int_handler, kept for the process's
// life (never destroyed: no Python object may outlive the interpreter).
py::object* get_python_handler = nullptr;
py::object* default_python_handler = nullptr;

bool IsFunction(const struct sigaction& action) {
  if (action.sa_flags & SA_SIGINFO) return action.sa_sigaction != nullptr;
  return action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN;
}

// Async-signal-safe: an atomic store, then the chained handler (Python's,
// itself async-signal-safe: it marks the signal for the main thread).
void OnInterrupt(int signal, siginfo_t* info, void* context) {
  interrupted.Cancel();
  if (chained.sa_flags & SA_SIGINFO) {
    chained.sa_sigaction(signal, info, context);
  } else {
    chained.sa_handler(signal);
  }
}

}  // namespace

void InitInterrupts() {
  main_thread = PyThread_get_thread_ident();
  py::module_ signal = py::module_::import("signal");
  get_python_handler = new py::object(signal.attr("getsignal"));
  default_python_handler = new py::object(signal.attr("default_int_handler"));
}

int64_t Elements(std::initializer_list<const std::vector<int64_t>*> shapes) {
  int64_t total = 0;
  for (const std::vector<int64_t>* shape : shapes) {
    int64_t count = 1;
    for (int64_t dim : *shape) {
      if (dim != 0 && count > INT64_MAX / dim) return INT64_MAX;
      count *= dim;
    }
    if (total > INT64_MAX - count) return INT64_MAX;
    total += count;
  }
  return total;
}

Interruptible::Interruptible(int64_t output_elements) {
  if (output_elements < kInterruptibleElements) return;
  if (PyThread_get_thread_ident() != main_thread) return;
  // Only Python's default: a handler of the program's own may mean to let
  // the call finish.
  if (!(*get_python_handler)(SIGINT).is(*default_python_handler)) return;
  if (sigaction(SIGINT, nullptr, &previous_) != 0 || !IsFunction(previous_)) return;
  chained = previous_;
  interrupted.Reset();
  struct sigaction ours {};
  ours.sa_sigaction = OnInterrupt;
  ours.sa_flags = SA_SIGINFO | (previous_.sa_flags & SA_RESTART);
  sigemptyset(&ours.sa_mask);
  active_ = sigaction(SIGINT, &ours, nullptr) == 0;
}

Interruptible::~Interruptible() {
  if (active_) sigaction(SIGINT, &previous_, nullptr);
}

Status Interruptible::Run(const std::function<Status()>& call) {
  Status status;
  {
    py::gil_scoped_release release;
    std::optional<CancelScope> scope;
    if (active_) scope.emplace(interrupted);
    status = call();
  }
  if (status.code() == StatusCode::kCancelled && active_ && interrupted.cancelled()) {
    // Python's handler, run now: KeyboardInterrupt.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  return status;
}

}  // namespace attnscore::python
