// Ctrl-C during an engine call: SIGINT cancels the call (attnscore/cancel.h)
// and raises KeyboardInterrupt, as Python does between bytecodes.
#ifndef ATTNSCORE_PYTHON_INTERRUPT_H_
#define ATTNSCORE_PYTHON_INTERRUPT_H_

#include <pybind11/pybind11.h>

#include <csignal>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <vector>

#include "attnscore/status.h"

namespace attnscore::python {

namespace py = pybind11;

// Records the main thread (call at import).
void InitInterrupts();

// One engine call that SIGINT may stop. Made with the GIL held. On the main
// thread (the one Python delivers SIGINT to), while SIGINT's Python handler
// is the default (signal.default_int_handler, which raises
// KeyboardInterrupt), it puts a C handler of its own in front of Python's
// that cancels the call and then runs Python's, and takes it away when
// destroyed. A call cancelled so stops within about a row of its work, and
// Run raises KeyboardInterrupt. Elsewhere (another thread, a handler of
// the program's own, SIGINT ignored) nothing changes: the call runs to its
// end and Python runs the handler after it.
//
// Only for calls whose outputs, the attention weights counted whether asked
// for or not, hold at least kInterruptibleElements: a smaller call ends
// within about a millisecond, sooner than Ctrl-C needs, and the setup (a
// Python call and three sigaction calls) costs more than the call itself:
// d2l's dot-product toy took 8.5 µs a call with it and 1.1 µs without (the
// same run, on an AMD EPYC Zen 5). Smaller calls run as before.
constexpr int64_t kInterruptibleElements = int64_t{1} << 16;

// The elements of each shape in `shapes`, summed (saturating).
int64_t Elements(std::initializer_list<const std::vector<int64_t>*> shapes);

class Interruptible {
 public:
  explicit Interruptible(int64_t output_elements);
  ~Interruptible();
  Interruptible(const Interruptible&) = delete;
  Interruptible& operator=(const Interruptible&) = delete;

  // Whether a SIGINT can stop this call: outputs the caller gave are then
  // written through temporaries, so that a stopped call leaves them alone.
  bool active() const { return active_; }
  // call() with the GIL released; throws as above when SIGINT stopped it.
  Status Run(const std::function<Status()>& call);

 private:
  bool active_ = false;
  struct sigaction previous_ {};
};

}  // namespace attnscore::python

#endif  // ATTNSCORE_PYTHON_INTERRUPT_H_
